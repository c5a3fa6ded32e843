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
    substituted  ran through a stand-in: a device-agnostic equivalent (cudnn_* / miopen_* on CPU),
                 or torch ops for a library op whose library is not installed (FBGEMM TBE;
                 vLLM's common custom ops, engine/replay/standins.py: "op -> torch stand-in (...)");
                 `by_substitution` counts them by "recorded op -> stand-in"
    skipped      selected - replayed; `by_reason` counts why
    selected_compute / replayed_compute / compute_rate: the same over category "compute"
    by_category  {category: {selected, replayed, substituted, skipped}}
"""

from typing import TYPE_CHECKING, Any

# Lazy (PEP 562): `engine.replay.config` and `.result` need no torch, and the CLI reads the
# config defaults at start-up for every command; only the executor imports torch.
_LAZY = {
    "ReplayConfig": "engine.replay.config",
    "ReplayResult": "engine.replay.result",
    "OpStatus": "engine.replay.result",
    "ReplaySession": "engine.replay.executor",
    "replay": "engine.replay.executor",
}

if TYPE_CHECKING:
    from engine.replay.config import ReplayConfig
    from engine.replay.executor import ReplaySession, replay
    from engine.replay.result import OpStatus, ReplayResult


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'engine.replay' has no attribute {name!r}")


__all__ = ["OpStatus", "ReplayConfig", "ReplayResult", "ReplaySession", "replay"]
