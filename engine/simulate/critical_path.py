"""Critical path: the longest path through the simulator's scheduled task graph, across ranks.

Why from the schedule: the list scheduler (engine/simulate/schedule.py) computes every point's
time as T[p] = max(T[p-1] + d[p], max over edges e into p of T[src(e)] + w(e)). Walking back
from a step's end and always taking the term that set T[p] (`Schedule.binding`) is exactly the
longest weighted path ending there: its pieces tile the step, so its length *is* the step,
on the unchanged schedule and on every what-if prediction alike, and a speed-up of the work on
it moves the step by at most that work's share (by exactly that, to first order, unless
another path ties). There is no heuristic of its own: a hand-off the trace does not record is
either an edge of the graph (engine/simulate/edges.py) or, when none was inferred, a fixed gap
of the lane it is on, as the simulator treats it. It crosses
  - lanes through launches (host -> GPU), syncs and event waits (GPU -> host / stream),
  - ranks through collectives: a member starts at the latest arrival of all members, so the
    walk moves to the rank that arrived last.
Ties go to the lane (a call that took no longer than its own cost did not wait; a kernel its
stream would have started then anyway was held by the stream), except at a collective.

Each piece is attributed to one kind (`Kind`): compute (non-communication GPU work; host
operators on CPU-only ranks), communication (collective kernels / host collectives), launch/host
overhead (host time on GPU ranks, launch latencies, Python functions' own time), sync wait
(sync calls' own cost, sync / event-wait / thread hand-off latencies), host (unrecorded) (host
time no recorded operator covers: a gap between top-level events, a ProfilerStep's or a
record_function label's own time) or idle (a GPU lane waiting with nothing binding).

A host call that waited for the GPU keeps only its own cost (engine/simulate/waits.py), so on a
GPU-bound step the path leaves the host through the wait edge and runs through the kernels.

Walks: one per rank, from the end of its last step (the host ProfilerStep span `step_ms`
measures, sensitivity.step_points) back to the start of its first; each step's path is the
walk's pieces inside that step's window. Without steps, one from the last point to the first.
`CriticalPath` reports means over the step windows (ms per iteration) and keeps the pieces of
one window for drawing (the one that crosses the most ranks, then the longest).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum
from typing import Any

import numpy as np
import pandas as pd

from engine.simulate.config import SimConfig
from engine.simulate.schedule import Schedule
from engine.simulate.sensitivity import step_points
from engine.simulate.taskgraph import EDGE_KINDS, EdgeKind, TaskGraph
from engine.trace.steps import step_mask
from engine.trace.vocab import ANNOTATION_CATS, is_backend_comm, is_comm

_TOL = 1e-3  # µs: times equal within a nanosecond are ties
_COLL = EDGE_KINDS.index(EdgeKind.COLLECTIVE)


class Kind(str, Enum):
    COMPUTE = "compute"
    COMMUNICATION = "communication"
    LAUNCH_HOST = "launch_host"
    SYNC_WAIT = "sync_wait"
    HOST_UNRECORDED = "host_unrecorded"
    IDLE = "idle"

    def __str__(self) -> str:
        return self.value


KINDS = tuple(Kind)
_K = {k: i for i, k in enumerate(KINDS)}
_EDGE_KIND = {
    EdgeKind.LAUNCH: Kind.LAUNCH_HOST,
    EdgeKind.SYNC: Kind.SYNC_WAIT,
    EdgeKind.EVENT_WAIT: Kind.SYNC_WAIT,
    EdgeKind.INTER_THREAD: Kind.SYNC_WAIT,
    EdgeKind.USER: Kind.SYNC_WAIT,
    EdgeKind.COLLECTIVE: Kind.IDLE,  # replaced by the kind of the arriving member's gap
}


@dataclass(frozen=True, kw_only=True, slots=True)
class CriticalPath:
    """Means over the walks (ms per iteration) and the pieces of the walk drawn.

    segments: one row per piece of the walk drawn (most ranks crossed, then longest): rank, lane, task (-1: idle), name, kind,
    via ("lane" or the edge kind that set it), start_us (absolute, as the events' ts_us),
    dur_us. collectives: collective tasks on the path (name -> ms) and the cross-rank hand-offs
    it follows (`crossings`)."""

    ms: float
    by_kind: dict[str, float]
    ranks: dict[int, float]
    top_ops: pd.DataFrame  # name, kind, ms (mean per walk), share_pct
    collectives: dict[str, float]
    crossings: list[dict]
    segments: pd.DataFrame
    walks: int
    task_ms: np.ndarray | None = None  # per task: its own time on the path (ms, mean per walk)

    def to_json(self, top: int = 10) -> dict[str, Any]:
        return {
            "ms": round(self.ms, 6),
            "by_kind": {k: round(v, 6) for k, v in self.by_kind.items()},
            "ranks": {str(r): round(v, 6) for r, v in self.ranks.items()},
            "top_ops": [
                {"name": str(r["name"]), "kind": str(r["kind"]), "ms": round(float(r["ms"]), 6)}
                for _, r in self.top_ops.head(top).iterrows()
            ],
            "collectives": {k: round(v, 6) for k, v in self.collectives.items()},
            "crossings": self.crossings[:top],
            "walks": self.walks,
        }


def task_kinds(g: TaskGraph, sync_regex: str | None = None) -> np.ndarray:
    """The `Kind` code of every task's own time (module docstring)."""
    t = g.tasks
    n = len(t)
    gpu = t["gpu"].to_numpy()
    rank = t["rank"].to_numpy()
    names = g.text("name")
    comm_name = names.where(is_comm)
    gpu_ranks = np.unique(rank[gpu])
    cpu_rank = ~np.isin(rank, gpu_ranks)
    # host ops nested in a collective are communication on CPU-only ranks (gloo's own work)
    parent = t["parent"].to_numpy()
    comm = comm_name.copy()
    p = parent.copy()
    while (p >= 0).any():
        ok = p >= 0
        comm[ok] |= comm_name[p[ok]]
        p = np.where(ok, parent[np.maximum(p, 0)], -1)
    rx = re.compile(sync_regex or SimConfig().sync_regex)
    sync = ~gpu & names.where(lambda s: bool(rx.search(s)))
    label = g.text("cat").where(lambda c: c in ANNOTATION_CATS) | step_mask(names)
    out = np.full(n, _K[Kind.LAUNCH_HOST], np.int8)
    # a label's own time (ProfilerStep, record_function) is host time no recorded op covers
    out[label & ~g.text("cat").where(lambda c: c == "python_function")] = _K[Kind.HOST_UNRECORDED]
    out[gpu] = _K[Kind.COMPUTE]
    out[gpu & comm_name] = _K[Kind.COMMUNICATION]
    out[sync] = _K[Kind.SYNC_WAIT]
    cpu_work = ~gpu & cpu_rank & ~label
    out[cpu_work] = _K[Kind.COMPUTE]
    out[~gpu & cpu_rank & (comm | names.where(is_backend_comm))] = _K[Kind.COMMUNICATION]
    return out


# an edge that ties the lane binds only for a collective (the member waited for the rank that
# arrived last); otherwise the lane does: a call that took no longer than its own cost did not
# wait, a kernel its stream would have started then anyway was held by the stream
_PREFER = np.array([k is EdgeKind.COLLECTIVE for k in EDGE_KINDS])


def _walk(p: int, lo: float, T: np.ndarray, prev: list[int]) -> list[int]:
    """Points of one walk back from point p until time lo (each piece ends at the listed point)."""
    out = []
    for _ in range(len(prev) + 1):
        out.append(p)
        p = prev[p]
        if p < 0 or T[p] <= lo + _TOL:
            break
    return out


def windows(g: TaskGraph, T: np.ndarray) -> list[tuple[int, np.ndarray, np.ndarray]]:
    """Per rank with steps: (its last step's end point, its steps' starts, their ends): the steps
    the simulator measures (sensitivity.step_points: host ProfilerStep spans, time order). Without
    steps, one window over the whole schedule, from its last point."""
    steps = step_points(g)
    if steps is None:
        return [(int(np.nanargmax(T)), np.array([np.nanmin(T)]), np.array([np.nanmax(T)]))]
    sp, ep = steps
    lane_of_pt = np.repeat(np.arange(len(g.lanes)), np.diff(g.lane_ptr))
    rank = g.lanes["rank"].to_numpy()[lane_of_pt[sp]]
    out = []
    for r in np.unique(rank):
        m = np.flatnonzero(rank == r)
        m = m[np.argsort(T[sp[m]], kind="stable")]
        out.append((int(ep[m][np.argmax(T[ep[m]])]), T[sp[m]], T[ep[m]]))
    return out


def critical_path(g: TaskGraph, s: Schedule, *, sync_regex: str | None = None) -> CriticalPath | None:
    """The critical path of a scheduled graph (None when it has no tasks).

    One walk per rank, from the end of its last step back to the start of its first, along the
    binding terms (`Schedule.binding`); each step's path is that walk's pieces inside the step's
    window. Why one walk rather than one per step: a step's start is itself a point of the
    schedule, and when the host runs ahead of the GPU the walk from a step's end reaches the
    step's start time on a GPU stream, not through the step's start; cut from one walk, the steps
    telescope (their sum is the walk's, less the gaps between steps), so a speed-up of what lies
    on the path moves the mean step by that share, to first order, on every trace."""
    if g.n_tasks == 0:
        return None
    T = s.times
    prev_pt, edge_pt = s.binding(g, _PREFER)
    via_pt = np.where(edge_pt >= 0, g.e_kind[np.maximum(edge_pt, 0)] if len(g.e_kind) else -1, -1).astype(np.int64)
    lane_of_pt = np.repeat(np.arange(len(g.lanes)), np.diff(g.lane_ptr))
    kinds = task_kinds(g, sync_regex)
    rank_of_lane = g.lanes["rank"].to_numpy()
    gpu_lane = g.lanes["gpu"].to_numpy().astype(bool)
    prev_l = prev_pt.tolist()
    comm_task = kinds == _K[Kind.COMMUNICATION]
    pieces = []
    n_win = 0
    for end_pt, los, his in windows(g, T):
        pts = np.asarray(_walk(end_pt, float(los.min()), T, prev_l), np.int64)[::-1]
        prev = prev_pt[pts]
        ek = via_pt[pts]
        via_edge = ek >= 0
        start = np.where(prev < 0, 0.0, T[np.maximum(prev, 0)])
        owner = np.where(via_edge, -1, g.pt_owner[pts])
        # a gap on a host lane is host time the trace did not record; on a GPU lane it is idle
        gap_kind = np.where(gpu_lane[lane_of_pt[pts]], _K[Kind.IDLE], _K[Kind.HOST_UNRECORDED])
        kind = np.where(owner >= 0, kinds[np.maximum(owner, 0)], gap_kind).astype(np.int8)
        for code, k in enumerate(EDGE_KINDS):
            m = ek == code
            if not m.any():
                continue
            if k is EdgeKind.COLLECTIVE:  # the arriving member's gap: owned by whoever owns it
                nxt = np.minimum(prev[m] + 1, len(T) - 1)
                gap = (lane_of_pt[nxt] == lane_of_pt[prev[m]]) & comm_task[g.pt_task[nxt]]
                own = g.pt_owner[nxt]
                kind[m] = np.where(
                    gap,
                    np.where(own >= 0, kinds[np.maximum(own, 0)], _K[Kind.IDLE]),
                    _K[Kind.LAUNCH_HOST],
                )
                owner[m] = np.where(gap, own, -1)
            else:
                kind[m] = _K[_EDGE_KIND[k]]
        # a collective hand-off's time is the arriving member's: its rank and lane
        coll = via_edge & (ek == _COLL)
        piece_lane = np.where(coll, lane_of_pt[np.maximum(prev, 0)], lane_of_pt[pts])
        end = T[pts]
        key_end, key_start = np.maximum.accumulate(end), np.minimum.accumulate(start[::-1])[::-1]
        for lo, hi in zip(los, his):
            i0 = int(np.searchsorted(key_end, lo + _TOL, side="right"))
            i1 = int(np.searchsorted(key_start, hi - _TOL, side="left"))
            a = np.clip(start[i0:i1], lo, hi)
            pieces.append(
                pd.DataFrame(
                    {
                        "walk": n_win,
                        "rank": rank_of_lane[piece_lane[i0:i1]],
                        "lane": piece_lane[i0:i1],
                        "task": owner[i0:i1],
                        "kind_code": kind[i0:i1],
                        "via": ek[i0:i1],
                        "to_rank": rank_of_lane[lane_of_pt[pts[i0:i1]]],
                        "start_us": a + g.t0_us,
                        "dur_us": np.maximum(np.minimum(end[i0:i1], hi) - a, 0.0),
                    }
                )
            )
            n_win += 1
    return _summarise(g, pd.concat(pieces, ignore_index=True), n_win)


def _task_ms(g: TaskGraph, seg: pd.DataFrame, n_walks: int) -> np.ndarray:
    """Each task's own time on the path (ms, mean per walk): what speeding it up can gain at most."""
    task = seg["task"].to_numpy()
    own = task >= 0
    return np.bincount(task[own], seg["dur_us"].to_numpy()[own], minlength=g.n_tasks) / 1e3 / n_walks


def _summarise(g: TaskGraph, seg: pd.DataFrame, n_walks: int) -> CriticalPath:
    """Means per walk; text (names, kinds, edge kinds) only for the rows shown: the pieces can
    number hundreds of thousands, the walk drawn and the tables hold few."""
    names = g.text("name")
    kind_names = np.asarray([k.value for k in KINDS], dtype=object)
    edge_names = np.asarray([*(k.value for k in EDGE_KINDS), "lane"], dtype=object)
    task = seg["task"].to_numpy()
    code = seg["kind_code"].to_numpy()
    per_ms = seg["dur_us"].to_numpy() / 1e3 / n_walks
    total = float(per_ms.sum())
    by_kind_ms = np.bincount(code, per_ms, minlength=len(KINDS))
    by_kind = {k.value: float(by_kind_ms[i]) for i, k in enumerate(KINDS)}
    rank = seg["rank"].to_numpy()
    ranks = {int(r): float(per_ms[rank == r].sum()) for r in np.unique(rank)}
    task_ms = _task_ms(g, seg, n_walks)
    # a task's pieces are all of its kind: per task first, then per (name, kind)
    on = np.flatnonzero(np.bincount(task[task >= 0], minlength=g.n_tasks) > 0)
    on_kind = np.zeros(g.n_tasks, np.int8)
    on_kind[task[task >= 0]] = code[task >= 0]
    ops = pd.DataFrame(
        {
            "name": np.asarray(names.values, dtype=object)[names.codes[on]],
            "kind": kind_names[on_kind[on]],
            "ms": task_ms[on],
        }
    )
    ops = ops.groupby(["name", "kind"], observed=True)["ms"].sum().reset_index()
    ops = ops.sort_values("ms", ascending=False, kind="stable")
    ops["share_pct"] = 100 * ops["ms"] / total if total > 0 else 0.0
    comm = ops[(ops["kind"] == Kind.COMMUNICATION.value) & ops["name"].map(is_comm).astype(bool)]
    collectives = {str(k): float(v) for k, v in comm.groupby("name")["ms"].sum().sort_values(ascending=False).items()}
    via = seg["via"].to_numpy()
    cross = np.flatnonzero((via == _COLL) & (seg["to_rank"].to_numpy() != rank))[:50]
    crossings = [  # the late rank (from) -> the rank that waited for it in that collective (to)
        {"from_rank": int(rank[i]), "to_rank": int(seg["to_rank"].iat[i]), "collective": _next_comm(g, seg, int(i))}
        for i in cross
    ]
    # the walk drawn: the longest, preferring one that crosses ranks (the step of the rank
    # that waited: it shows who held it up)
    per = seg.groupby("walk").agg(ms=("dur_us", "sum"), ranks=("rank", "nunique"))
    per["ms"] = per["ms"].round(-1)  # steps within 10 µs count as equally long
    longest = per.sort_values(["ranks", "ms"], ascending=False, kind="stable").index[0]
    drawn = seg[seg["walk"] == longest].reset_index(drop=True)
    d_task, d_kind = drawn["task"].to_numpy(), kind_names[drawn["kind_code"].to_numpy()]
    text = np.asarray(names.values, dtype=object)[names.codes[np.maximum(d_task, 0)]]
    drawn["name"] = np.where(d_task >= 0, text, "(" + d_kind.astype(str) + ")")
    drawn["kind"] = d_kind
    drawn["via"] = edge_names[drawn["via"].to_numpy()]
    keep = ["rank", "lane", "task", "name", "kind", "via", "start_us", "dur_us"]
    return CriticalPath(
        ms=total,
        by_kind=by_kind,
        ranks=ranks,
        top_ops=ops.reset_index(drop=True),
        collectives=collectives,
        crossings=crossings,
        segments=drawn[keep],
        walks=n_walks,
        task_ms=task_ms,
    )


def _next_comm(g: TaskGraph, seg: pd.DataFrame, i: int) -> str:
    """The collective the path enters right after a cross-rank hand-off at row i."""
    after = seg.iloc[i : i + 4096]
    after = after[(after["walk"] == seg["walk"].iat[i]) & (after["kind_code"] == _K[Kind.COMMUNICATION])].head(64)
    names = g.tasks["name"].to_numpy()
    for t in after["task"].to_numpy():
        if t >= 0 and is_comm(str(names[t])):
            return str(names[t])
    return ""
