"""Replay an execution trace as a benchmark: rebuild and time the recorded operators.

Public API:
    ReplayConfig(device=, warmup=, iters=, mode=, streams=, host_gaps=, lazy=, profile=, out_dir=,
                 allow_trace_code=, num_threads=, seed=, metrics=)
    replay(trace, *, config, op_ids=None, progress=None, rank=None) -> ReplayResult
    ReplaySession(trace, config=...)  # context manager; .run_iteration() on demand, .finish()
    ReplayResult.to_json() / .write(out_dir)

Coverage definitions (ReplayResult.coverage):
    selected     ops the replay set contains: `engine.graph.replay_ops(trace, mode)` (or the
                 given op_ids) plus ops that would run code shipped in the trace (PT2 Triton)
    replayed     selected ops that ran (substituted ones included)
    substituted  ran through a device-agnostic equivalent (cudnn_* / miopen_* on CPU)
    skipped      selected - replayed; `by_reason` counts why
    selected_compute / replayed_compute / compute_rate: the same over category "compute"
    by_category  {category: {selected, replayed, substituted, skipped}}
"""

from engine.replay.config import ReplayConfig
from engine.replay.executor import ReplaySession, replay
from engine.replay.result import ReplayResult

__all__ = ["ReplayConfig", "ReplayResult", "ReplaySession", "replay"]
