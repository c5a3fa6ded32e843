"""Simulator settings: one frozen dataclass is the single source of defaults (CLI and UI read it).

Why these knobs exist: a trace records *when* things happened, not *why*. The graph builder
infers the why (launch, sync, cross-thread hand-off) with a few thresholds; they are named here
so a user can see and change them, and so `from_dict` can restore a run's exact settings (the
shape of every engine config: engine.settings).
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.errors import TraceError
from engine.settings import Settings


@dataclass(kw_only=True, frozen=True, slots=True)
class SimConfig(Settings):
    # A GPU task that starts within this many us of its stream predecessor's end was held by the
    # stream (FIFO), not by its launch; its launch latency then falls back to the typical one.
    stream_bound_gap_us: float = 3.0
    # Inter-thread heuristic: a host point that ends a segment of at least `thread_block_us`
    # (a thread woke up after idling or blocking) depends on the latest point of another thread of
    # the same rank at most `thread_window_us` before it.
    thread_block_us: float = 20.0
    thread_window_us: float = 10.0
    # Host calls that wait for the GPU (sync-like runtime calls), matched by name.
    sync_regex: str = r"Synchronize|^(cuda|hip)Memcpy$|^(cuda|hip)Memcpy(DtoH|HtoD|DtoD)?$"
    # Safety valve for the round-based solver (each round resolves at least one lane segment).
    max_rounds: int = 1_000_000

    WHAT = "simulate config"

    def __post_init__(self) -> None:
        for f in ("stream_bound_gap_us", "thread_block_us", "thread_window_us"):
            v = getattr(self, f)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not v >= 0:
                raise TraceError(f"simulate config {f} must be a non-negative number, not {v!r}")
        if isinstance(self.max_rounds, bool) or not isinstance(self.max_rounds, int) or self.max_rounds <= 0:
            raise TraceError(f"simulate config max_rounds must be a positive integer, not {self.max_rounds!r}")
        if not isinstance(self.sync_regex, str):
            raise TraceError(f"simulate config sync_regex must be a string, not {self.sync_regex!r}")
