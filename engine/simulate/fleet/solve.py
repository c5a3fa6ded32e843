"""The fleet scheduler: every rank's lanes solved rank by rank between collective barriers.

Why not one graph: 512 ranks x 200k events is 200M points; the per-lane round loop of
schedule.solve would run rounds x lanes of Python over every lane of every rank. Here each rank
keeps its own arrays and its own lane fronts (the same segment rule as schedule.py:
`T = C + maximum.accumulate(max(Z - C, 0))` over a cumulative sum C), and ranks meet only at
collectives. A matched collective instance is one *barrier*: its value is the latest arrival of
its members (each member's stream or thread predecessor's end plus its gap, and its launch plus
the launch latency, as engine/simulate/collectives.py defines them), and each member's start
has one edge from it (weight 0): O(members) edges per instance, never all pairs. On a rank the
barrier is a point of its own (an extra one-point lane, computed when released), so the
readiness test of schedule.py ("source point behind its lane's front") covers it unchanged.

The loop: advance every rank that can move until all its lanes wait (on a barrier, or done);
collect the members whose arrival is now known; release the instances whose members all
arrived; repeat with the ranks that got a release. The Python work is O(instances x ranks x
lanes of a rank), i.e. linear in the ranks; the numpy work is O(points + edges). A readiness
scan looks at a lane's pending edges in growing chunks, so a blocked lane costs O(1) per check,
not O(its remaining edges).
"""

from __future__ import annotations

import numpy as np

from engine.errors import TraceError
from engine.simulate.schedule import segment_times

_CHUNK = 64


class RankState:
    """One rank's points, edges and solver state (the extra lanes after the real ones are its
    barrier points, one per matched collective member, in member order)."""

    def __init__(self, rank: int, prog, ext_sp: np.ndarray, shift: float):
        self.rank = rank
        lane_ptr = prog["lane_ptr"]
        pt_d = prog["pt_d"]
        npts, nk = len(pt_d), len(ext_sp)
        self.npts, self.nl = npts, len(lane_ptr) - 1
        d = np.zeros(npts + nk)
        d[:npts] = pt_d
        firsts = lane_ptr[:-1][lane_ptr[:-1] < lane_ptr[1:]]
        d[firsts] += shift  # points are relative to the rank's first event; the fleet's t0 is earlier
        self.d = d
        self.lane_ptr = np.concatenate([lane_ptr, lane_ptr[-1] + np.arange(1, nk + 1)])
        src = np.concatenate([prog["e_src"].astype(np.int64), npts + np.arange(nk)])
        dst = np.concatenate([prog["e_dst"].astype(np.int64), ext_sp.astype(np.int64)])
        w = np.concatenate([prog["e_w"], np.zeros(nk)])
        o = np.argsort(dst, kind="stable")
        idt = np.int32 if npts + nk < (1 << 31) - 1 else np.int64
        self.e_src, self.e_dst, self.e_w = src[o].astype(idt), dst[o].astype(idt), w[o]
        self.e_src_lane = (np.searchsorted(self.lane_ptr, self.e_src, side="right") - 1).astype(idt)
        self.e_ptr = np.searchsorted(self.e_dst, self.lane_ptr)
        self.T = np.full(npts + nk, np.nan)
        self.front = self.lane_ptr[:-1].copy()
        self.end = self.lane_ptr[1:]
        self.eptr = self.e_ptr[:-1].copy()
        self.active = [ln for ln in range(self.nl) if self.front[ln] < self.end[ln]]
        # per lane, the source point (and its lane) of the edge it last stopped at, -1: none;
        # the lane is not scanned again until that point is computed
        self.wsrc = [-1] * self.nl
        self.wlane = [0] * self.nl
        self.rounds = 0

    def _ready_prefix(self, e0: int, e1: int) -> int:
        """How many of the lane's pending edges e0:e1 (by destination) have their source computed."""
        n, lo, c = e1 - e0, 0, _CHUNK
        while lo < n:
            hi = min(n, lo + c)
            s = self.e_src[e0 + lo : e0 + hi]
            ready = s < self.front[self.e_src_lane[e0 + lo : e0 + hi]]
            if not ready.all():
                return lo + int(np.argmin(ready))
            lo, c = hi, c * 4
        return n

    def advance(self) -> bool:
        """Compute every point that can be computed now; whether any was."""
        T, d, front, end, eptr, e_ptr = self.T, self.d, self.front, self.end, self.eptr, self.e_ptr
        e_src, e_dst, e_w, lane_ptr = self.e_src, self.e_dst, self.e_w, self.lane_ptr
        any_progress = False
        while self.active:
            self.rounds += 1
            progressed = False
            still = []
            wsrc, wlane = self.wsrc, self.wlane
            for lane in self.active:
                ws = wsrc[lane]
                if ws >= 0 and ws >= front[wlane[lane]]:
                    still.append(lane)  # still waiting for the same point
                    continue
                f = int(front[lane])
                e0, e1 = int(eptr[lane]), int(e_ptr[lane + 1])
                if e0 < e1:
                    k = self._ready_prefix(e0, e1)
                    if k < e1 - e0:
                        stop = int(e_dst[e0 + k])
                        wsrc[lane], wlane[lane] = int(e_src[e0 + k]), int(self.e_src_lane[e0 + k])
                    else:
                        stop = int(end[lane])
                        wsrc[lane] = -1
                    k = int(np.searchsorted(e_dst[e0 : e0 + k], stop, side="left"))
                else:
                    k, stop = 0, int(end[lane])
                if stop > f:
                    segment_times(
                        T, d, f, stop, f > lane_ptr[lane], e_src[e0 : e0 + k], e_dst[e0 : e0 + k], e_w[e0 : e0 + k]
                    )
                    front[lane] = stop
                    eptr[lane] = e0 + k
                    progressed = True
                if front[lane] < end[lane]:
                    still.append(lane)
            self.active = still
            if not progressed:
                break
            any_progress = True
        return any_progress

    def computed(self, p: np.ndarray) -> np.ndarray:
        """Whether each point (-1: none) is computed."""
        lane = np.searchsorted(self.lane_ptr, np.maximum(p, 0), side="right") - 1
        return (p < 0) | (p < self.front[lane])

    def release(self, k: np.ndarray, value: np.ndarray) -> None:
        """Barrier points `k` (member order) are known: their values, and their lanes done."""
        p = self.npts + k
        self.T[p] = value
        self.front[self.nl + k] = p + 1

    @property
    def done(self) -> bool:
        return not self.active


class FleetSolver:
    """All ranks' states plus the matched collective instances (see the module doc).

    members: per matched member (instance-major), its rank index (into `ranks`), its index among
    its rank's collective tasks, and its instance; arrivals read from each rank's program."""

    def __init__(self, states: list[RankState], progs: list[dict], m_rank, m_comm, m_ext, m_gid, n_inst: int):
        self.states = states
        self.m_rank, self.m_gid, self.m_ext = m_rank, m_gid, m_ext
        n = len(m_rank)
        self.pred = np.zeros(n, np.int64)
        self.pred_w = np.zeros(n)
        self.lau = np.zeros(n, np.int64)
        self.lau_w = np.zeros(n)
        for r, p in enumerate(progs):
            m = m_rank == r
            c = m_comm[m]
            self.pred[m], self.pred_w[m] = p["c_pred"][c], p["c_pred_w"][c]
            self.lau[m], self.lau_w[m] = p["c_lau"][c], p["c_lau_w"][c]
        order = np.argsort(m_rank, kind="stable")
        self.by_rank = np.split(order, np.searchsorted(m_rank[order], np.arange(1, len(states))))
        self.pending = [x.copy() for x in self.by_rank]
        self.arrival = np.full(n, -np.inf)
        self.left = np.bincount(m_gid, minlength=n_inst).astype(np.int64)
        self.value = np.full(n_inst, -np.inf)
        self.released = np.zeros(n_inst, bool)
        inst_order = np.argsort(m_gid, kind="stable")
        self.inst_members = np.split(inst_order, np.searchsorted(m_gid[inst_order], np.arange(1, n_inst)))
        self.n_inst = n_inst

    def _collect(self, r: int) -> None:
        st, pend = self.states[r], self.pending[r]
        if not len(pend):
            return
        pr, la = self.pred[pend], self.lau[pend]
        ok = st.computed(pr) & st.computed(la)
        if not ok.any():
            return
        got = pend[ok]
        T = st.T
        a = np.where(pr[ok] >= 0, T[np.maximum(pr[ok], 0)] + self.pred_w[got], -np.inf)
        b = np.where(la[ok] >= 0, T[np.maximum(la[ok], 0)] + self.lau_w[got], -np.inf)
        arr = np.maximum(a, b)
        self.arrival[got] = arr
        np.maximum.at(self.value, self.m_gid[got], arr)
        np.subtract.at(self.left, self.m_gid[got], 1)
        self.pending[r] = pend[~ok]

    def run(self, progress=None) -> int:
        """Solve; the number of barrier rounds. TraceError when ranks wait on each other forever."""
        from engine.progress import report

        run = list(range(len(self.states)))
        rounds = 0
        while run:
            rounds += 1
            for r in run:
                self.states[r].advance()
                self._collect(r)
            ready = np.flatnonzero((self.left == 0) & ~self.released)
            if not len(ready):
                break
            self.released[ready] = True
            mem = np.concatenate([self.inst_members[i] for i in ready])
            vals = self.value[self.m_gid[mem]]
            touched = np.unique(self.m_rank[mem])
            for r in touched:
                m = self.m_rank[mem] == r
                self.states[r].release(self.m_ext[mem[m]], vals[m])
            run = [int(r) for r in touched]
            report(progress, 0.5 + 0.45 * float(self.released.sum()) / max(1, self.n_inst), "scheduling ranks")
        stuck = [st.rank for st in self.states if not st.done]
        if stuck:
            wait = np.flatnonzero(~self.released)
            raise TraceError(
                f"the ranks wait on each other forever: {len(stuck)} rank(s) (e.g. {stuck[:5]}) stop at "
                f"{len(wait)} collective(s) that not every member reaches (a dependency cycle across ranks)"
            )
        return rounds
