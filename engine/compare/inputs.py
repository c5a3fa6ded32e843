"""Resolve what a user points `mystique compare` at into loaded objects.

ORIGINAL: a capture folder (one `*_meta.json`), a capture meta file, or trace file(s)
(ET and/or Kineto; passed to `engine.trace.load`).
REPLAY: a replay output folder holding `replay.json`, a `replay.json` file, or anything
ORIGINAL accepts (then the comparison is trace vs trace).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.errors import TraceError
from engine.progress import Progress

if TYPE_CHECKING:
    from engine.replay.result import ReplayResult


def load_original(*paths: str | os.PathLike, progress: Progress | None = None) -> tuple[Any, dict | None]:
    """(Trace, capture meta or None) from one capture folder/meta file or trace file(s)."""
    from engine.trace import load
    from engine.trace.layout import is_capture, read_meta

    ps = [Path(p) for p in paths]
    for p in ps:
        if not p.exists():
            raise TraceError("no such file or folder", p)
    if len(ps) == 1 and is_capture(ps[0]):
        meta = read_meta(ps[0])
        return load(meta["et_path"], meta["kineto_path"], progress=progress), meta
    return load(*ps, progress=progress), None


def is_synthesized_et(path: str | os.PathLike) -> bool:
    """Is this ET file one engine.compose.synth wrote (its document names `mystique_synthesized`)?"""
    import gzip

    try:
        with open(Path(path), "rb") as f:
            head = f.read(2)
            f.seek(0)
            raw = gzip.GzipFile(fileobj=f).read(4096) if head == b"\x1f\x8b" else f.read(4096)
    except (OSError, EOFError):
        return False
    return b'"mystique_synthesized"' in raw


def load_replay_json(path: str | os.PathLike) -> ReplayResult | None:
    """The replay result when `path` is a folder holding replay.json or a `*replay.json` file;
    None otherwise (then the caller treats `path` as a trace). Malformed: TraceError."""
    from engine.compare.checks import check_replay_folder
    from engine.replay.result import ReplayResult

    p = Path(path)
    f = p / "replay.json" if p.is_dir() else p
    if p.is_dir() or f.name.endswith("replay.json"):
        check_replay_folder(p)  # a killed run's folder or a Kineto-only leftover
    if not (f.is_file() and f.name.endswith("replay.json")):
        return None
    result = ReplayResult.read(f)
    result.paths["replay_json"] = str(f)  # errors found later name this file
    return result
