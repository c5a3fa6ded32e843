"""One step model: the host spans that bound the iterations a trace measured.

Why one home: seven modules (the loader, the store's row reader, phases, the step windows of
the analyses, the fleet simulator, the critical path and the timeline's first view) each found
`ProfilerStep#N` spans their own way. They all ask here now:

  step_mask(names, host)  which rows are steps: a host row whose name has the vocabulary's
                          prefix (`engine.trace.vocab.STEP_PREFIX`). Kineto also writes a
                          GPU-side `ProfilerStep#N` annotation on the stream lanes; the step is
                          the host's span (the iteration the trace measured).
  step_rows(events)       those rows of an events table, in row (file) order
  iterations(events)      the same as `meta["iterations"]` records {name, ts_us, dur_us, rank}:
                          the loader and the store build them here, so both agree
  step_spans(events)      the same, one row per step and rank, in time order
  measured_steps(events)  the spans a measurement uses and where they came from
                          (`step_source`): "ProfilerStep"; else a serving framework's per-step
                          annotation, "annotation:<pattern>" (vLLM's `execute_...` ranges,
                          xDiT's `execute_diffusion_...`, SGLang's `step[...]`); else "window",
                          one span per rank over all its events
  iteration_ms(events)    mean measured step in ms from an events table (None for a bare window)
  measured_iterations(trace)  `meta["iterations"]` records with a duration: what load and
                          ingest recorded (no events are read)
  step_ms(trace)          their median in ms (None without one): what every reader of a trace's
                          step time calls (compare, the fleet's members, the benchmarks)
  step_ms_by_rank(trace)  {rank: mean step ms} from the same records
  step_owners(ops, ids)   the step node each op id is nested in (None outside every step)
  et_steps(ops, ids)      the ET's `ProfilerStep#N` nodes that hold any of the op ids `ids`:
                          how many recorded steps a replay of those ops runs per iteration
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from engine.trace import columns as _cols
from engine.trace.vocab import GPU_ACTIVITY_CATS, STEP_PREFIX

if TYPE_CHECKING:
    from engine.trace.model import Trace

_COLS = ("rank", "name", "ts_us", "dur_us")
PROFILER_STEP = "ProfilerStep"
WINDOW = "window"
# serving frameworks' per-step host annotations (user_annotation rows), most specific first:
# (pattern shown in step_source, regex on the name)
STEP_ANNOTATIONS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("execute_diffusion_*", re.compile(r"^execute_diffusion_")),  # xDiT
    ("execute_*", re.compile(r"^execute_")),  # vLLM: execute_model, execute_context_N(..)_generation_M(..)
    ("step[*]", re.compile(r"^step\[")),  # SGLang
)


def step_mask(names: pd.Series | _cols.Distinct, host: np.ndarray | None = None) -> np.ndarray:
    """Rows that are steps: `host` rows (all when None) named with the step prefix."""
    d = names if isinstance(names, _cols.Distinct) else _cols.Distinct(names)
    m = d.where(lambda s: s.startswith(STEP_PREFIX))
    return m if host is None else m & np.asarray(host, dtype=bool)


def host_mask(cats: pd.Series | _cols.Distinct) -> np.ndarray:
    """Rows that are not GPU-side (kernels, copies, GPU annotations)."""
    d = cats if isinstance(cats, _cols.Distinct) else _cols.Distinct(cats)
    return ~d.where(lambda c: c in GPU_ACTIVITY_CATS)


def _empty() -> pd.DataFrame:
    return pd.DataFrame({"rank": [], "name": [], "ts_us": [], "dur_us": []})


def step_rows(events: pd.DataFrame | None) -> pd.DataFrame:
    """The host step rows of an events table (rank, name, ts_us, dur_us) in row order."""
    if events is None or len(events) == 0:
        return _empty()
    m = step_mask(events["name"], host_mask(events["cat"]))
    out = events.loc[m, [c for c in _COLS if c in events.columns]]
    return out if "rank" in out.columns else out.assign(rank=0)


def iterations(events: pd.DataFrame | None, rank: int | None = None) -> list[dict]:
    """`meta["iterations"]`: one {name, ts_us, dur_us, rank} per host step row, in row order;
    `rank` overrides the table's rank column (a file parsed as one rank)."""
    st = step_rows(events)
    ranks = [rank] * len(st) if rank is not None else [int(r) for r in st["rank"].tolist()]
    return [
        {"name": str(n), "ts_us": float(t), "dur_us": float(d), "rank": r}
        for n, t, d, r in zip(st["name"].tolist(), st["ts_us"].tolist(), st["dur_us"].tolist(), ranks, strict=True)
    ]


def step_spans(events: pd.DataFrame | None) -> pd.DataFrame:
    """ProfilerStep#N host spans, one row per step and rank: rank, name, ts_us, dur_us (time order)."""
    st = step_rows(events)
    return st if st.empty else st.sort_values(["rank", "ts_us"], kind="stable")


@dataclass(frozen=True, slots=True)
class MeasuredSteps:
    spans: pd.DataFrame  # rank, name, ts_us, dur_us in time order
    step_source: str  # "ProfilerStep" | "annotation:<pattern>" | "window" ("" for no events)


def _outermost(sp: pd.DataFrame) -> pd.DataFrame:
    """Drop spans nested inside an earlier span of the same rank (a step holds its sub-ranges)."""
    keep = []
    for _, g in sp.groupby("rank", sort=False):
        end = -np.inf
        for i, t, d in zip(g.index, g["ts_us"].to_numpy(), g["dur_us"].to_numpy(), strict=True):
            if t >= end:
                keep.append(i)
                end = t + d
    return sp.loc[keep]


def measured_steps(events: pd.DataFrame | None) -> MeasuredSteps:
    """The step spans a measurement uses and their source (module docstring)."""
    st = step_spans(events)
    if not st.empty or events is None or len(events) == 0:
        return MeasuredSteps(st, PROFILER_STEP if not st.empty else "")
    ann = _cols.isin(events["cat"], ("user_annotation",))
    names = _cols.Distinct(events["name"])
    ev = events if "rank" in events.columns else events.assign(rank=0)
    for label, rx in STEP_ANNOTATIONS:
        m = ann & names.where(rx.search)
        if m.any():
            sp = ev.loc[m, list(_COLS)].sort_values(["rank", "ts_us"], kind="stable")
            return MeasuredSteps(_outermost(sp), f"annotation:{label}")
    end = ev["ts_us"] + ev["dur_us"]
    w = ev.assign(end=end).groupby("rank", sort=True).agg(ts_us=("ts_us", "min"), end=("end", "max")).reset_index()
    spans = pd.DataFrame({"rank": w["rank"], "name": WINDOW, "ts_us": w["ts_us"], "dur_us": w["end"] - w["ts_us"]})
    return MeasuredSteps(spans, WINDOW)


def iteration_ms(events: pd.DataFrame | None) -> float | None:
    """Mean measured step in ms over all steps and ranks: ProfilerStep spans, else a serving
    framework's step annotations; None when the trace has neither (a bare window is no step)."""
    ms = measured_steps(events)
    if ms.spans.empty or ms.step_source == WINDOW:
        return None
    return float(ms.spans["dur_us"].mean()) / 1000.0


def measured_iterations(trace: Trace) -> list[dict]:
    """The trace's recorded steps with a duration: its `meta["iterations"]` records (what load,
    ingest and a prediction wrote, one per host step span and rank) whose `dur_us` is nonzero, in
    record order; no events are read."""
    return [it for it in (getattr(trace, "meta", None) or {}).get("iterations") or [] if it.get("dur_us")]


def step_ms(trace: Trace) -> float | None:
    """The trace's median recorded step in ms over all its steps and ranks (`measured_iterations`);
    None when it recorded none. The median, not the mean: one slow first step (warm-up, a
    compile) moves a mean of a few steps far more than it moves the step the job runs."""
    durs = [float(it["dur_us"]) for it in measured_iterations(trace)]
    return float(np.median(durs)) / 1e3 if durs else None


def step_ms_by_rank(trace: Trace) -> dict[int, float]:
    """{rank: mean step span in ms} of the trace's `measured_iterations` that name their rank."""
    out: dict[int, list[float]] = {}
    for it in measured_iterations(trace):
        if it.get("rank") is not None:
            out.setdefault(int(it["rank"]), []).append(float(it["dur_us"]) / 1e3)
    return {r: sum(v) / len(v) for r, v in sorted(out.items())}


def step_owners(ops: pd.DataFrame | None, ids) -> list[int | None]:
    """For each op id in `ids`: the id of the ET step node (`ProfilerStep#N`) it is, or is nested
    in; None for an op outside every step (or an ET without step nodes)."""
    ids = [int(i) for i in ids]
    if ops is None or len(ops) == 0 or "parent" not in ops.columns:
        return [None] * len(ids)
    is_step = ops["name"].astype(str).str.startswith(STEP_PREFIX).to_numpy()
    if not is_step.any():
        return [None] * len(ids)
    oid = ops["id"].astype(int).tolist()
    parent = dict(zip(oid, ops["parent"].astype(int).tolist(), strict=True))
    steps = {i for i, s in zip(oid, is_step, strict=True) if s}
    memo: dict[int, int | None] = {}

    def owner(i: int) -> int | None:
        path = []
        cur: int | None = i
        found: int | None = None
        while cur is not None and cur >= 0:
            if cur in memo:
                found = memo[cur]
                break
            path.append(cur)
            if cur in steps:
                found = cur
                break
            nxt = parent.get(cur, -1)
            cur = None if nxt == cur or len(path) > len(parent) else nxt
        for p in path:
            memo[p] = found
        return found

    return [owner(i) for i in ids]


def et_steps(ops: pd.DataFrame | None, ids=None) -> list[int]:
    """Ids of the ET's step nodes (`ProfilerStep#N`, any rank of `ops`) that are ancestors of, or
    equal to, an op in `ids` (all ops when None), in id order. An ET recorded over N profiler
    steps holds N such nodes, so a replay of the whole ET runs N steps per iteration; [] when
    the ET has no step nodes (or none holds the ops)."""
    if ops is None or len(ops) == 0:
        return []
    wanted = ops["id"].astype(int).tolist() if ids is None else ids
    return sorted({s for s in step_owners(ops, wanted) if s is not None})


__all__ = [
    "PROFILER_STEP",
    "STEP_ANNOTATIONS",
    "WINDOW",
    "MeasuredSteps",
    "et_steps",
    "host_mask",
    "iteration_ms",
    "iterations",
    "measured_iterations",
    "measured_steps",
    "step_mask",
    "step_ms",
    "step_ms_by_rank",
    "step_owners",
    "step_rows",
    "step_spans",
]
