"""Trace ingestion: ET (all schemas 1.0.1 .. 1.1.1-chakra.0.0.4 and newer) and Kineto.

Public API (stable; every other part of the engine builds on it):
    load(*paths, rank=None, progress=None, use_cache=True) -> Trace
    summarize(trace) -> dict            # what `mystique info --json` prints for one trace
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from engine.progress import Progress

if TYPE_CHECKING:
    from engine.trace.model import CATEGORIES, PHASES, Trace

__all__ = ["CATEGORIES", "PHASES", "Trace", "load", "summarize"]


def load(
    *paths: str | os.PathLike,
    rank: int | None = None,
    progress: Progress | None = None,
    use_cache: bool = True,
) -> Trace:
    """Load ET and/or Kineto files into one `Trace` (engine.trace.loader.load has the details)."""
    from engine.trace.loader import load as _load

    return _load(*paths, rank=rank, progress=progress, use_cache=use_cache)


def summarize(trace: Trace) -> dict[str, Any]:
    from engine.trace.summary import summarize as _summarize

    return _summarize(trace)


def __getattr__(name: str) -> Any:
    """The trace model on first use: importing a submodule (engine.trace.layout, .steps, ...)
    runs this package, and a process that never touches a Trace (a CLI refusal, `--help`, the
    parser every command builds) should not pay for pandas."""
    if name in ("CATEGORIES", "PHASES", "Trace"):
        from engine.trace import model

        return getattr(model, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
