"""Straggler attribution: which rank holds the others up, and why.

Why not "the slowest step": in a collective every rank ends together, so step times hardly
differ, and the rank with the most communication time is the one that *waited* (it arrived
early and sat in the collective). The old table flagged exactly that rank. Here a rank is
blamed only for the time others waited for it:
  held_others_ms  at each collective (the simulator's matched members, engine/simulate/
                  collectives.py), the time a member started after its own arrival because
                  another rank arrived later, charged to the rank that arrived last (time
                  covered, so concurrent collectives count once);
  waited_ms       the same time, on the rank that waited (never a reason to flag it).
The reason is what the late rank did on the critical path (engine.simulate.critical_path):
"compute" (its own compute), "late collective" (communication before it arrived: an earlier
collective ran late) or "host stall" (launch/host overhead and sync waits).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from engine.simulate.critical_path import CriticalPath, Kind
from engine.simulate.schedule import Schedule
from engine.simulate.taskgraph import EDGE_KINDS, EdgeKind, TaskGraph
from engine.trace import intervals as iv

REASONS = {
    Kind.COMPUTE.value: "compute",
    Kind.COMMUNICATION.value: "late collective",
    Kind.LAUNCH_HOST.value: "host stall",
    Kind.SYNC_WAIT.value: "host stall",
    Kind.HOST_UNRECORDED.value: "host stall",
}
MIN_SHARE = 0.005  # a rank must hold the others up for 0.5 % of a step to be named


def collective_waits(g: TaskGraph, s: Schedule) -> pd.DataFrame:
    """One row per collective member that waited for another rank: waiter, culprit, wait_us."""
    cols = ["waiter", "culprit", "from_us", "wait_us"]
    if not len(g.e_src):
        return pd.DataFrame(columns=cols)
    T = s.times
    npts = len(T)
    first = np.zeros(npts, bool)
    first[g.lane_ptr[:-1][g.lane_ptr[:-1] < npts]] = True
    own = np.where(first, g.pt_d, np.r_[0.0, T[:-1]] + g.pt_d)
    coll = g.e_kind == EDGE_KINDS.index(EdgeKind.COLLECTIVE)
    val = T[g.e_src] + g.e_w
    np.maximum.at(own, g.e_dst[~coll], val[~coll])  # the member's own arrival
    if not coll.any():
        return pd.DataFrame(columns=cols)
    cd, cv, cs = g.e_dst[coll], val[coll], g.e_src[coll]
    o = np.lexsort((cv, cd))
    last = np.r_[cd[o][1:] != cd[o][:-1], True]
    best = o[last]
    dst, src = cd[best], cs[best]
    wait = np.maximum(T[dst] - own[dst], 0.0)
    lane_of_pt = np.repeat(np.arange(len(g.lanes)), np.diff(g.lane_ptr))
    rank = g.lanes["rank"].to_numpy()
    out = pd.DataFrame(
        {"waiter": rank[lane_of_pt[dst]], "culprit": rank[lane_of_pt[src]], "from_us": own[dst], "wait_us": wait}
    )
    return out[(out["wait_us"] > 0) & (out["waiter"] != out["culprit"])].reset_index(drop=True)


def _covered(w: pd.DataFrame, by: str, steps: int) -> dict[int, float]:
    """ms per step covered by the waits of each rank (concurrent collectives counted once)."""
    return {
        int(r): iv.union_length(p["from_us"].to_numpy(), (p["from_us"] + p["wait_us"]).to_numpy()) / 1e3 / steps
        for r, p in w.groupby(by)
    }


def straggler_table(g: TaskGraph, s: Schedule, cp: CriticalPath | None, step_ms: float) -> pd.DataFrame:
    """Per rank: held_others_ms, waited_ms (per step), critical-path ms on it, reason; the
    `straggler` column marks the rank that held the others up most (if any did)."""
    ranks = sorted(int(r) for r in g.lanes["rank"].unique())
    steps = max(cp.walks // max(len(ranks), 1), 1) if cp is not None else 1
    w = collective_waits(g, s)
    held, waited = _covered(w, "culprit", steps), _covered(w, "waiter", steps)
    rows = []
    for r in ranks:
        on = cp.segments[cp.segments["rank"] == r] if cp is not None else pd.DataFrame()
        by = on.groupby("kind")["dur_us"].sum() if len(on) else pd.Series(dtype=float)
        by = by[[k for k in by.index if k in REASONS]]
        reason = REASONS[str(by.idxmax())] if len(by) and by.max() > 0 else ""
        rows.append(
            {
                "rank": r,
                "held_others_ms": float(held.get(r, 0.0)),
                "waited_ms": float(waited.get(r, 0.0)),
                "on_critical_path_ms": float(cp.ranks.get(r, 0.0)) if cp is not None else 0.0,
                "reason": reason,
            }
        )
    out = pd.DataFrame(rows, columns=["rank", "held_others_ms", "waited_ms", "on_critical_path_ms", "reason"])
    out["straggler"] = False
    if len(out) > 1:
        i = int(out["held_others_ms"].idxmax())
        if out.at[i, "held_others_ms"] > MIN_SHARE * step_ms:
            out.at[i, "straggler"] = True
    return out


def straggler(table: pd.DataFrame) -> dict | None:
    """The flagged rank as {"rank", "reason", "held_others_ms"}, None when no rank held others up."""
    hit = table[table["straggler"]] if len(table) else table
    if not len(hit):
        return None
    r = hit.iloc[0]
    return {"rank": int(r["rank"]), "reason": str(r["reason"]), "held_others_ms": round(float(r["held_others_ms"]), 6)}
