"""Simulation output: a predicted `Trace`, its breakdown and critical path, Kineto JSON export and
the JSON summary (`iteration_ms` and `step_spans` are engine.analysis.steps', re-exported here).

Why a `Trace`: Explore's timeline and breakdowns and Compare read `Trace.events`; a prediction
in the same shape needs no special casing anywhere downstream.

`mystique simulate --json` prints `SimResult.to_json()` (also written as `simulate.json` with
--out); this docstring is its contract:

    predicted_iteration_ms  float       mean ProfilerStep span of the prediction (the whole
                                        simulated span when the trace has none)
    measured_iteration_ms   float|null  the trace's mean ProfilerStep span; null without one or
                                        when edits change the setup
    error_pct               float|null  predicted / measured - 1, in %
    ranks                   [int]       ranks simulated
    breakdown               {...}       the prediction's TimeBreakdown (engine/simulate/
                                        breakdown.py, docs/analysis.md): step_ms, compute_ms,
                                        communication_ms, exposed_communication_ms, idle_ms (ms
                                        per step, means over ranks and steps; compute + exposed
                                        + idle = step), basis ("gpu"|"cpu"), steps, ranks [{...}]
    measured_breakdown      {...}       the same of the trace itself (what Explore shows)
    critical_path           {...}|null  the schedule's longest path (engine/simulate/
                                        critical_path.py): ms (= the step), by_kind {compute,
                                        communication, launch_host, sync_wait,
                                        host_unrecorded, idle}, ranks
                                        {rank: ms}, top_ops [{name, kind, ms}], collectives
                                        {name: ms}, crossings [{from_rank, to_rank, collective}],
                                        walks
    sensitivity             {...}|null  "what should I optimise" (engine/simulate/
                                        sensitivity.py; the CLI and the What-if page compute
                                        it): factor (1.1), step_ms, seconds, categories {gpu,
                                        cpu, communication, gemm, memory_bound, attention:
                                        {tasks, delta_ms, delta_pct}}: the predicted step's
                                        change, re-simulated with that work `factor`x faster
                                        (delta < 0: shorter; null figures: no such tasks)
    stragglers              {...}|null  with 2+ ranks: straggler {rank, reason, held_others_ms}
                                        or null, ranks [{rank, held_others_ms, waited_ms,
                                        on_critical_path_ms, reason, straggler}]
    tasks                   int         tasks in the graph
    edges                   {kind: int} dependencies per kind: intra_thread, inter_thread,
                                        launch, sync, stream_fifo, event_wait, collective, user
    tasks_per_s             float       tasks / (build_s + sim_s): graph build + what-if edits +
                                        schedule; loading and writing are not in it
    tasks_per_s_measures    str         the line above, in words
    tasks_per_s_schedule    float       the list scheduler alone (tasks / sim_s)
    sim_s, build_s          float       seconds: schedule; graph build + edits
    rounds                  int         scheduler rounds
    cpu_only                bool        the trace has no GPU events (a warning says so too)
    warnings                [str]
    sources                 [str]       the trace files read (CLI)
    predicted_trace         str         with --out: the predicted Kineto trace
  with what-if edits, also (engine/simulate/whatif/, one module per edit):
    assumptions             [str]       what each edit assumes, in words
    layers, batch, hidden   [{...}]     one entry per edit of that kind
    cost_model              {family: curve}  the per-family curves the dims edits used
    dp                      {...}       data-parallel model: ranks, collectives, exposed time
    sharding                {...}       plan ranking per rank count
    pipeline                {...}       1F1B step and bubble
    speedup                 [{...}]     inclusive speed-ups: factor, inclusive, tasks, host_ms
    kernel_times            [{...}]     source, gpu_tasks, matched_fraction, matched_time_fraction,
                                        resplit_tasks, matched_on, gpu_ms_before, gpu_ms_after,
                                        unmatched
    device                  [{...}]     source, source_from, target, default_dtype, classes
                                        {class: model, ratio, ms_before, ms_after, ...}, host,
                                        citations
"""

from __future__ import annotations

import gzip
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import pandas as pd

from engine.analysis.steps import iteration_ms, step_spans
from engine.simulate.schedule import Schedule
from engine.simulate.stragglers import straggler
from engine.simulate.taskgraph import TaskGraph, take_rows
from engine.trace.model import Trace, TraceMeta

if TYPE_CHECKING:
    from engine.analysis.breakdown import TimeBreakdown
    from engine.simulate.critical_path import CriticalPath

__all__ = ["SimResult", "export_kineto", "iteration_ms", "predicted_events", "predicted_trace", "step_spans"]

TASKS_PER_S_MEASURES = "graph build + what-if edits + schedule (trace loading and predicted-trace output excluded)"


@dataclass(kw_only=True, slots=True)
class SimResult:
    graph: TaskGraph
    schedule: Schedule
    predicted: Trace  # the predicted Kineto events as a trace (predicted_trace)
    measured_iteration_ms: float | None
    predicted_iteration_ms: float
    breakdown: TimeBreakdown  # of the predicted events
    measured_breakdown: TimeBreakdown | None = None  # the same of the trace's own events (what Explore shows)
    critical_path: CriticalPath | None = None  # of the schedule
    stragglers: pd.DataFrame | None = None  # engine.simulate.stragglers.straggler_table
    sim_s: float
    build_s: float
    warnings: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)
    sensitivity: dict[str, Any] | None = None  # engine.simulate.sensitivity (simulate(sensitivity=True))

    @property
    def tasks_per_s(self) -> float:
        """End-to-end simulation rate: tasks / (graph build + what-if edits + schedule). Trace
        loading and assembling the predicted trace are not in it (see TASKS_PER_S_MEASURES)."""
        t = self.build_s + self.sim_s
        return self.graph.n_tasks / t if t > 0 else float("inf")

    @property
    def tasks_per_s_schedule(self) -> float:
        """The list scheduler alone: tasks / schedule time."""
        return self.graph.n_tasks / self.sim_s if self.sim_s > 0 else float("inf")

    def to_json(self) -> dict[str, Any]:
        g = self.graph
        out = {
            "predicted_iteration_ms": round(self.predicted_iteration_ms, 6),
            "measured_iteration_ms": None
            if self.measured_iteration_ms is None
            else round(self.measured_iteration_ms, 6),
            "error_pct": None
            if not self.measured_iteration_ms
            else round(100 * (self.predicted_iteration_ms / self.measured_iteration_ms - 1), 4),
            "ranks": sorted(int(r) for r in g.lanes["rank"].unique()) if len(g.lanes) else [],
            "breakdown": self.breakdown.to_json(),
            "measured_breakdown": None if self.measured_breakdown is None else self.measured_breakdown.to_json(),
            "critical_path": None if self.critical_path is None else self.critical_path.to_json(),
            "stragglers": _stragglers_json(self.stragglers),
            "sensitivity": self.sensitivity,
            "tasks": g.n_tasks,
            "edges": g.edge_counts(),
            "tasks_per_s": round(self.tasks_per_s, 1),
            "tasks_per_s_measures": TASKS_PER_S_MEASURES,
            "tasks_per_s_schedule": round(self.tasks_per_s_schedule, 1),
            "sim_s": round(self.sim_s, 6),
            "build_s": round(self.build_s, 6),
            "rounds": self.schedule.rounds,
            "cpu_only": g.cpu_only,
            "warnings": list(self.warnings),
        }
        out.update(self.extra)
        return out


def _stragglers_json(table: Any) -> dict[str, Any] | None:
    if table is None or len(table) < 2:
        return None
    rows = [{k: (round(v, 6) if isinstance(v, float) else v) for k, v in r.items()} for r in table.to_dict("records")]
    return {"straggler": straggler(table), "ranks": rows}


def predicted_events(g: TaskGraph, s: Schedule) -> pd.DataFrame:
    """The task rows with simulated ts/dur (original columns kept, `ev` renumbered if copied)."""
    src = g.source.drop(columns=["_scale"], errors="ignore")
    ev = take_rows(src, g.tasks["row"].to_numpy())
    start = s.task_start(g)
    ev["ts_us"] = g.t0_us + start
    ev["dur_us"] = s.task_end(g) - start
    if ev["ev"].duplicated().any():
        ev["ev"] = np.arange(len(ev), dtype=np.int64)
    return ev


def predicted_trace(source_meta: TraceMeta, g: TaskGraph, s: Schedule, edits: list[dict] | None = None):
    """A `Trace` whose events are the prediction (ops/tensors/flows empty: timing only)."""
    from engine.trace.model import Trace

    ev = predicted_events(g, s)
    meta = cast(TraceMeta, {k: v for k, v in source_meta.items() if k not in ("iterations", "content_hash")})
    st = step_spans(ev)
    meta["iterations"] = [
        {"name": str(n), "ts_us": float(a), "dur_us": float(b), "rank": int(r)}
        for r, n, a, b in zip(st["rank"], st["name"], st["ts_us"], st["dur_us"])
    ]
    meta["simulated"] = {"edits": edits or [], "tasks": g.n_tasks}
    meta["kind"] = "kineto"
    empty = pd.DataFrame()
    return Trace(ops=empty, tensors=empty, events=ev, flows=empty, meta=meta)


def export_kineto(events: pd.DataFrame, path: str | Path, meta: dict | None = None) -> Path:
    """Write a Kineto JSON (gzipped if the name ends in .gz) that Perfetto and our loader open."""
    from engine import jsonio

    cols = {c: events[c].to_numpy() for c in ("cat", "name", "pid", "tid", "ts_us", "dur_us")}
    opt = {
        c: events[c].to_numpy(dtype=np.float64, na_value=np.nan)
        for c in ("correlation", "external_id", "rf_id", "device", "stream", "seq_num")
        if c in events
    }
    keymap = {
        "correlation": "correlation",
        "external_id": "External id",
        "rf_id": "Record function id",
        "device": "device",
        "stream": "stream",
        "seq_num": "Sequence number",
    }
    out: list[dict] = []
    for i in range(len(events)):
        args = {keymap[c]: int(v[i]) for c, v in opt.items() if np.isfinite(v[i])}
        pid, tid = str(cols["pid"][i]), str(cols["tid"][i])
        out.append(
            {
                "ph": "X",
                "cat": str(cols["cat"][i]),
                "name": str(cols["name"][i]),
                "pid": int(pid) if pid.lstrip("-").isdigit() else pid,
                "tid": int(tid) if tid.lstrip("-").isdigit() else tid,
                "ts": float(cols["ts_us"][i]),
                "dur": float(cols["dur_us"][i]),
                "args": args,
            }
        )
    doc: dict[str, Any] = {"schemaVersion": 1, "traceEvents": out, "displayTimeUnit": "ms"}
    if meta and meta.get("world_size"):
        ranks = meta.get("ranks") or [0]
        doc["distributedInfo"] = {"rank": int(ranks[0]), "world_size": int(meta["world_size"])}
    from engine.outdir import atomic_write

    data = jsonio.dumps(doc)
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    # mtime=0: the same prediction gives the same bytes
    return atomic_write(p, gzip.compress(data, compresslevel=5, mtime=0) if p.name.endswith(".gz") else data)
