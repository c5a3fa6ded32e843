"""Compare an original with its replay, or two traces (see replay.py for the replay.json contract).

compare(original_trace, replay_result, original_meta=meta) -> Comparison  (an engine.replay.ReplayResult)
compare(trace_a, trace_b) -> TraceDiff
"""

from __future__ import annotations

from typing import TYPE_CHECKING, overload

from engine.compare.replay import Comparison, compare_replay, rel_error
from engine.compare.traces import TraceDiff, compare_traces
from engine.replay.result import REPLAY_KEYS, ReplayResult

if TYPE_CHECKING:
    from engine.trace.model import Trace

__all__ = ["REPLAY_KEYS", "Comparison", "TraceDiff", "compare", "compare_replay", "compare_traces", "rel_error"]


@overload
def compare(
    original: Trace, replay: ReplayResult, *, original_meta: dict | None = None, labels: tuple[str, str] = ("a", "b")
) -> Comparison: ...
@overload
def compare(
    original: Trace, replay: Trace, *, original_meta: dict | None = None, labels: tuple[str, str] = ("a", "b")
) -> TraceDiff: ...
def compare(
    original: Trace,
    replay: ReplayResult | Trace,
    *,
    original_meta: dict | None = None,
    labels: tuple[str, str] = ("a", "b"),
) -> Comparison | TraceDiff:
    """Original Trace vs a ReplayResult (-> Comparison) or vs another Trace (-> TraceDiff)."""
    if isinstance(replay, ReplayResult):
        return compare_replay(original, replay, original_meta=original_meta)
    return compare_traces(original, replay, labels=labels)
