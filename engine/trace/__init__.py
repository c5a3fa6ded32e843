"""Trace ingestion: ET (all schemas 1.0.1 .. 1.1.1-chakra.0.0.4 and newer) and Kineto.

Public API (stable; every other part of the engine builds on it):
    load(*paths, rank=None, progress=None, use_cache=True) -> Trace
    summarize(trace) -> dict            # what `mystique info --json` prints for one trace
"""

from engine.trace.model import CATEGORIES, PHASES, Trace

__all__ = ["CATEGORIES", "PHASES", "Trace", "load", "summarize"]


def load(*paths, rank=None, progress=None, use_cache=True):  # implemented in engine.trace.load
    from engine.trace.loader import load as _load

    return _load(*paths, rank=rank, progress=progress, use_cache=use_cache)


def summarize(trace):
    from engine.trace.summary import summarize as _summarize

    return _summarize(trace)
