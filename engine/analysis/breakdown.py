"""`TimeBreakdown`: where a step's time goes, per rank and per step, in ms (the one breakdown).

Definitions (docs/analysis.md repeats them). For each rank and each step window (the rank's
`ProfilerStep#N` host span; the rank's whole span when the trace has no step):
  work            GPU work (kernels, memcpy, memset: engine.trace.vocab.GPU_CATS) when the rank
                  has any; otherwise its host operators (Kineto `cpu_op`) and the collective
                  backend's own ops (gloo:all_reduce, recorded as a label on its thread).
  communication   time covered by communication work (`vocab.is_comm`: NCCL/RCCL kernels;
                  on CPU-only ranks host collective ops and everything nested in them).
  compute         time covered by the other work (on CPU-only ranks: ops not inside a collective
                  on the same thread).
  exposed_communication   communication time no compute overlaps (communication - overlap).
  idle            time covered by no work.
All are unions of intervals clipped to the window (engine.trace.intervals), so nothing counts
twice, and by construction
            compute + exposed_communication + idle = step          (exactly, per rank and step)
while communication = exposed_communication + the part hidden under compute. Summaries are
means over ranks and steps (ms per iteration).

Why one class: three breakdowns with three key sets (`compute_ms`, unitless `compute`,
`compute_us`) over different windows showed different numbers for the same trace (issue 23).
Explore's Analysis page, the What-if page and `simulate --json` all build this one, from the
trace's events or from the simulator's predicted events (the same table shape).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from engine.analysis.steps import step_spans
from engine.trace import columns as _cols
from engine.trace import intervals as iv
from engine.trace.vocab import MARKER_CATS, cat_mask, comm_mask, is_backend_comm

PARTS = ("compute_ms", "communication_ms", "exposed_communication_ms", "idle_ms")
"""The reported parts (ms); compute + exposed_communication + idle add up to step_ms."""
ADDITIVE = ("compute_ms", "exposed_communication_ms", "idle_ms")
COLUMNS = ("rank", "step", "start_us", "step_ms", *PARTS, "basis")


@dataclass(frozen=True, kw_only=True, slots=True)
class TimeBreakdown:
    """Per (rank, step) rows of compute / communication / exposed communication / idle (ms).

    `table` columns: rank, step (ProfilerStep name or "whole span"), start_us, step_ms, the PARTS,
    basis ("gpu" or "cpu": which work was measured). Definitions: module docstring."""

    table: pd.DataFrame

    @classmethod
    def from_events(cls, events: pd.DataFrame) -> TimeBreakdown:
        """The breakdown of a `Trace.events` table (or a simulator prediction's events)."""
        return cls(table=_table(events))

    @classmethod
    def from_parts(
        cls, *, step_ms: list[float], compute_ms: list[float], communication_ms: list[float], exposed_ms: list[float]
    ) -> TimeBreakdown:
        """One row per iteration of time measured as parts by a clock of its own (a replay times
        its ops, not intervals): idle is what is left of the step, and compute is cut to the
        step less the exposed communication when the two overlap in the measurement, so the
        parts still add up to the step."""
        rows = []
        for i, (st, c, m, x) in enumerate(zip(step_ms, compute_ms, communication_ms, exposed_ms)):
            x = min(max(x, 0.0), st)
            c = min(max(c, 0.0), st - x)
            rows.append(
                {
                    "rank": 0,
                    "step": f"iteration {i}",
                    "start_us": 0.0,
                    "step_ms": st,
                    "compute_ms": c,
                    "communication_ms": max(m, x),
                    "exposed_communication_ms": x,
                    "idle_ms": st - c - x,
                    "basis": "replay",
                }
            )
        return cls(table=pd.DataFrame(rows, columns=list(COLUMNS)))

    def median_step(self) -> dict[str, float]:
        """The parts of the iteration with the median step time (parts that add up, unlike
        per-part medians)."""
        t = self.table
        if t.empty:
            return {}
        row = t.iloc[int(np.argsort(t["step_ms"].to_numpy(), kind="stable")[(len(t) - 1) // 2])]
        return {k: round(float(row[k]), 4) for k in ("step_ms", *PARTS)}

    def mean(self) -> dict[str, float]:
        """Means over ranks and steps (ms per iteration): step_ms and the PARTS."""
        t = self.table
        return {k: (float(t[k].mean()) if len(t) else 0.0) for k in ("step_ms", *PARTS)}

    def per_rank(self) -> pd.DataFrame:
        """One row per rank: means over its steps."""
        t = self.table
        if t.empty:
            return pd.DataFrame(columns=["rank", "steps", "step_ms", *PARTS, "basis"])
        g = t.groupby("rank", sort=True)
        out = g[["step_ms", *PARTS]].mean()
        out.insert(0, "steps", g.size())
        out["basis"] = g["basis"].first()
        return out.reset_index()

    def to_json(self) -> dict[str, Any]:
        m = self.mean()
        out: dict[str, Any] = {k: round(v, 6) for k, v in m.items()}
        out["basis"] = str(self.table["basis"].iloc[0]) if len(self.table) else "none"
        out["steps"] = int(self.table["step"].nunique()) if len(self.table) else 0
        out["ranks"] = [
            {"rank": int(r["rank"]), **{k: round(float(r[k]), 6) for k in ("step_ms", *PARTS)}}
            for _, r in self.per_rank().iterrows()
        ]
        return out


def _thread_key(ev: pd.DataFrame) -> np.ndarray:
    return pd.factorize(ev["pid"].astype(str) + "/" + ev["tid"].astype(str))[0]


def _rank_intervals(ev: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, str]:
    """(compute, communication) disjoint intervals of one rank's events, and the basis."""
    gpu = cat_mask(ev["cat"])
    s_all = ev["ts_us"].to_numpy(np.float64)
    e_all = s_all + np.nan_to_num(ev["dur_us"].to_numpy(np.float64))
    if gpu.any():
        comm = comm_mask(ev["name"]) & gpu
        comp = gpu & ~comm
        return iv.union(s_all[comp], e_all[comp]), iv.union(s_all[comm], e_all[comm]), "gpu"
    backend = _cols.where(ev["name"], is_backend_comm)  # gloo:all_reduce: a label on its thread
    host = cat_mask(ev["cat"], ("cpu_op",)) | backend
    comm = comm_mask(ev["name"]) & host
    comm_u = iv.union(s_all[comm], e_all[comm])
    # compute: per thread, ops outside that thread's collectives (what a collective calls is
    # communication); then the union across threads
    tid = _thread_key(ev)
    parts = []
    for t in np.unique(tid[host]):
        on = tid == t
        c = host & on & ~comm
        if not c.any():
            continue
        mine = iv.union(s_all[c], e_all[c])
        cm = comm & on
        parts.append(iv.subtract(mine, iv.union(s_all[cm], e_all[cm])) if cm.any() else mine)
    comp_u = np.concatenate(parts) if parts else np.zeros((0, 2))
    return iv.union(comp_u[:, 0], comp_u[:, 1]), comm_u, "cpu"


def _clip(x: np.ndarray, lo: float, hi: float) -> np.ndarray:
    if not len(x):
        return x
    s, e = iv.clip(x[:, 0], x[:, 1], lo, hi)
    keep = e > s
    return np.stack([s[keep], e[keep]], axis=1)


def _table(events: pd.DataFrame) -> pd.DataFrame:
    if events is None or len(events) == 0:
        return pd.DataFrame(columns=list(COLUMNS))
    has_rank = "rank" in events.columns
    steps = step_spans(events)
    rows = []
    for r in sorted(events["rank"].unique()) if has_rank else [0]:
        ev = events[events["rank"].to_numpy() == r] if has_rank else events
        comp, comm, basis = _rank_intervals(ev)
        st = steps[steps["rank"] == r]
        if len(st):
            wins = list(
                zip(st["name"].astype(str), st["ts_us"].astype(float), (st["ts_us"] + st["dur_us"]).astype(float))
            )
        else:  # the rank's whole span, markers excluded (as the simulator's tasks)
            occ = ~cat_mask(ev["cat"], MARKER_CATS)
            s_all = ev["ts_us"].to_numpy(np.float64)[occ]
            e_all = s_all + np.nan_to_num(ev["dur_us"].to_numpy(np.float64)[occ])
            if not len(s_all):
                continue
            wins = [("whole span", float(np.nanmin(s_all)), float(np.nanmax(e_all)))]
        for name, lo, hi in wins:
            c, m = _clip(comp, lo, hi), _clip(comm, lo, hi)
            comp_us, comm_us = iv.length(c), iv.length(m)
            exposed = iv.exclusive(m, c)
            idle = max((hi - lo) - comp_us - exposed, 0.0)
            rows.append(
                {
                    "rank": int(r),
                    "step": name,
                    "start_us": lo,
                    "step_ms": (hi - lo) / 1e3,
                    "compute_ms": comp_us / 1e3,
                    "communication_ms": comm_us / 1e3,
                    "exposed_communication_ms": exposed / 1e3,
                    "idle_ms": idle / 1e3,
                    "basis": basis,
                }
            )
    return pd.DataFrame(rows, columns=list(COLUMNS))
