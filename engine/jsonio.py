"""JSON for the engine: orjson when it is installed (fast), the standard library otherwise.

Why a shim: the replay and capture paths must import with only torch, pandas and networkx
installed, because GPU machines may lack everything else (the lent H100/H200 images have no
orjson). The surface is exactly the part of orjson the engine uses: `loads(bytes | str)`,
`dumps(obj, option=...) -> bytes`, the three OPT_ flags and `JSONDecodeError`. The fallback
writes NaN/Infinity literals where orjson writes null; the loader reads both.
"""

from __future__ import annotations

import json as _json
from typing import Any

try:
    from orjson import OPT_INDENT_2, OPT_NON_STR_KEYS, OPT_SERIALIZE_NUMPY, JSONDecodeError, dumps, loads
except ImportError:  # pragma: no cover - exercised by tests/test_minimal_install.py in a subprocess
    import json

    JSONDecodeError = json.JSONDecodeError  # type: ignore[misc,assignment]  # the stdlib stand-in
    OPT_INDENT_2, OPT_NON_STR_KEYS, OPT_SERIALIZE_NUMPY = 1, 2, 4

    def loads(data: bytes | bytearray | memoryview | str) -> Any:  # type: ignore[misc]  # orjson names it __obj
        try:
            return json.loads(bytes(data) if isinstance(data, memoryview) else data)
        except (UnicodeDecodeError, RecursionError) as exc:  # orjson reports these as JSONDecodeError
            raise JSONDecodeError(str(exc), "", 0) from None

    def _plain(o):
        """numpy scalars/arrays (OPT_SERIALIZE_NUMPY) and other objects orjson would refuse."""
        if hasattr(o, "tolist"):
            return o.tolist()
        if hasattr(o, "item"):
            return o.item()
        raise TypeError(f"Type is not JSON serializable: {type(o).__name__}")

    def dumps(obj: Any, default: Any = None, option: int = 0) -> bytes:  # type: ignore[misc]  # orjson: __obj
        """orjson's signature: `default` is tried for what neither JSON nor numpy covers."""

        def fallback(o):
            try:
                return _plain(o)
            except TypeError:
                if default is None:
                    raise
                return default(o)

        indent = 2 if option & OPT_INDENT_2 else None
        return json.dumps(
            obj, indent=indent, separators=None if indent else (",", ":"), default=fallback, ensure_ascii=False
        ).encode()


__all__ = ["OPT_INDENT_2", "OPT_NON_STR_KEYS", "OPT_SERIALIZE_NUMPY", "JSONDecodeError", "dumps", "loads"]


class DocumentError(ValueError):
    """A user's JSON document that cannot be read: the text says why (no path; the caller names
    the file and the kind of document)."""


class BigInt(int):
    """An integer literal too long for Python's int() (over 4,300 digits), kept as its digit
    count so the field it sits in is named (`engine.rules.Finite` refuses it) instead of the
    parser raising."""

    digits: int


def _big_int(text: str) -> int:
    try:
        return int(text)
    except ValueError:  # over sys.get_int_max_str_digits(): a finite stand-in far past 64 bits
        n = BigInt(1 << 80)
        n.digits = len(text.lstrip("-"))
        return n


def loads_document(text: str, what: str) -> Any:
    """JSON text of a document a user wrote (a what-if spec, simulator settings) -> objects. NaN
    and Infinity literals are read, as are integers of any length (`BigInt`): the field rules
    then name the field that holds them. Bad JSON or nesting too deep for `what` is a
    DocumentError."""
    try:
        return _json.loads(text, parse_int=_big_int)
    except _json.JSONDecodeError as exc:
        raise DocumentError(f"not valid JSON ({exc.msg} at line {exc.lineno})") from None
    except RecursionError:
        raise DocumentError(f"nested too deeply to be {what}") from None
