"""A trace file's raw JSON, read by a JSON parser alone: the hand counts that tests hold the
loader against (independent of engine.trace).

orjson (3-5x faster than the standard library: these reads were ~18 % of the in-process test time
on the shared traces), and the standard library where orjson refuses the text (NaN/Infinity
literals, integers over 64 bits). The last few documents are kept per process (by path, size and
mtime), since several tests of a file count the same trace: treat what comes back as read-only.
"""

from __future__ import annotations

import functools
import gzip
import json
import os
from pathlib import Path

import orjson


@functools.lru_cache(maxsize=4)
def _doc(path: str, size: int, mtime_ns: int):
    data = Path(path).read_bytes()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return json.loads(data)


def raw_doc(path: str | os.PathLike):
    """The decoded document of `path` (.json or .json.gz), shared: do not modify it."""
    st = os.stat(path)
    return _doc(str(path), st.st_size, st.st_mtime_ns)


def raw_events(path: str | os.PathLike) -> list[dict]:
    """The trace events of a Kineto file in either form (a `traceEvents` object or a bare array)."""
    doc = raw_doc(path)
    return doc if isinstance(doc, list) else doc.get("traceEvents", [])
