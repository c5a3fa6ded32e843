"""Simulation output: a predicted `Trace`, its breakdown, Kineto JSON export and the JSON summary.

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
    breakdown               {compute, communication, exposed_communication, idle}  ms per
                                        iteration averaged over ranks (GPU busy time on GPU
                                        traces, top-level host work on CPU-only ones)
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
"""

from __future__ import annotations

import gzip
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from engine.simulate.collectives import comm_mask
from engine.simulate.schedule import Schedule
from engine.simulate.taskgraph import TaskGraph, take_rows

TASKS_PER_S_MEASURES = "graph build + what-if edits + schedule (trace loading and predicted-trace output excluded)"


@dataclass(kw_only=True, slots=True)
class SimResult:
    graph: TaskGraph
    schedule: Schedule
    predicted: Any  # engine.trace.model.Trace
    measured_iteration_ms: float | None
    predicted_iteration_ms: float
    breakdown: dict[str, float]
    sim_s: float
    build_s: float
    warnings: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)

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
            "breakdown": {k: round(float(v), 6) for k, v in self.breakdown.items()},
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


def step_spans(events: pd.DataFrame) -> pd.DataFrame:
    """ProfilerStep#N host spans (the iteration the trace measured), one row per step and rank."""
    from engine.trace import columns as _cols

    m = _cols.where(events["name"], lambda s: s.startswith("ProfilerStep#")) & ~_cols.isin(
        events["cat"], ("kernel", "gpu_user_annotation")
    )
    return events.loc[m, ["rank", "name", "ts_us", "dur_us"]]


def iteration_ms(events: pd.DataFrame) -> float | None:
    """Mean ProfilerStep span in ms over all steps and ranks, None when the trace has none."""
    st = step_spans(events)
    if st.empty:
        return None
    return float(st["dur_us"].mean()) / 1000.0


def _union(start: np.ndarray, end: np.ndarray) -> float:
    if not len(start):
        return 0.0
    o = np.argsort(start)
    s, e = start[o], end[o]
    run_end = np.maximum.accumulate(e)
    new = np.ones(len(s), bool)
    new[1:] = s[1:] > run_end[:-1]
    gid = np.cumsum(new) - 1
    seg_s = s[new]
    seg_e = np.zeros(gid[-1] + 1)
    np.maximum.at(seg_e, gid, e)
    return float((seg_e - seg_s).sum())


def _intervals_minus(a_s, a_e, b_s, b_e) -> float:
    """Length of union(a) not covered by union(b)."""
    return _union(np.concatenate([a_s, b_s]), np.concatenate([a_e, b_e])) - _union(b_s, b_e)


def breakdown(g: TaskGraph, s: Schedule, window: tuple[float, float] | None = None) -> dict[str, float]:
    """compute / communication / exposed_communication / idle in ms, averaged over ranks.

    GPU traces: busy time of GPU tasks (communication = collective kernels; exposed = the part of
    it no compute kernel overlaps). CPU-only traces: busy time of top-level host tasks
    (communication = host collective ops). Window: the simulated step span(s) or the whole run.
    """
    t = g.tasks
    start = s.task_start(g)
    end = s.task_end(g)
    gpu = t["gpu"].to_numpy()
    if gpu.any():
        comm = comm_mask(g)
        busy = gpu
    else:
        from engine.trace import columns as _cols

        rx = re.compile(r"c10d::|nccl:|gloo:|all_?reduce|all_?gather|reduce_?scatter|all_?to_?all")
        comm = (t["parent"].to_numpy() < 0) & _cols.where(t["name"], lambda s: bool(rx.search(s)))
        busy = _shallow_work(t) | comm
    ranks = t["rank"].to_numpy()
    out = {"compute": 0.0, "communication": 0.0, "exposed_communication": 0.0, "idle": 0.0}
    rank_list = np.unique(ranks) if len(ranks) else np.array([0])
    for r in rank_list:
        rm = ranks == r
        if window is None:
            lo = start[rm].min() if rm.any() else 0.0
            hi = end[rm].max() if rm.any() else 0.0
        else:
            lo, hi = window
        cs, ce = np.clip(start, lo, hi), np.clip(end, lo, hi)
        comp = busy & ~comm & rm
        cm = comm & rm
        comp_u = _union(cs[comp], ce[comp])
        comm_u = _union(cs[cm], ce[cm])
        exposed = _intervals_minus(cs[cm], ce[cm], cs[comp], ce[comp])
        all_u = _union(cs[busy & rm], ce[busy & rm])
        out["compute"] += comp_u
        out["communication"] += comm_u
        out["exposed_communication"] += exposed
        out["idle"] += max(hi - lo - all_u, 0.0)
    n = len(rank_list)
    return {k: v / n / 1000.0 for k, v in out.items()}


def _shallow_work(t: pd.DataFrame) -> np.ndarray:
    """Host tasks that are work (not annotations) and whose ancestors are all annotations."""
    from engine.trace import columns as _cols

    annot = _cols.isin(t["cat"], ("user_annotation", "python_function")) | _cols.where(
        t["name"], lambda s: s.startswith("ProfilerStep#")
    )
    parent = t["parent"].to_numpy()
    gpu = t["gpu"].to_numpy()
    # ancestor-all-annotation flag, resolved by iterating parent pointers (depth-bounded)
    under_work = np.zeros(len(t), bool)
    p = parent.copy()
    while (p >= 0).any():
        ok = p >= 0
        under_work[ok] |= ~annot[p[ok]]
        p = np.where(ok, parent[np.maximum(p, 0)], -1)
    return ~gpu & ~annot & ~under_work


def predicted_trace(source_meta: dict, g: TaskGraph, s: Schedule, edits: list[dict] | None = None):
    """A `Trace` whose events are the prediction (ops/tensors/flows empty: timing only)."""
    from engine.trace.model import Trace

    ev = predicted_events(g, s)
    meta = {k: v for k, v in source_meta.items() if k not in ("iterations", "content_hash")}
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
    data = jsonio.dumps(doc)
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    if p.name.endswith(".gz"):
        with gzip.open(p, "wb", compresslevel=5) as fh:
            fh.write(data)
    else:
        p.write_bytes(data)
    return p
