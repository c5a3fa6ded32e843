"""JSON for the engine: orjson when it is installed (fast), the standard library otherwise.

Why a shim: the replay and capture paths must import with only torch, pandas and networkx
installed, because GPU machines may lack everything else (the lent H100/H200 images have no
orjson). The surface is exactly the part of orjson the engine uses: `loads(bytes | str)`,
`dumps(obj, option=...) -> bytes`, the three OPT_ flags and `JSONDecodeError`. The fallback
writes NaN/Infinity literals where orjson writes null; the loader reads both.
"""

from __future__ import annotations

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
