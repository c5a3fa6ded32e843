"""Duplicate top-level keys: a JSON document that names `traceEvents` (or any top-level key) twice.

Why refuse: JSON leaves duplicate names undefined, and readers differ: orjson and msgspec keep
the last value, the store's streaming scanner took the first array, so one trace showed one
thing on a page and another in SQL (issue 31). Both the loader and the store refuse such a file.

How, without a second parse: msgspec decodes the top level as `dict[str, msgspec.Raw]`, whose
values are zero-copy views into the document, so their offsets are known. Between two kept
values there must be exactly `, "key":` (blanks allowed); a duplicate's dropped value (and its
key) sits in one of those gaps instead, which then fails that pattern. Cost: one skip-parse of
the document, no Python objects for its contents.
"""

from __future__ import annotations

import json
import re

import numpy as np

try:  # msgspec is a core dependency; a minimal install without it takes the standard library's parse
    import msgspec
except ImportError:  # pragma: no cover - exercised by tests/test_minimal_install.py
    msgspec = None  # type: ignore[assignment]

_GAP = re.compile(rb'\s*[{,]\s*"(?:[^"\\]|\\.)*"\s*:\s*', re.DOTALL)
_KEY = re.compile(rb'"((?:[^"\\]|\\.)*)"\s*:')
_DECODER = msgspec.json.Decoder(dict[str, msgspec.Raw]) if msgspec is not None else None


def _address(buf) -> int:
    return int(np.frombuffer(buf, np.uint8).__array_interface__["data"][0]) if len(buf) else -1


def duplicate_top_level_key(data: bytes) -> str | None:
    """The first top-level key that the JSON object `data` names twice, else None (also for a
    document that is no JSON object: its own parse reports that)."""
    body = data.lstrip(b" \t\r\n")
    if not body.startswith(b"{"):
        return None
    if _DECODER is None:
        return _duplicate_lenient(body)
    try:
        top = _DECODER.decode(body)
    except msgspec.DecodeError:  # NaN literals or bad JSON: the lenient path's check, below
        return _duplicate_lenient(body)
    base = _address(body)
    spans = sorted((_address(v) - base, len(v)) for v in top.values())
    pos = 0
    for start, n in spans:
        gap = body[pos:start]
        if not _GAP.fullmatch(gap):
            return _first_repeat(gap, top)
        pos = start + n
    return None


def _first_repeat(gap: bytes, top: dict) -> str:
    """A name for the message: the first key in `gap` that the kept keys hold (else the first key)."""
    keys = []
    for m in _KEY.finditer(gap[: 1 << 16]):
        try:
            keys.append(json.loads(b'"' + m.group(1) + b'"'))
        except ValueError:
            continue
    return next((k for k in keys if k in top), keys[0] if keys else "?")


def _duplicate_lenient(body: bytes) -> str | None:
    last: list[list[str]] = []

    def hook(pairs):
        last[:] = [[k for k, _ in pairs]]
        return dict(pairs)

    try:
        json.loads(body, object_pairs_hook=hook)
    except (ValueError, RecursionError):
        return None
    seen: set[str] = set()
    for k in last[0] if last else []:
        if k in seen:
            return k
        seen.add(k)
    return None


def message(key: str) -> str:
    return f"the top-level key {key!r} appears twice (JSON readers disagree on which one counts)"
