"""Step windows: the `ProfilerStep#N` host spans every per-step analysis measures.

The step model lives in engine/trace/steps.py (one home for every reader); this module keeps the
names the analyses and the simulator import."""

from __future__ import annotations

from engine.trace.steps import iteration_ms, measured_steps, step_ms, step_spans

__all__ = ["iteration_ms", "measured_steps", "step_ms", "step_spans"]
