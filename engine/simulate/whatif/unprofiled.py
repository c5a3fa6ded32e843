"""The step without the profiler: take the profiler's host overhead out of a profiled trace.

A trace is recorded under a profiler (Kineto, and the execution-trace observer with it), which
slows the host: every op it records costs host time, in the op and between ops. On an H200 the
small MLP of benchmarks/gpu_run.py stepped in 2.5 ms unprofiled and simulated at 7.0 ms from its
profiled trace, so "GPU 2x faster" on a large batch met a host that was not there in the real run
(docs/gpu_run.md). Given the same step measured without the profiler (`step_ms`; a capture's
meta records it as `median_ms`), this edit shortens every host segment by one factor, found so
that the unchanged trace simulates to `step_ms`; the other edits of the spec then predict the
unprofiled run. Put it first.

Assumptions: the profiler's overhead is spread over the host in proportion to the host's own
time (ops and the gaps between them shrink alike: one factor, found by bisection between 1 and
1/50 on the unchanged trace); GPU tasks, launch latencies and sync waits keep their recorded
times. When the unchanged trace already simulates at or below `step_ms` the host is left as it
is; when even the smallest factor stays above it (GPU work and waits alone take longer) the
smallest factor is used and a warning says so.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import numpy as np

from engine.rules import Between, Positive
from engine.simulate.whatif.spec import Edit, register
from engine.trace.steps import step_mask

if TYPE_CHECKING:
    from engine.simulate.taskgraph import TaskGraph
    from engine.simulate.whatif.context import EditContext

MIN_FACTOR = 1 / 50  # the host at most 50x faster than recorded
ROUNDS = 14  # bisection on log factor: about 0.03 % of the factor's range


def host_points(g: TaskGraph) -> np.ndarray:
    """Mask over the graph's points: those on host lanes (threads, not GPU streams)."""
    per_lane = np.diff(g.lane_ptr)
    gpu_lane = g.lanes["gpu"].to_numpy(bool)
    return np.repeat(~gpu_lane, per_lane)


def step_ms(g: TaskGraph, times: np.ndarray) -> float:
    """Mean simulated ProfilerStep span in ms; the whole simulated span when the trace has none."""
    sp, ep = g.tasks["sp"].to_numpy(), g.tasks["ep"].to_numpy()
    steps = step_mask(g.text("name"), ~g.tasks["gpu"].to_numpy(bool))  # the one step model's host steps
    if steps.any():
        return float(np.mean(times[ep[steps]] - times[sp[steps]])) / 1e3
    return float(np.nanmax(times[ep]) - np.nanmin(times[sp])) / 1e3 if len(sp) else 0.0


def host_factor(g: TaskGraph, target_ms: float, max_rounds: int) -> tuple[float, float, float]:
    """(factor, simulated step at factor 1, simulated step at the factor) for graph `g`: the
    host factor in [MIN_FACTOR, 1] whose simulated step is `target_ms` (module docstring)."""
    from engine.simulate.schedule import solve

    host = host_points(g)
    d0 = g.pt_d.copy()

    def sim(f: float) -> float:
        g.pt_d = d0.copy()
        g.pt_d[host] *= f
        try:
            return step_ms(g, solve(g, max_rounds).times)
        finally:
            g.pt_d = d0

    at1 = sim(1.0)
    if at1 <= target_ms:
        return 1.0, at1, at1
    lo, hi = np.log(MIN_FACTOR), 0.0
    if sim(MIN_FACTOR) > target_ms:
        return MIN_FACTOR, at1, sim(MIN_FACTOR)
    for _ in range(ROUNDS):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if sim(float(np.exp(mid))) < target_ms else (lo, mid)
    f = float(np.exp((lo + hi) / 2))
    return f, at1, sim(f)


@register("unprofiled")
class Unprofiled(Edit):
    step_ms: Annotated[float, Positive(), Between(1e-3, 1e7)]  # the step measured without the profiler

    def apply(self, ctx: EditContext) -> None:
        from engine.simulate.graph import build_graph

        base = build_graph(ctx.trace.events, ctx.config)  # the unchanged trace: the factor's reference
        f, at1, at_f = host_factor(base, self.step_ms, ctx.config.max_rounds)
        if f == 1.0:
            ctx.warnings.append(
                f"unprofiled: the trace already simulates to {at1:.3f} ms, at or below step_ms "
                f"{self.step_ms:g}: the host is left as recorded"
            )
        elif at_f > self.step_ms * 1.001:
            ctx.warnings.append(
                f"unprofiled: even a {1 / MIN_FACTOR:.0f}x faster host simulates to {at_f:.3f} ms, above step_ms "
                f"{self.step_ms:g}: GPU work and waits alone take longer than the unprofiled step"
            )
        g = ctx.graph
        g.pt_d[host_points(g)] *= f
        ctx.report["unprofiled"] = {
            "step_ms": self.step_ms,
            "host_factor": round(f, 6),
            "profiled_step_ms": round(at1, 4),
            "calibrated_step_ms": round(at_f, 4),
        }
