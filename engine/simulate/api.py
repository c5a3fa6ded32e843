"""`simulate(trace, spec)`: build the task graph, apply what-if edits, schedule, summarise."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import numpy as np

from engine.analysis.breakdown import TimeBreakdown
from engine.progress import Progress, report
from engine.simulate.config import SimConfig
from engine.simulate.critical_path import critical_path
from engine.simulate.graph import build_graph
from engine.simulate.result import SimResult, iteration_ms, predicted_trace
from engine.simulate.schedule import solve
from engine.simulate.sensitivity import sensitivity as sensitivity_block
from engine.simulate.stragglers import straggler_table

if TYPE_CHECKING:
    from engine.trace.model import Trace


def simulate(
    trace: Trace,
    spec: Any = None,
    *,
    config: SimConfig | None = None,
    progress: Progress | None = None,
    sensitivity: bool = False,
) -> SimResult:
    """Predict `trace` (an engine `Trace`) under the what-if `spec` (a WhatIfSpec, dict or None).

    Edits of the spec run in order; structural ones (layers) rewrite the events table before the
    graph is built, cost ones (speed-ups, batch, data-parallel degree) change segment lengths of
    the built graph. See engine/simulate/whatif/ for each edit's assumptions. `sensitivity`:
    also schedule the graph once per category of engine/simulate/sensitivity.py, 10 % faster.
    """
    from engine.simulate.whatif import WhatIfSpec, apply_edits

    cfg = config or SimConfig()
    wspec = spec if isinstance(spec, WhatIfSpec) else WhatIfSpec.parse(spec or {"version": 1, "edits": []})
    warnings: list[str] = []
    events = trace.events
    if events is None or len(events) == 0:
        from engine.errors import TraceError

        raise TraceError("the trace has no Kineto events to simulate (an ET alone has no timing)")
    report(progress, 0.05, "building task graph")
    t0 = time.perf_counter()
    ctx = apply_edits(wspec, trace, cfg, stage="events")
    from engine.simulate.budget import check_tasks

    check_tasks(len(ctx.events), "simulate")  # one task per event: refused before the graph is built
    g = build_graph(ctx.events, cfg)
    ctx.graph = g
    if "_scale" in g.tasks:  # time factors left by structural edits (e.g. optimizer growth)
        g.scale_tasks(g.tasks["_scale"].fillna(1.0).to_numpy(np.float64))
    apply_edits(wspec, trace, cfg, stage="graph", ctx=ctx)
    build_s = time.perf_counter() - t0
    report(progress, 0.4, f"scheduling {g.n_tasks} tasks")
    t1 = time.perf_counter()
    sched = solve(g, cfg.max_rounds)
    sim_s = time.perf_counter() - t1
    report(progress, 0.8, "summarising")
    warnings.extend(g.warnings)
    warnings.extend(ctx.warnings)
    if g.cpu_only:
        warnings.append("no GPU events in the trace: simulated CPU-only (host threads only)")
    pred = predicted_trace(trace.meta, g, sched, wspec.to_json()["edits"])
    ctx.predicted_events = pred.events
    apply_edits(wspec, trace, cfg, stage="result", ctx=ctx)  # analytic edits on the prediction
    measured = iteration_ms(events)
    if measured is not None and not measured >= 0:  # a step whose end is before its start (issue 31)
        warnings.append(
            f"the trace's ProfilerStep spans run backwards (mean {measured:.3f} ms): no measured step is reported"
        )
        measured = None
    predicted = iteration_ms(pred.events)
    if predicted is None:
        warnings.append("no ProfilerStep span in the trace: the iteration is the whole simulated span")
        st, en = sched.task_start(g), sched.task_end(g)
        predicted = float((np.nanmax(en) - np.nanmin(st)) / 1000.0) if len(st) else 0.0
    if measured is not None and wspec.edits:
        measured = None  # a changed setup has no measured counterpart in this trace
    bd = TimeBreakdown.from_events(pred.events)
    measured_bd = TimeBreakdown.from_events(events)
    cp = critical_path(g, sched)
    lag = straggler_table(g, sched, cp, predicted)
    sens = None
    if sensitivity:
        report(progress, 0.9, "sensitivity")
        t2 = time.perf_counter()
        sens = sensitivity_block(g, sched.times, max_rounds=cfg.max_rounds)
        sens["seconds"] = round(time.perf_counter() - t2, 6)
    report(progress, 1.0, "done")
    return SimResult(
        graph=g,
        schedule=sched,
        predicted=pred,
        measured_iteration_ms=measured,
        predicted_iteration_ms=predicted,
        breakdown=bd,
        measured_breakdown=measured_bd,
        critical_path=cp,
        stragglers=lag,
        sim_s=sim_s,
        build_s=build_s,
        warnings=warnings,
        extra=ctx.report,
        sensitivity=sens,
    )
