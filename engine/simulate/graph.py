"""Task graph: a Kineto events table turned into lanes of time points plus typed cross-lane edges.

Why points and lanes instead of a task DAG: the scheduler must run at millions of tasks per
second in numpy. A *lane* is one host thread or one GPU stream of one rank; every task puts a
start and an end point on its lane, sorted by original time (nested host calls stay nested).
Between consecutive points of a lane lies a *segment* with a fixed length `d` (the original
time, owned by the innermost open task, or idle). A point's simulated time is

    T[i] = max(T[i-1] + d[i], max over incoming edges e of T[src(e)] + w(e))

which per lane is a cumulative max over a cumulative sum (see schedule.py). Intra-thread order
and intra-stream FIFO are the lanes themselves; the cross-lane edges are typed (`EdgeKind`).

Every inferred edge gets a weight that reproduces the original timing when nothing changes
(a sync's post-wait time, a kernel's launch latency), so an unchanged trace simulates to
itself; what-if edits then change segment lengths or add/copy tasks.

Dependency rules (each documented on the function that builds it):
- LAUNCH: runtime call -> GPU task with the same (rank, correlation id).
- SYNC: host calls matching `SimConfig.sync_regex` (cudaDeviceSynchronize, cudaStreamSynchronize,
  cudaEventSynchronize, synchronous cudaMemcpy, hip*) wait for the last GPU task of each stream
  of their rank that ended before they returned (one stream when Kineto's `cuda_sync` event
  names it).
- EVENT_WAIT: cudaStreamWaitEvent (stream from its `cuda_sync` "Stream Wait Event") makes the
  waiting stream's next task wait for the task launched last before the preceding
  cudaEventRecord on the same thread.
- INTER_THREAD: gap heuristic (SimConfig.thread_block_us / thread_window_us).
- COLLECTIVE: see collectives.py; host collectives on backend threads: `_host_comm_edges`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import Enum

import numpy as np
import pandas as pd

from engine.simulate.config import SimConfig
from engine.trace import columns as _cols

GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
# Kineto rows that mark something rather than occupy a thread or stream.
MARKER_CATS = ("Trace", "cuda_sync", "gpu_user_annotation", "gpu_instr", "ac2g", "fwdbwd")
RUNTIME_CATS = ("cuda_runtime", "cuda_driver", "hip_runtime", "hip_driver")


class EdgeKind(Enum):
    INTRA_THREAD = "intra_thread"
    INTER_THREAD = "inter_thread"
    LAUNCH = "launch"
    SYNC = "sync"
    STREAM_FIFO = "stream_fifo"
    EVENT_WAIT = "event_wait"
    COLLECTIVE = "collective"
    USER = "user"


EDGE_KINDS = tuple(EdgeKind)
_KIND_CODE = {k: i for i, k in enumerate(EDGE_KINDS)}


@dataclass(kw_only=True, slots=True)
class TaskGraph:
    """Tasks (rows of `tasks`), their points on lanes, and cross-lane edges (all numpy arrays).

    tasks: the source events rows (reset index; row i is task i) with extra columns `lane`,
    `gpu` (bool), `parent` (enclosing host task or -1), `sp`/`ep` (start/end point index).
    Points are lane-contiguous: lane l owns points lane_ptr[l]:lane_ptr[l+1].
    """

    tasks: pd.DataFrame
    lanes: pd.DataFrame  # lane, rank, gpu, pid, tid
    lane_ptr: np.ndarray
    pt_task: np.ndarray
    pt_end: np.ndarray
    pt_time: np.ndarray  # original time relative to t0_us
    pt_d: np.ndarray  # segment length before the point (the simulated quantity edits change)
    pt_owner: np.ndarray  # task owning the segment that ends at this point, -1 = idle
    e_src: np.ndarray
    e_dst: np.ndarray
    e_w: np.ndarray
    e_kind: np.ndarray  # int8 codes into EDGE_KINDS
    t0_us: float
    warnings: list[str] = field(default_factory=list)

    @property
    def n_tasks(self) -> int:
        return len(self.tasks)

    @property
    def cpu_only(self) -> bool:
        return not bool(self.tasks["gpu"].any())

    def edge_counts(self) -> dict[str, int]:
        counts = np.bincount(self.e_kind.astype(np.int64), minlength=len(EDGE_KINDS))
        out = {k.value: int(c) for k, c in zip(EDGE_KINDS, counts)}
        gpu_lane = self.lanes["gpu"].to_numpy()
        per_lane = np.diff(self.lane_ptr) - 1
        out[EdgeKind.INTRA_THREAD.value] += int(per_lane[~gpu_lane].clip(0).sum())
        out[EdgeKind.STREAM_FIFO.value] += int(per_lane[gpu_lane].clip(0).sum())
        return out

    def add_edges(self, src: np.ndarray, dst: np.ndarray, w: np.ndarray, kind: EdgeKind) -> None:
        self.e_src = np.concatenate([self.e_src, np.asarray(src, np.int64)])
        self.e_dst = np.concatenate([self.e_dst, np.asarray(dst, np.int64)])
        self.e_w = np.concatenate([self.e_w, np.asarray(w, np.float64)])
        self.e_kind = np.concatenate([self.e_kind, np.full(len(src), _KIND_CODE[kind], np.int8)])

    def scale_tasks(self, factor: np.ndarray) -> None:
        """Multiply the time each task owns (its self time on host, its duration on GPU)."""
        own = self.pt_owner
        m = own >= 0
        self.pt_d[m] *= factor[own[m]]


def _lane_ids(tasks: pd.DataFrame, gpu: np.ndarray) -> tuple[np.ndarray, pd.DataFrame]:
    pid_c, pid_u = pd.factorize(tasks["pid"])  # categorical: codes, no per-row strings
    tid_c, tid_u = pd.factorize(tasks["tid"])
    rank = tasks["rank"].to_numpy(np.int64)
    key = ((rank * 2 + gpu) * (len(pid_u) + 1) + pid_c) * (len(tid_u) + 1) + tid_c
    uniq_key, first, codes = np.unique(key, return_index=True, return_inverse=True)
    lanes = pd.DataFrame(
        {
            "lane": np.arange(len(uniq_key)),
            "rank": rank[first],
            "gpu": gpu[first].astype(bool),
            "pid": [str(pid_u[c]) for c in pid_c[first]],
            "tid": [str(tid_u[c]) for c in tid_c[first]],
        }
    )
    # stable lane order: rank, host before GPU, then pid/tid text (factorize order otherwise)
    order = np.lexsort((lanes["tid"].to_numpy(), lanes["pid"].to_numpy(), lanes["gpu"].to_numpy(), lanes["rank"]))
    remap = np.empty(len(order), np.int64)
    remap[order] = np.arange(len(order))
    lanes = lanes.iloc[order].reset_index(drop=True)
    lanes["lane"] = np.arange(len(lanes))
    return remap[codes], lanes


def select_tasks(events: pd.DataFrame) -> pd.DataFrame:
    """Rows of an events table that occupy a thread or stream (markers and bad times dropped)."""
    ts = events["ts_us"].to_numpy(np.float64)
    dur = events["dur_us"].to_numpy(np.float64)
    ok = np.isfinite(ts) & np.isfinite(dur) & (dur >= 0) & ~_cols.isin(events["cat"], MARKER_CATS)
    return events[ok].reset_index(drop=True)


def build_graph(events: pd.DataFrame, config: SimConfig | None = None) -> TaskGraph:
    """The task graph of an events table (the `events` of a `Trace`, see engine/trace/model.py)."""
    cfg = config or SimConfig()
    tasks = select_tasks(events)
    warnings: list[str] = []
    n = len(tasks)
    gpu = _cols.isin(tasks["cat"], GPU_CATS)
    lane, lanes = _lane_ids(tasks, gpu) if n else (np.zeros(0, np.int64), _empty_lanes())
    ts = tasks["ts_us"].to_numpy(np.float64)
    dur = tasks["dur_us"].to_numpy(np.float64)
    t0 = float(ts.min()) if n else 0.0
    rel = ts - t0

    # ---- points: start i, end n+i, sorted by (lane, time, prio, secondary) ----
    is_end = np.concatenate([np.zeros(n, bool), np.ones(n, bool)])
    time = np.concatenate([rel, rel + dur])
    prio = np.concatenate([np.ones(n, np.int8), np.where(dur > 0, 0, 2).astype(np.int8)])
    second = np.concatenate([-dur, -rel])
    lane2 = np.concatenate([lane, lane])
    order = np.lexsort((second, prio, time, lane2))
    pt_task = np.concatenate([np.arange(n), np.arange(n)])[order]
    pt_end = is_end[order]
    pt_time = time[order]
    pt_lane = lane2[order]
    lane_ptr = np.searchsorted(pt_lane, np.arange(len(lanes) + 1))
    first = np.zeros(2 * n, bool)
    first[lane_ptr[:-1][lane_ptr[:-1] < 2 * n]] = True
    pt_d = np.empty(2 * n)
    pt_d[0:1] = pt_time[0:1]
    pt_d[1:] = np.diff(pt_time)
    pt_d[first] = pt_time[first]
    sp = np.empty(n, np.int64)
    ep = np.empty(n, np.int64)
    idx = np.arange(2 * n)
    sp[pt_task[~pt_end]] = idx[~pt_end]
    ep[pt_task[pt_end]] = idx[pt_end]

    parent = _host_parents(pt_task, pt_end, pt_lane, gpu, n)
    pt_owner = _owners(pt_task, pt_end, first, gpu, parent)
    tasks["lane"] = lane
    tasks["gpu"] = gpu
    tasks["parent"] = parent
    tasks["sp"] = sp
    tasks["ep"] = ep

    g = TaskGraph(
        tasks=tasks,
        lanes=lanes,
        lane_ptr=lane_ptr,
        pt_task=pt_task,
        pt_end=pt_end,
        pt_time=pt_time,
        pt_d=pt_d,
        pt_owner=pt_owner,
        e_src=np.zeros(0, np.int64),
        e_dst=np.zeros(0, np.int64),
        e_w=np.zeros(0),
        e_kind=np.zeros(0, np.int8),
        t0_us=t0,
        warnings=warnings,
    )
    if n and gpu.any():
        _launch_edges(g, cfg)
        _sync_edges(g, cfg, events)
        _event_wait_edges(g, events)
    _host_comm_edges(g, cfg)
    _inter_thread_edges(g, cfg)
    from engine.simulate.collectives import collective_edges

    collective_edges(g)
    return g


def _empty_lanes() -> pd.DataFrame:
    return pd.DataFrame({"lane": [], "rank": [], "gpu": [], "pid": [], "tid": []})


def _host_parents(pt_task, pt_end, pt_lane, gpu, n) -> np.ndarray:
    """Enclosing host task of every task (-1 at top level or on GPU), by depth levels.

    Why levels: depth after each point is a cumulative sum; the parent of a task starting at
    depth D is the last start at depth D-1 before it, one `maximum.accumulate` per level.
    """
    parent = np.full(n, -1, np.int64)
    host_pt = ~gpu[pt_task]
    if not host_pt.any():
        return parent
    step = np.where(pt_end, -1, 1)
    step[~host_pt] = 0
    depth = np.cumsum(step)
    starts = ~pt_end & host_pt
    idx = np.arange(len(pt_task))
    max_d = int(depth[starts].max()) if starts.any() else 0
    for level in range(1, max_d):
        at = np.where(starts & (depth == level), idx, -1)
        last = np.maximum.accumulate(at)
        kids = np.flatnonzero(starts & (depth == level + 1))
        p = last[kids]
        ok = (p >= 0) & (pt_lane[np.maximum(p, 0)] == pt_lane[kids])
        parent[pt_task[kids[ok]]] = pt_task[p[ok]]
    return parent


def _owners(pt_task, pt_end, first, gpu, parent) -> np.ndarray:
    """Task owning the segment that ends at each point (-1 = idle)."""
    prev_task = np.roll(pt_task, 1)
    prev_end = np.roll(pt_end, 1)
    own = np.where(prev_end, parent[prev_task], prev_task) if len(pt_task) else pt_task.copy()
    on_gpu = gpu[pt_task]
    own = np.where(on_gpu, np.where(pt_end, pt_task, -1), own)
    own[first] = -1
    return own.astype(np.int64)


def _key(rank: np.ndarray, corr: np.ndarray) -> np.ndarray:
    return rank.astype(np.int64) * (1 << 40) + corr.astype(np.int64)


def _launch_edges(g: TaskGraph, cfg: SimConfig) -> None:
    """CPU->GPU: runtime call start -> GPU task start, matched by (rank, correlation id).

    A kernel that started within `stream_bound_gap_us` of its stream predecessor's end was held
    by the stream: its launch latency is capped at the typical (median) latency of launch-bound
    kernels, so a faster stream lets it start earlier. A launch-bound kernel keeps its own
    latency, and its gap after the predecessor is capped at the typical stream gap.
    """
    t = g.tasks
    corr = t["correlation"].to_numpy(dtype=np.float64, na_value=np.nan)
    rank = t["rank"].to_numpy(np.int64)
    host_rt = (~t["gpu"].to_numpy()) & _cols.isin(t["cat"], RUNTIME_CATS) & np.isfinite(corr)
    gpu_k = t["gpu"].to_numpy() & np.isfinite(corr)
    hk = _key(rank[host_rt], corr[host_rt])
    hidx = np.flatnonzero(host_rt)
    o = np.argsort(hk, kind="stable")
    hk, hidx = hk[o], hidx[o]
    gidx = np.flatnonzero(gpu_k)
    gk = _key(rank[gidx], corr[gidx])
    pos = np.searchsorted(hk, gk)
    pos_c = np.minimum(pos, max(len(hk) - 1, 0))
    hit = (pos < len(hk)) & (hk[pos_c] == gk) if len(hk) else np.zeros(len(gk), bool)
    gidx, lidx = gidx[hit], hidx[pos_c[hit]]
    if "launcher" not in t:
        t["launcher"] = -1
        t["launch_w"] = 0.0
    _queue_edges(g, cfg, gidx, lidx, EdgeKind.LAUNCH)
    unlinked = int(t["gpu"].sum()) - len(gidx)
    if unlinked:
        g.warnings.append(
            f"{unlinked} GPU task(s) have no launching runtime call in the trace; they keep their stream gaps"
        )


def _queue_edges(g: TaskGraph, cfg: SimConfig, gidx: np.ndarray, lidx: np.ndarray, kind: EdgeKind) -> None:
    """Edges launcher start -> queued task start (GPU kernels, host collectives on comm threads)."""
    t = g.tasks
    t.loc[gidx, "launcher"] = lidx
    sp_g = t["sp"].to_numpy()[gidx]
    sp_l = t["sp"].to_numpy()[lidx]
    s_k = g.pt_time[sp_g]
    l_k = g.pt_time[sp_l]
    lat = s_k - l_k
    has_prev = np.ones(len(sp_g), bool)
    starts = g.lane_ptr[:-1]
    has_prev[np.isin(sp_g, starts)] = False
    gap = np.where(has_prev, s_k - g.pt_time[np.maximum(sp_g - 1, 0)], np.inf)
    bound = gap <= cfg.stream_bound_gap_us
    typ_lat = float(np.median(lat[~bound])) if (~bound).any() else (float(np.median(lat)) if len(lat) else 0.0)
    typ_gap = float(np.median(gap[bound])) if bound.any() else cfg.stream_bound_gap_us
    w = np.where(bound, np.minimum(lat, max(typ_lat, 0.0)), lat)
    lb = ~bound & has_prev
    g.pt_d[sp_g[lb]] = np.minimum(gap[lb], typ_gap)
    t.loc[gidx, "launch_w"] = w
    g.add_edges(sp_l, sp_g, w, kind)


HOST_COMM = ("gloo:", "nccl:", "mpi:", "ucc:")


def _host_comm_edges(g: TaskGraph, cfg: SimConfig) -> None:
    """Host collectives run by a backend thread (gloo:all_reduce, ...), enqueued by c10d:: calls.

    Enqueue: the k-th backend collective of a rank is queued by its k-th c10d:: collective call
    (the order both threads see; when the counts differ, the latest c10d:: call before it) and
    is then treated like a kernel and its launch (`_queue_edges`). Completion: no trace records
    where the caller waited, so the caller's first point at or after the collective's original
    end depends on that end (heuristic: pessimistic when the caller had slack).
    """
    t = g.tasks
    gpu = t["gpu"].to_numpy()
    rank_all = t["rank"].to_numpy()
    cpu_ranks = ~np.isin(rank_all, np.unique(rank_all[gpu]))  # with a GPU, kernels are the collectives
    comm = ~gpu & cpu_ranks & _cols.where(t["name"], lambda s: s.startswith(HOST_COMM))
    if not comm.any():
        return
    c10d = ~gpu & _cols.where(t["name"], lambda s: s.startswith("c10d::") and "wait" not in s)
    if "launcher" not in t:
        t["launcher"] = -1
        t["launch_w"] = 0.0
    rank = t["rank"].to_numpy()
    ts = t["ts_us"].to_numpy(np.float64)
    lane = t["lane"].to_numpy()
    g_l, l_l = [], []
    for r in np.unique(rank[comm]):
        ci = np.flatnonzero(comm & (rank == r))
        ci = ci[np.argsort(ts[ci], kind="stable")]
        qi = np.flatnonzero(c10d & (rank == r))
        qi = qi[np.argsort(ts[qi], kind="stable")]
        if not len(qi):
            continue
        if len(qi) == len(ci):
            pick = qi
        else:
            pos = np.searchsorted(ts[qi], ts[ci], side="right") - 1
            ok = pos >= 0
            ci, pick = ci[ok], qi[pos[ok]]
        diff = lane[pick] != lane[ci]
        g_l.append(ci[diff])
        l_l.append(pick[diff])
    if not g_l:
        return
    gidx, lidx = np.concatenate(g_l), np.concatenate(l_l)
    _queue_edges(g, cfg, gidx, lidx, EdgeKind.INTER_THREAD)
    # completion: caller lane's first point at/after the collective's end
    ep = t["ep"].to_numpy()
    src, dst, w = [], [], []
    for ci, qi in zip(gidx, lidx):
        ln = lane[qi]
        a, b = g.lane_ptr[ln], g.lane_ptr[ln + 1]
        end_t = g.pt_time[ep[ci]]
        k = a + int(np.searchsorted(g.pt_time[a:b], end_t, side="left"))
        if k < b:
            src.append(ep[ci])
            dst.append(k)
            w.append(g.pt_time[k] - end_t)
    if src:
        g.add_edges(np.array(src), np.array(dst), np.array(w), EdgeKind.SYNC)


def _sync_streams(events: pd.DataFrame) -> dict[tuple[int, int], int]:
    """(rank, correlation) -> stream of Kineto `cuda_sync` "Stream Sync" events (stream-scoped waits)."""
    cs = events[_cols.isin(events["cat"], ("cuda_sync",))]
    if cs.empty:
        return {}
    cs = cs[_cols.isin(cs["name"], ("Stream Sync",)) & cs["stream"].notna() & cs["correlation"].notna()]
    return {(int(r), int(c)): int(s) for r, c, s in zip(cs["rank"], cs["correlation"], cs["stream"]) if int(s) >= 0}


def _sync_edges(g: TaskGraph, cfg: SimConfig, events: pd.DataFrame) -> None:
    """GPU->CPU: a sync call's return waits for the last GPU task of each stream that ended
    before it returned (weight = the original post-wait time, capped at the call's own
    segment, so a GPU that finished long before the call does not delay it)."""
    t = g.tasks
    rx = re.compile(cfg.sync_regex)
    is_sync = (~t["gpu"].to_numpy()) & _cols.isin(t["cat"], RUNTIME_CATS)
    is_sync &= _cols.where(t["name"], lambda s: bool(rx.search(s)))
    sidx = np.flatnonzero(is_sync)
    if not len(sidx):
        return
    stream_of = _sync_streams(events)
    corr = t["correlation"].to_numpy(dtype=np.float64, na_value=np.nan)
    rank = t["rank"].to_numpy(np.int64)
    want = np.array(
        [stream_of.get((int(rank[i]), int(corr[i])), -1) if np.isfinite(corr[i]) else -1 for i in sidx], np.int64
    )
    ep_s = t["ep"].to_numpy()[sidx]
    ce = g.pt_time[ep_s]
    lanes = g.lanes
    src_l, dst_l, w_l = [], [], []
    for lane in lanes.index[lanes["gpu"]]:
        lr, lt = int(lanes.at[lane, "rank"]), lanes.at[lane, "tid"]
        a, b = g.lane_ptr[lane], g.lane_ptr[lane + 1]
        ends = np.flatnonzero(g.pt_end[a:b]) + a
        if not len(ends):
            continue
        et = g.pt_time[ends]
        sel = (rank[sidx] == lr) & ((want < 0) | (want.astype(str) == str(lt)))
        if not sel.any():
            continue
        k = np.searchsorted(et, ce[sel] + 1e-6, side="right") - 1
        ok = k >= 0
        src = ends[k[ok]]
        dst = ep_s[sel][ok]
        w = np.minimum(g.pt_time[dst] - g.pt_time[src], g.pt_d[dst])
        src_l.append(src)
        dst_l.append(dst)
        w_l.append(w)
    if src_l:
        g.add_edges(np.concatenate(src_l), np.concatenate(dst_l), np.concatenate(w_l), EdgeKind.SYNC)


def _event_wait_edges(g: TaskGraph, events: pd.DataFrame) -> None:
    """GPU->GPU across streams: cudaEventRecord -> cudaStreamWaitEvent (see module docstring)."""
    cs = events[_cols.isin(events["cat"], ("cuda_sync",))]
    cs = cs[
        _cols.isin(cs["name"], ("Stream Wait Event",))
        & cs["stream"].notna().to_numpy()
        & cs["correlation"].notna().to_numpy()
    ]
    if cs.empty:
        return
    t = g.tasks
    if "launcher" not in t:
        return
    names = _cols.as_str(t["name"])
    rank = t["rank"].to_numpy(np.int64)
    corr = t["correlation"].to_numpy(dtype=np.float64, na_value=np.nan)
    lane = t["lane"].to_numpy()
    sp = t["sp"].to_numpy()
    ep = t["ep"].to_numpy()
    gpu_idx = np.flatnonzero(t["gpu"].to_numpy() & (t["launcher"].to_numpy() >= 0))
    launch_time = g.pt_time[sp[t["launcher"].to_numpy()[gpu_idx]]]
    stream = _cols.as_str(t["tid"])
    rec_idx = np.flatnonzero(names == "cudaEventRecord")
    src_l, dst_l, w_l = [], [], []
    for r, c, s in zip(cs["rank"], cs["correlation"], cs["stream"]):
        wait = np.flatnonzero((names == "cudaStreamWaitEvent") & (rank == int(r)) & (corr == float(c)))
        if not len(wait):
            continue
        wi = wait[0]
        wt = g.pt_time[sp[wi]]
        recs = rec_idx[(lane[rec_idx] == lane[wi]) & (g.pt_time[sp[rec_idx]] <= wt)]
        if not len(recs):
            continue
        rt = g.pt_time[sp[recs]].max()
        same_rank = rank[gpu_idx] == int(r)
        on_s = stream[gpu_idx] == str(int(s))
        before = same_rank & ~on_s & (launch_time < rt)
        after = same_rank & on_s & (launch_time > wt)
        if not before.any() or not after.any():
            continue
        src_t = gpu_idx[before][np.argmax(launch_time[before])]
        dst_t = gpu_idx[after][np.argmin(launch_time[after])]
        src_l.append(ep[src_t])
        dst_l.append(sp[dst_t])
        w_l.append(min(0.0, g.pt_time[sp[dst_t]] - g.pt_time[ep[src_t]]))
    if src_l:
        g.add_edges(np.array(src_l), np.array(dst_l), np.array(w_l), EdgeKind.EVENT_WAIT)


def _inter_thread_edges(g: TaskGraph, cfg: SimConfig) -> None:
    """Host thread -> host thread, by a gap heuristic (no trace records the hand-off itself).

    A point that ends a segment of at least `thread_block_us` is where a thread woke up (after
    idling or blocking). It depends on the latest point of another thread of the same rank at
    most `thread_window_us` earlier (strictly earlier, so edges never form a cycle), with the
    original gap as weight. Up to 8 preceding points are examined to find another thread.
    """
    lanes = g.lanes
    host_lanes = lanes[~lanes["gpu"]]
    if host_lanes.empty or host_lanes.groupby("rank").size().max() < 2:
        return
    host_pt = ~g.tasks["gpu"].to_numpy()[g.pt_task]
    pidx = np.flatnonzero(host_pt)
    lane_of_pt = np.repeat(np.arange(len(lanes)), np.diff(g.lane_ptr))
    rank_of_lane = lanes["rank"].to_numpy()
    src_l, dst_l, w_l = [], [], []
    for r in pd.unique(host_lanes["rank"]):
        mine = pidx[rank_of_lane[lane_of_pt[pidx]] == r]
        o = np.argsort(g.pt_time[mine], kind="stable")
        mine = mine[o]
        tm = g.pt_time[mine]
        ln = lane_of_pt[mine]
        cand = np.flatnonzero(g.pt_d[mine] >= cfg.thread_block_us)
        first = np.isin(mine[cand], g.lane_ptr[:-1])
        cand = cand[~first]
        if not len(cand):
            continue
        t_c = tm[cand]
        pos = np.searchsorted(tm, t_c, side="left") - 1
        found = np.full(len(cand), -1, np.int64)
        for k in range(8):
            j = pos - k
            ok = (found < 0) & (j >= 0)
            jj = np.maximum(j, 0)
            ok &= (ln[jj] != ln[cand]) & (tm[jj] >= t_c - cfg.thread_window_us) & (tm[jj] < t_c)
            found[ok] = jj[ok]
        hit = found >= 0
        src_l.append(mine[found[hit]])
        dst_l.append(mine[cand[hit]])
        w_l.append(t_c[hit] - tm[found[hit]])
    if src_l:
        g.add_edges(np.concatenate(src_l), np.concatenate(dst_l), np.concatenate(w_l), EdgeKind.INTER_THREAD)
