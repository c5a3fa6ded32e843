"""Finding and reading the capture meta (`<name>_meta.json`) that belongs to trace files.

Why one home: the CLI (replay thread count), the replay executor, compare (the capture's
unprofiled step time) and the dashboard each looked for the meta file their own way (exact
sibling name, "the one *_meta.json in the folder", "meta.json"), so the same trace could be
compared against one meta and replayed with the threads of another. The rule, once:

1. a `*_meta.json` path is its own meta;
2. a capture folder holds exactly one `*_meta.json`;
3. a trace file `<name>_et.json[.gz]` / `<name>_kineto.json[.gz]` (ranks: `<name>_rank<r>_...`)
   has `<name>_meta.json` beside it;
4. `loose=True` also accepts the only `*_meta.json` (or a `meta.json`) in the trace's folder.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from engine import jsonio
from engine.errors import TraceError

_TRACE_NAME = re.compile(r"_(?:et|kineto)\.json(?:\.gz|\.tar\.gz)?$")


def meta_file(path: str | os.PathLike, *, loose: bool = True) -> Path | None:
    """The capture meta of a trace file or capture folder (rules in the module docstring)."""
    p = Path(str(path).split("!", 1)[0])  # "file.tar.gz!member" names a tarball member
    if p.name.endswith("_meta.json"):
        return p if p.is_file() else None
    if p.is_dir():
        metas = sorted(p.glob("*_meta.json"))
        return metas[0] if len(metas) == 1 else None
    m = _TRACE_NAME.search(p.name)
    if m:
        sibling = p.with_name(p.name[: m.start()] + "_meta.json")
        if sibling.is_file():
            return sibling
    if not loose:
        return None
    metas = sorted(p.parent.glob("*_meta.json"))
    if len(metas) == 1:
        return metas[0]
    plain = p.parent / "meta.json"
    return plain if plain.is_file() else None


def load_meta(path: str | os.PathLike) -> dict[str, Any]:
    """The JSON object of a meta file; TraceError naming the file when it is not one."""
    p = Path(path)
    try:
        meta = jsonio.loads(p.read_bytes())
    except (OSError, jsonio.JSONDecodeError) as exc:
        raise TraceError(f"cannot read capture metadata: {exc}", p) from None
    if not isinstance(meta, dict):
        raise TraceError("capture metadata is not a JSON object", p)
    return meta


def meta_for(*paths: str | os.PathLike, loose: bool = True) -> dict[str, Any] | None:
    """The one capture meta the given trace paths share, or None (none found, or several)."""
    found = {f for f in (meta_file(p, loose=loose) for p in paths) if f is not None}
    return load_meta(found.pop()) if len(found) == 1 else None


def read_meta(path: str | os.PathLike) -> dict[str, Any]:
    """A mystique capture meta (a `*_meta.json` or a capture folder holding exactly one), with
    `et_path`, `kineto_path` and `meta_path` resolved; TraceError when it is not one."""
    p = Path(path)
    if p.is_dir():
        metas = sorted(p.glob("*_meta.json"))
        if len(metas) != 1:
            raise TraceError(f"expected exactly one *_meta.json in the folder, found {len(metas)}", p)
        p = metas[0]
    meta = load_meta(p)
    if "step_ms" not in meta or "files" not in meta:
        raise TraceError("not a mystique capture meta file (no step_ms/files)", p)
    meta["et_path"] = str(p.parent / meta["files"]["et"])
    meta["kineto_path"] = str(p.parent / meta["files"]["kineto"])
    meta["meta_path"] = str(p)
    return meta


def is_capture(path: str | os.PathLike) -> bool:
    """True for a `*_meta.json` file or a folder holding exactly one (what `read_meta` reads)."""
    p = Path(path)
    return (p.is_file() and p.name.endswith("_meta.json")) or (p.is_dir() and meta_file(p) is not None)


__all__ = ["is_capture", "load_meta", "meta_file", "meta_for", "read_meta"]
