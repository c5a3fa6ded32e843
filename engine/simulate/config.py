"""Simulator settings: one frozen dataclass is the single source of defaults (CLI and UI read it).

Why these knobs exist: a trace records *when* things happened, not *why*. The graph builder
infers the why (launch, sync, cross-thread hand-off) with a few thresholds; they are named here
so a user can see and change them, and so `from_dict` can restore a run's exact settings (the
shape of every engine config: engine.settings). `parse` reads the CLI's `--config` JSON text.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Annotated, Any

from engine.errors import TraceError
from engine.jsonio import DocumentError, loads_document
from engine.rules import MAX_US, Between
from engine.settings import Settings
from engine.user_regex import Regex

US = Between(0, MAX_US)  # a time threshold


@dataclass(kw_only=True, frozen=True, slots=True)
class SimConfig(Settings):
    # A GPU task that starts within this many us of its stream predecessor's end was held by the
    # stream (FIFO), not by its launch; its launch latency then falls back to the typical one.
    stream_bound_gap_us: Annotated[float, US] = 3.0
    # Inter-thread heuristic: a host point that ends a segment of at least `thread_block_us`
    # (a thread woke up after idling or blocking) depends on the latest point of another thread of
    # the same rank at most `thread_window_us` before it.
    thread_block_us: Annotated[float, US] = 20.0
    thread_window_us: Annotated[float, US] = 10.0
    # A host thread idle (no recorded op) for at least `thread_idle_us` waited for another thread
    # (a DataLoader queue, the autograd engine's hand-off): it wakes after the latest point of
    # another thread of its rank inside the gap, however long before its wake-up that was.
    thread_idle_us: Annotated[float, US] = 1000.0
    # Host calls that wait for the GPU (sync-like runtime calls), matched by name: synchronize,
    # synchronous copies and memsets, and frees (they synchronise the device).
    sync_regex: Annotated[str, Regex()] = (
        r"Synchronize|^(cuda|hip)Memcpy(DtoH|HtoD|DtoD)?$|^(cuda|hip)Memset$|^(cuda|hip)(Free|FreeHost|HostFree)$"
    )
    # Safety valve for the round-based solver (each round resolves at least one lane segment).
    max_rounds: Annotated[int, Between(1, 1 << 40)] = 1_000_000

    WHAT = "simulator settings"

    @classmethod
    def from_dict(cls, d: Any) -> SimConfig:
        """Inverse of `to_dict`; TraceError "field: problem" (an unknown field names itself)."""
        if not isinstance(d, dict):
            raise TraceError("must be a JSON object of SimConfig fields")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise TraceError(f"{unknown[0]}: unknown field; known: {', '.join(sorted(known))}")
        return cls(**d)

    @classmethod
    def parse(cls, text: str) -> SimConfig:
        """From JSON text (the CLI's --config); NaN, deep nesting and huge numbers are read, then
        refused naming their field, as in what-if specs."""
        try:
            data = loads_document(text, "simulator settings")
        except DocumentError as exc:
            raise TraceError(str(exc)) from None
        return cls.from_dict(data)
