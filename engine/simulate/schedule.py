"""List scheduler over the task graph, vectorised per lane (Lumos-style, numpy).

Lumos' scheduler walks tasks one at a time: a task starts when its lane is free (fixed
dependency: the previous task on its thread or stream) and when its runtime dependencies
(launch, sync, event wait, collective peers) are done. A plain-Python loop of that kind runs
at 0.4-0.75 M tasks/s here. This one processes whole lane *segments* at once: on a lane,

    T[i] = max(T[i-1] + d[i], Z[i])      Z[i] = max over edges into i of T[src] + w

is, with C = cumsum(d), `T = C + maximum.accumulate(max(Z - C, 0))`: one cumsum and one
cumulative max per segment. A round advances every lane up to its first point whose incoming
edge comes from a point not yet computed; the next round continues from there. Rounds are as
many as the chain of cross-lane hand-offs (syncs, waits) is long, each doing O(points) work in
total, so the whole solve is O(points + edges) numpy work plus O(rounds x lanes) Python.

A round in which no lane advances means the remaining dependencies form a cycle: the lanes'
blocking edges are followed until one repeats and the tasks on that loop are reported.

`Schedule.binding(g)`: which term of that max set each point's time (its lane predecessor, or
one incoming edge). Walking those back from a step's end is the critical path
(engine/simulate/critical_path.py): by construction the schedule's own constraints, so a
speed-up of what lies on it moves the step by at most its share and the path tiles the step.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from engine.errors import TraceError
from engine.simulate.taskgraph import TaskGraph


class DependencyCycleError(TraceError):
    """The task graph has a cycle; `tasks` lists (task index, name, lane) on it."""

    def __init__(self, message: str, tasks: list[tuple[int, str, int]]):
        super().__init__(message)
        self.tasks = tasks


@dataclass(kw_only=True, slots=True)
class Schedule:
    times: np.ndarray  # simulated time of every point (us from t0)
    rounds: int

    def task_start(self, g: TaskGraph) -> np.ndarray:
        return self.times[g.tasks["sp"].to_numpy()]

    def task_end(self, g: TaskGraph) -> np.ndarray:
        return self.times[g.tasks["ep"].to_numpy()]

    def binding(self, g: TaskGraph, prefer: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Per point, the term of `T[p] = max(T[p-1] + d[p], max over edges of T[src] + w)` that
        set its time: (predecessor point, -1 for a lane's first point bound by its own offset;
        edge index, -1 when the lane predecessor bound it). See `binding`."""
        return binding(g, self.times, prefer)


_TOL_US = 1e-3  # µs: the scheduler's sums differ from these by float rounding only


def binding(g: TaskGraph, T: np.ndarray, prefer: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The binding term of every point of a solved schedule (`Schedule.binding`).

    Why recomputed here rather than recorded inside `solve`: the solver takes the max of the
    same floats (`T[src] + w` against the lane's running sum), so the argmax over them, taken
    once on the solved times, is the term the solver kept, up to float rounding (`_TOL_US`);
    recording it would cost every solve (sensitivity runs, what-ifs, the fleet solver) for an
    answer only the critical path reads. Ties (a term within `_TOL_US` of the time) are
    resolved by `prefer` (per EDGE_KINDS code: an edge of that kind that ties the lane wins when
    True) and, among edges, the larger value, then the lower edge index. Every term returned is
    tight: T[p] = T[pred] + (d[p] or w) within `_TOL_US`."""
    npts = len(T)
    pred = np.arange(npts, dtype=np.int64) - 1
    edge = np.full(npts, -1, np.int64)
    if npts == 0:
        return pred, edge
    first = np.zeros(npts, bool)
    first[g.lane_ptr[:-1][g.lane_ptr[:-1] < npts]] = True
    pred[first] = -1
    lane_val = np.where(first, g.pt_d, np.r_[0.0, T[:-1]] + g.pt_d)
    if len(g.e_src):
        val = T[g.e_src] + g.e_w
        o = np.lexsort((-np.arange(len(val)), val, g.e_dst))  # per dst: the last is the largest
        d = g.e_dst[o]
        last = np.r_[d[1:] != d[:-1], True]
        best, bd = o[last], d[last]
        tol = _TOL_US + 1e-9 * np.abs(T[bd])
        tight = val[best] >= T[bd] - tol
        wins = val[best] > lane_val[bd] + tol  # strictly later than the lane: the edge set T
        if prefer is not None:  # a tie with the lane goes to the edge where its kind is preferred
            wins |= prefer[g.e_kind[best]] & (val[best] >= lane_val[bd] - tol)
        ok = tight & (wins | (lane_val[bd] < T[bd] - tol))
        edge[bd[ok]] = best[ok]
        pred[bd[ok]] = g.e_src[best[ok]]
    return pred, edge


def segment_times(T, d, f: int, stop: int, after_prev: bool, src, dst, w) -> None:
    """Fill T[f:stop], one lane's points, given the edges into them (`dst` ascending, sources
    computed): T = C + maximum.accumulate(max(Z - C, 0)) with C = cumsum(d), Z the latest edge
    arrival per point. Evaluated at the edges' destinations only (Z - C is -inf elsewhere, so the
    running max changes only there): no full-length Z per segment. Shared with the fleet solver."""
    C = np.cumsum(d[f:stop])
    if after_prev:
        C += T[f - 1]
    if len(dst):
        dd = dst - f
        vals = T[src] + w
        first = np.empty(len(dd), bool)
        first[0] = True
        np.not_equal(dd[1:], dd[:-1], out=first[1:])
        starts = np.flatnonzero(first)
        du = dd[starts]
        adj = np.maximum.accumulate(np.maximum(np.maximum.reduceat(vals, starts) - C[du], 0.0))
        lens = np.empty(len(du), np.int64)
        np.subtract(du[1:], du[:-1], out=lens[:-1])
        lens[-1] = stop - f - du[-1]
        C[du[0] :] += np.repeat(adj, lens)
    T[f:stop] = C


def solve(g: TaskGraph, max_rounds: int = 1_000_000) -> Schedule:
    """Simulated time of every point of `g` (raises DependencyCycleError on a cycle)."""
    npts = len(g.pt_d)
    T = np.full(npts, np.nan)
    if npts == 0:
        return Schedule(times=T, rounds=0)
    nl = len(g.lane_ptr) - 1
    lane_of_pt = np.repeat(np.arange(nl), np.diff(g.lane_ptr))
    o = np.argsort(g.e_dst, kind="stable")
    e_src, e_dst, e_w = g.e_src[o], g.e_dst[o], g.e_w[o]
    e_src_lane = lane_of_pt[e_src] if len(e_src) else e_src
    e_ptr = np.searchsorted(e_dst, g.lane_ptr)  # edges into lane l: e_ptr[l]:e_ptr[l+1]
    front = g.lane_ptr[:-1].copy()  # first uncomputed point per lane
    end = g.lane_ptr[1:]
    eptr = e_ptr[:-1].copy()
    d = g.pt_d
    active = [lane for lane in range(nl) if front[lane] < end[lane]]
    rounds = 0
    while active:
        rounds += 1
        if rounds > max_rounds:
            raise TraceError(f"simulation did not converge in {max_rounds} rounds")
        progressed = False
        still = []
        for lane in active:
            f = front[lane]
            e0, e1 = eptr[lane], e_ptr[lane + 1]
            if e0 < e1:
                srcs = e_src[e0:e1]
                ready = srcs < front[e_src_lane[e0:e1]]
                k = int(np.argmin(ready)) if not ready.all() else e1 - e0
                stop = int(e_dst[e0 + k]) if k < e1 - e0 else int(end[lane])
                k = int(np.searchsorted(e_dst[e0 : e0 + k], stop, side="left"))  # edges into [f, stop)
            else:
                k, stop = 0, int(end[lane])
            if stop > f:
                segment_times(
                    T, d, f, stop, f > g.lane_ptr[lane], e_src[e0 : e0 + k], e_dst[e0 : e0 + k], e_w[e0 : e0 + k]
                )
                front[lane] = stop
                eptr[lane] = e0 + k
                progressed = True
            if front[lane] < end[lane]:
                still.append(lane)
        active = still
        if active and not progressed:
            _raise_cycle(g, active, front, eptr, e_ptr, e_src, e_dst, e_src_lane)
    return Schedule(times=T, rounds=rounds)


def _raise_cycle(g, active, front, eptr, e_ptr, e_src, e_dst, e_src_lane) -> None:
    """Follow each blocked lane's first unready edge until a lane repeats; report that loop."""
    waits: dict[int, tuple[int, int]] = {}
    for lane in active:
        e0, e1 = eptr[lane], e_ptr[lane + 1]
        ready = e_src[e0:e1] < front[e_src_lane[e0:e1]]
        k = e0 + int(np.argmin(ready))
        waits[lane] = (int(e_src[k]), int(e_dst[k]))
    lane = active[0]
    seen: list[int] = []
    while lane not in seen and lane in waits:
        seen.append(lane)
        src, _ = waits[lane]
        lane = int(np.searchsorted(g.lane_ptr, src, side="right") - 1)
    loop = seen[seen.index(lane) :] if lane in seen else seen
    names = g.tasks["name"].astype(str).to_numpy()
    tasks: list[tuple[int, str, int]] = []
    for ln in loop:
        src, dst = waits[ln]
        for p in (dst, src):
            ti = int(g.pt_task[p])
            item = (ti, str(names[ti]), int(np.searchsorted(g.lane_ptr, p, side="right") - 1))
            if item not in tasks:
                tasks.append(item)
    desc = " -> ".join(f"task {i} '{n}' (lane {ln})" for i, n, ln in tasks)
    raise DependencyCycleError(f"dependency cycle among {len(tasks)} task(s): {desc}", tasks)
