"""Critical path: the longest path through the simulator's scheduled task graph, across ranks.

Why from the schedule: the list scheduler (engine/simulate/schedule.py) computes every point's
time as T[p] = max(T[p-1] + d[p], max over edges e into p of T[src(e)] + w(e)). Walking back
from a step's end and always taking the term that set T[p] (the binding one) is exactly the
longest weighted path ending there: its pieces tile the step, so its length *is* the step,
on the unchanged schedule and on every what-if prediction alike. It crosses
  - lanes through launches (host -> GPU), syncs and event waits (GPU -> host / stream),
  - ranks through collectives: a member starts at the latest arrival of all members, so the
    walk moves to the rank that arrived last.
Ties prefer the cross-lane edge (a sync that ended when the GPU finished is the GPU's doing),
except a launch (a kernel its stream would have started then anyway was held by the stream).

Each piece is attributed to one kind (`Kind`): compute (non-communication GPU work; host
operators on CPU-only ranks), communication (collective kernels / host collectives), launch/host
overhead (host time on GPU ranks, launch latencies, Python functions' own time), sync wait
(sync calls' own cost, sync / event-wait / thread hand-off latencies), host (unrecorded) (host
time no recorded operator covers: a gap between top-level events, a ProfilerStep's or a
record_function label's own time) or idle (a GPU lane waiting with nothing binding).

A host call that waited for the GPU keeps only its own cost (engine/simulate/waits.py), so on a
GPU-bound step the path leaves the host through the wait edge and runs through the kernels.

Walks: one per (rank, ProfilerStep) from the step's end back to its start; without steps, one
from the last point to the first. `CriticalPath` reports means over the walks (ms per
iteration) and keeps the pieces of one walk for drawing (the one that crosses the most ranks,
then the longest).
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
from engine.simulate.taskgraph import EDGE_KINDS, EdgeKind, TaskGraph
from engine.trace.steps import step_mask
from engine.trace.vocab import ANNOTATION_CATS, is_backend_comm, is_comm

_TOL = 1e-3  # µs: times equal within a nanosecond are ties
_COLL = EDGE_KINDS.index(EdgeKind.COLLECTIVE)
_INFERRED = len(EDGE_KINDS)  # `via` code of a hand-off the walk inferred (see _infer)
INFER_US = 10.0


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
_PRIO = {  # tie-break among edges into one point (higher wins)
    EdgeKind.COLLECTIVE: 6,
    EdgeKind.SYNC: 5,
    EdgeKind.EVENT_WAIT: 4,
    EdgeKind.LAUNCH: 3,
    EdgeKind.INTER_THREAD: 2,
    EdgeKind.USER: 1,
}
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


def _binding(g: TaskGraph, T: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per point: its predecessor on the path (-1: none), how it was reached (-1: its lane
    predecessor, an EDGE_KINDS code, or _INFERRED) and the edge used (-1: none)."""
    npts = len(T)
    first = np.zeros(npts, bool)
    first[g.lane_ptr[:-1][g.lane_ptr[:-1] < npts]] = True
    lane_val = np.where(first, g.pt_d, np.r_[0.0, T[:-1]] + g.pt_d)
    edge = np.full(npts, -1, np.int64)
    if len(g.e_src):
        val = T[g.e_src] + g.e_w
        prio = np.array([_PRIO.get(k, 0) for k in EDGE_KINDS], np.int8)[g.e_kind]
        o = np.lexsort((prio, val, g.e_dst))  # per dst: the last is the largest (then priority)
        d = g.e_dst[o]
        last = np.r_[d[1:] != d[:-1], True]
        best, bd = o[last], d[last]
        tol = _TOL + 1e-9 * np.abs(T[bd])
        # ties go to the cross-lane edge, except a launch: a kernel its stream would have
        # started then anyway was held by the stream (the busy resource), not by its launch
        launch = g.e_kind[best] == EDGE_KINDS.index(EdgeKind.LAUNCH)
        beats_lane = np.where(launch, val[best] > lane_val[bd] + tol, val[best] >= lane_val[bd] - tol)
        ok = (val[best] >= T[bd] - tol) & beats_lane
        edge[bd[ok]] = best[ok]
    # a kernel bound by its launch although its stream was still busy when it was launched sat
    # in the stream's queue: the stream held it (its gap before starting is the stream's idle)
    if len(g.e_src):
        k = np.flatnonzero(edge >= 0)
        k = k[(g.e_kind[edge[k]] == EDGE_KINDS.index(EdgeKind.LAUNCH)) & ~first[k]]
        queued = T[k - 1] > T[g.e_src[edge[k]]] + _TOL
        edge[k[queued]] = -1
    has = edge >= 0
    prev = np.where(has, g.e_src[np.maximum(edge, 0)] if len(g.e_src) else -1, np.arange(npts) - 1)
    prev[first & ~has] = -1
    via = np.where(has, g.e_kind[np.maximum(edge, 0)] if len(g.e_kind) else -1, -1).astype(np.int64)
    _infer(g, T, prev, via, edge)
    return prev, via, edge


def _infer(g: TaskGraph, T: np.ndarray, prev: np.ndarray, via: np.ndarray, edge: np.ndarray) -> None:
    """Hand-offs the trace does not record (in place): a task that started after its lane sat
    idle, or long after its launch, right when (within INFER_US) a task on another lane of its
    rank ended, waited for that task (an unrecorded stream-event wait, or a host thread woken by
    the GPU). Only start points are re-bound, and only to end points, so walks cannot loop."""
    t = g.tasks
    sp = t["sp"].to_numpy()
    launch = np.zeros(len(T), bool)
    if len(g.e_kind):
        launch[g.e_dst[g.e_kind == EDGE_KINDS.index(EdgeKind.LAUNCH)]] = True
    # (a GPU task after a gap its stream always leaves between tasks was held by the stream)
    lane_gpu = np.repeat(g.lanes["gpu"].to_numpy().astype(bool), np.diff(g.lane_ptr))
    idle_gap = (via < 0) & (prev >= 0) & (g.pt_owner < 0) & (~lane_gpu | (g.pt_d > INFER_US))
    own_prev_t = np.where(prev >= 0, T[np.maximum(prev, 0)], -np.inf)
    cand = sp[(idle_gap | ((via >= 0) & launch) | (prev < 0))[sp]]
    if not len(cand):
        return
    lane_of_pt = np.repeat(np.arange(len(g.lanes)), np.diff(g.lane_ptr))
    rank_of_lane = g.lanes["rank"].to_numpy()
    ends = np.flatnonzero(g.pt_end)
    e_rank = rank_of_lane[lane_of_pt[ends]]
    for r in np.unique(rank_of_lane):
        er = ends[e_rank == r]
        er = er[np.argsort(T[er], kind="stable")]
        q = cand[rank_of_lane[lane_of_pt[cand]] == r]
        if not len(er) or not len(q):
            continue
        k = np.searchsorted(T[er], T[q] + _TOL, side="right") - 1
        for _ in range(4):  # skip ends on the task's own lane
            same = (k >= 0) & (lane_of_pt[er[np.maximum(k, 0)]] == lane_of_pt[q])
            if not same.any():
                break
            k[same] -= 1
        ok = k >= 0
        src = er[np.maximum(k, 0)]
        ok &= (lane_of_pt[src] != lane_of_pt[q]) & (T[src] >= T[q] - INFER_US) & (T[src] > own_prev_t[q] + _TOL)
        prev[q[ok]], via[q[ok]], edge[q[ok]] = src[ok], _INFERRED, -1


def _walk(p: int, lo: float, T: np.ndarray, prev: list[int]) -> list[int]:
    """Points of one walk back from point p until time lo (each piece ends at the listed point)."""
    out = []
    for _ in range(len(prev) + 1):
        out.append(p)
        p = prev[p]
        if p < 0 or T[p] <= lo + _TOL:
            break
    return out


def _step_end(g: TaskGraph, T: np.ndarray, step: int) -> tuple[int, float, float]:
    """(point to walk back from, window start, window end) of one host ProfilerStep task.

    The step's work ends at the host span's end, unless the GPU is still running work the step
    launched then (a GPU-bound loop: the host runs ahead): the walk then starts on that stream,
    at the first GPU task end at or after the span's end, and is clipped to the span."""
    t = g.tasks
    sp, ep = t["sp"].to_numpy(), t["ep"].to_numpy()
    lo, hi = float(T[sp[step]]), float(T[ep[step]])
    rank = t["rank"].to_numpy()
    gi = np.flatnonzero(t["gpu"].to_numpy() & (g.launcher >= 0) & (rank == rank[step]))
    if len(gi):
        lt = T[sp[g.launcher[gi]]]
        gi = gi[(lt >= lo) & (lt <= hi)]
    if not len(gi) or T[ep[gi]].max() <= hi + _TOL:
        return int(ep[step]), lo, hi
    last = gi[np.argmax(T[ep[gi]])]
    lane = int(t["lane"].iat[last])
    a, b = g.lane_ptr[lane], g.lane_ptr[lane + 1]
    ends = np.flatnonzero(g.pt_end[a:b]) + a
    k = int(np.searchsorted(T[ends], hi - _TOL, side="left"))
    return int(ends[min(k, len(ends) - 1)]), lo, hi


def critical_path(g: TaskGraph, s: Schedule, *, sync_regex: str | None = None) -> CriticalPath | None:
    """The critical path of a scheduled graph (None when it has no tasks)."""
    if g.n_tasks == 0:
        return None
    T = s.times
    prev_pt, via_pt, _ = _binding(g, T)
    lane_of_pt = np.repeat(np.arange(len(g.lanes)), np.diff(g.lane_ptr))
    t = g.tasks
    kinds = task_kinds(g, sync_regex)
    rank_of_lane = g.lanes["rank"].to_numpy()
    gpu_lane = g.lanes["gpu"].to_numpy().astype(bool)
    # walks: every host ProfilerStep task, else the whole schedule
    step = step_mask(g.text("name"), host=~t["gpu"].to_numpy())
    if step.any():
        walks = [_step_end(g, T, int(i)) for i in np.flatnonzero(step)]
    else:
        walks = [(int(np.nanargmax(T)), float(np.nanmin(T)), float(np.nanmax(T)))]
    prev_l = prev_pt.tolist()
    comm_task = kinds == _K[Kind.COMMUNICATION]
    pieces = []
    for w, (end_pt, lo, hi) in enumerate(walks):
        pts = np.asarray(_walk(end_pt, lo, T, prev_l), np.int64)
        prev = prev_pt[pts]
        ek = via_pt[pts]
        via_edge = ek >= 0
        prev_t = np.where(prev < 0, 0.0, T[np.maximum(prev, 0)])
        a = np.clip(prev_t, lo, hi)
        owner = np.where(via_edge, -1, g.pt_owner[pts])
        # a gap on a host lane is host time the trace did not record; on a GPU lane it is idle
        gap_kind = np.where(gpu_lane[lane_of_pt[pts]], _K[Kind.IDLE], _K[Kind.HOST_UNRECORDED])
        kind = np.where(owner >= 0, kinds[np.maximum(owner, 0)], gap_kind).astype(np.int8)
        kind[ek == _INFERRED] = _K[Kind.SYNC_WAIT]
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
        pieces.append(
            pd.DataFrame(
                {
                    "walk": w,
                    "rank": rank_of_lane[piece_lane],
                    "lane": piece_lane,
                    "task": owner,
                    "kind_code": kind,
                    "via": ek,
                    "to_rank": rank_of_lane[lane_of_pt[pts]],
                    "start_us": a + g.t0_us,
                    "dur_us": np.maximum(np.minimum(T[pts], hi) - a, 0.0),
                }
            ).iloc[::-1]
        )
    return _summarise(g, pd.concat(pieces, ignore_index=True), len(walks))


def _task_ms(g: TaskGraph, seg: pd.DataFrame, n_walks: int) -> np.ndarray:
    """Each task's own time on the path (ms, mean per walk): what speeding it up can gain at most."""
    task = seg["task"].to_numpy()
    own = task >= 0
    return np.bincount(task[own], seg["dur_us"].to_numpy()[own], minlength=g.n_tasks) / 1e3 / n_walks


def _summarise(g: TaskGraph, seg: pd.DataFrame, n_walks: int) -> CriticalPath:
    names = g.tasks["name"].astype(str).to_numpy()
    seg["kind"] = np.asarray([k.value for k in KINDS], dtype=object)[seg["kind_code"].to_numpy()]
    task = seg["task"].to_numpy()
    seg["name"] = np.where(task >= 0, names[np.maximum(task, 0)], "(" + seg["kind"].astype(str) + ")")
    edge_names = np.asarray([*(k.value for k in EDGE_KINDS), "inferred", "lane"], dtype=object)
    seg["via"] = edge_names[seg["via"].to_numpy()]
    per_ms = seg["dur_us"].to_numpy() / 1e3 / n_walks
    seg["_ms"] = per_ms
    total = float(per_ms.sum())
    by_kind = {k.value: float(seg.loc[seg["kind"] == k.value, "_ms"].sum()) for k in KINDS}
    ranks = {int(r): float(v) for r, v in seg.groupby("rank")["_ms"].sum().items()}
    ops = seg[seg["task"] >= 0].groupby(["name", "kind"], observed=True)["_ms"].sum().reset_index()
    ops = ops.rename(columns={"_ms": "ms"}).sort_values("ms", ascending=False, kind="stable")
    ops["share_pct"] = 100 * ops["ms"] / total if total > 0 else 0.0
    comm = seg[(seg["kind"] == Kind.COMMUNICATION.value) & seg["name"].map(is_comm).astype(bool)]
    collectives = {str(k): float(v) for k, v in comm.groupby("name")["_ms"].sum().sort_values(ascending=False).items()}
    cross = seg[(seg["via"] == EdgeKind.COLLECTIVE.value) & (seg["to_rank"] != seg["rank"])]
    crossings = [  # the late rank (from) -> the rank that waited for it in that collective (to)
        {"from_rank": int(r["rank"]), "to_rank": int(r["to_rank"]), "collective": _next_comm(seg, i)}
        for i, r in cross.head(50).iterrows()
    ]
    # the walk drawn: the longest, preferring one that crosses ranks (the step of the rank
    # that waited: it shows who held it up)
    per = seg.groupby("walk").agg(ms=("dur_us", "sum"), ranks=("rank", "nunique"))
    per["ms"] = per["ms"].round(-1)  # steps within 10 µs count as equally long
    longest = per.sort_values(["ranks", "ms"], ascending=False, kind="stable").index[0]
    keep = ["rank", "lane", "task", "name", "kind", "via", "start_us", "dur_us"]
    segments = seg.loc[seg["walk"] == longest, keep].reset_index(drop=True)
    return CriticalPath(
        ms=total,
        by_kind=by_kind,
        ranks=ranks,
        top_ops=ops.reset_index(drop=True),
        collectives=collectives,
        crossings=crossings,
        segments=segments,
        walks=n_walks,
        task_ms=_task_ms(g, seg, n_walks),
    )


def _next_comm(seg: pd.DataFrame, i: int) -> str:
    """The collective the path enters right after a cross-rank hand-off at row i."""
    after = seg.loc[i:]
    after = after[(after["walk"] == seg.at[i, "walk"]) & (after["kind"] == Kind.COMMUNICATION.value)].head(64)
    after = after[after["name"].map(is_comm).astype(bool)]
    return str(after["name"].iloc[0]) if len(after) else ""
