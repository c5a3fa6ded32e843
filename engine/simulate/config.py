"""Simulator settings: one frozen dataclass is the single source of defaults (CLI and UI read it).

Why these knobs exist: a trace records *when* things happened, not *why*. The graph builder
infers the why (launch, sync, cross-thread hand-off) with a few thresholds; they are named here
so a user can see and change them, and so `from_json` can restore a run's exact settings.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from typing import Any


@dataclass(kw_only=True, frozen=True, slots=True)
class SimConfig:
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

    def __post_init__(self) -> None:
        for f in ("stream_bound_gap_us", "thread_block_us", "thread_window_us"):
            v = getattr(self, f)
            if not isinstance(v, (int, float)) or v < 0:
                raise ValueError(f"SimConfig.{f} must be a non-negative number, got {v!r}")
        if not isinstance(self.max_rounds, int) or self.max_rounds <= 0:
            raise ValueError(f"SimConfig.max_rounds must be a positive int, got {self.max_rounds!r}")

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str | dict[str, Any]) -> SimConfig:
        data = json.loads(text) if isinstance(text, str) else dict(text)
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"SimConfig: unknown field(s) {unknown}")
        return cls(**data)
