"""Cross-lane dependency rules of the task graph (see graph.py for the lanes and points).

Every rule is whole-array numpy: matching by packed integer keys and `searchsorted`, loops only
over lanes or (rank, stream) groups, so the cost grows with the events, not with events x
syncs. Each inferred edge gets the weight that reproduces the original timing when nothing
changes (a kernel's launch latency, a sync's post-wait time).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from engine.simulate.config import SimConfig
from engine.simulate.taskgraph import EDGE_KINDS, EdgeKind, TaskGraph
from engine.simulate.waits import (
    HOST_WAIT_RX,
    LAUNCH_RX,
    SKEW_US,
    backpressure,
    lane_stream,
    last_gpu_ends,
    split_waits,
)
from engine.trace import columns as _cols
from engine.trace.steps import step_mask
from engine.trace.vocab import ANNOTATION_CATS, RUNTIME_CATS, is_backend_comm
from engine.user_regex import compile_user


def build_edges(g: TaskGraph, cfg: SimConfig, events: pd.DataFrame, sync_rows: np.ndarray | None = None) -> None:
    """All inferred cross-lane edges except collectives (collectives.py), in a fixed order.
    `sync_rows`: the rows of `events` in Kineto's `cuda_sync` category, when known."""
    if len(g.tasks) and g.tasks["gpu"].to_numpy().any():
        if sync_rows is None:
            sync_rows = np.flatnonzero(_cols.isin(events["cat"], ("cuda_sync",)))
        waits = [launch_edges(g, cfg), sync_edges(g, cfg, _sync_cs(events, sync_rows, "Stream Sync"))]
        waits.append(host_wait_pairs(g))
        # one pass over every wait, before the thread hand-offs: a cut call is no wake-up point
        split_waits(g, np.concatenate([w[0] for w in waits]), np.concatenate([w[1] for w in waits]))
        event_wait_edges(g, _sync_cs(events, sync_rows, "Stream Wait Event"))
        implicit_stream_waits(g, cfg)
    host_comm_edges(g, cfg)
    inter_thread_edges(g, cfg)


def _key(rank: np.ndarray, corr: np.ndarray) -> np.ndarray:
    return rank.astype(np.int64) * (1 << 40) + corr.astype(np.int64)


def _lookup(keys: np.ndarray, wanted: np.ndarray, last: bool = False) -> np.ndarray:
    """Position in `keys` (any order) of each wanted key, -1 when absent; the first (or last)
    position among equal keys."""
    o = np.argsort(keys, kind="stable")
    sk = keys[o]
    pos = np.searchsorted(sk, wanted, side="right" if last else "left") - (1 if last else 0)
    pc = np.clip(pos, 0, max(len(sk) - 1, 0))
    hit = (pos >= 0) & (pos < len(sk)) & (sk[pc] == wanted) if len(sk) else np.zeros(len(wanted), bool)
    return np.where(hit, o[pc] if len(sk) else -1, -1)


def _corr(t: pd.DataFrame) -> np.ndarray:
    return t["correlation"].to_numpy(dtype=np.float64, na_value=np.nan)


Pairs = tuple[np.ndarray, np.ndarray]  # (GPU end point, host call end point) waits for split_waits


def launch_edges(g: TaskGraph, cfg: SimConfig) -> Pairs:
    """CPU->GPU: runtime call start -> GPU task start, matched by (rank, correlation id).

    A kernel that started within `stream_bound_gap_us` of its stream predecessor's end, or was
    launched before that predecessor ended, was held by the stream: its launch latency is capped at the typical (median) latency of launch-bound
    kernels, so a faster stream lets it start earlier. A launch-bound kernel keeps its own
    latency, and its gap after the predecessor is capped at the typical stream gap.
    Returns the GPU -> host waits of blocking launches and of launch back-pressure (waits.py).
    """
    t = g.tasks
    corr = _corr(t)
    rank = t["rank"].to_numpy(np.int64)
    gpu = t["gpu"].to_numpy()
    host_rt = ~gpu & g.text("cat").where(lambda c: c in RUNTIME_CATS) & np.isfinite(corr)
    hidx = np.flatnonzero(host_rt)
    gidx = np.flatnonzero(gpu & np.isfinite(corr))
    pos = _lookup(_key(rank[hidx], corr[hidx]), _key(rank[gidx], corr[gidx]))
    hit = pos >= 0
    gidx, lidx = gidx[hit], hidx[pos[hit]]
    _queue_edges(g, cfg, gidx, lidx, EdgeKind.LAUNCH)
    unlinked = int(gpu.sum()) - len(gidx)
    if unlinked:
        g.warnings.append(
            f"{unlinked} GPU task(s) have no launching runtime call in the trace; they keep their stream gaps"
        )
    b_src, b_dst = blocking_launch_edges(g, gidx, lidx)
    q_src, q_dst = backpressure(g, gidx, lidx)
    return np.concatenate([b_src, q_src]), np.concatenate([b_dst, q_dst])


def blocking_launch_edges(g: TaskGraph, gidx: np.ndarray, lidx: np.ndarray) -> Pairs:
    """GPU->CPU: a launch call that returned after the GPU task it launched had ended waited for
    it (a copy to pageable memory, cudaMemcpyAsync on the legacy stream, ...), whatever its
    name but a kernel launch's (waits.LAUNCH_RX: a tiny kernel often ends before its launch
    call returns; the launch did not wait for it): its return depends on that task's end (the pairs returned, for `split_waits`). Why:
    without it a GPU-bound loop's host seems to run free, and neither the prediction nor the
    critical path sees the GPU hold it back."""
    ep = g.tasks["ep"].to_numpy()
    g_end, l_end = ep[gidx], ep[lidx]
    w8 = g.pt_time[l_end] + SKEW_US >= g.pt_time[g_end]  # host/GPU clock skew (waits.SKEW_US)
    w8 &= ~g.text("name").where(LAUNCH_RX.search)[lidx]  # a kernel launch never waits for its kernel
    return g_end[w8], l_end[w8]


def _queue_edges(g: TaskGraph, cfg: SimConfig, gidx: np.ndarray, lidx: np.ndarray, kind: EdgeKind) -> None:
    """Edges launcher start -> queued task start (GPU kernels, host collectives on comm threads)."""
    t = g.tasks
    sp = t["sp"].to_numpy()
    sp_g, sp_l = sp[gidx], sp[lidx]
    s_k = g.pt_time[sp_g]
    lat = s_k - g.pt_time[sp_l]
    first = np.zeros(len(g.pt_d) + 1, bool)
    first[g.lane_ptr[:-1]] = True
    has_prev = ~first[sp_g]
    gap = np.where(has_prev, s_k - g.pt_time[np.maximum(sp_g - 1, 0)], np.inf)
    bound = gap <= cfg.stream_bound_gap_us
    # launched while its stream was still busy: queued behind that work, whatever the gap after
    # it (a copy's setup, a wait on an event); its latency is not a fixed cost either
    bound |= has_prev & (g.pt_time[np.maximum(sp_g - 1, 0)] > g.pt_time[sp_l])
    # typical latency and gap per rank (its own host and driver): a rank's graph is then the same
    # whether built alone (the fleet simulator, engine/simulate/fleet) or with the other ranks
    typ_lat = np.zeros(len(gidx))
    typ_gap = np.full(len(gidx), float(cfg.stream_bound_gap_us))
    rank = t["rank"].to_numpy(np.int64)[gidx]
    for r in np.unique(rank):
        m = rank == r
        lr, gr, br = lat[m], gap[m], bound[m]
        typ_lat[m] = float(np.median(lr[~br])) if (~br).any() else float(np.median(lr))
        if br.any():
            typ_gap[m] = float(np.median(gr[br]))
    w = np.where(bound, np.minimum(lat, np.maximum(typ_lat, 0.0)), lat)
    lb = ~bound & has_prev
    g.pt_d[sp_g[lb]] = np.minimum(gap[lb], typ_gap[lb])
    # a stream's first task waits for its launch, not for a fixed offset from the trace's start
    # (that offset would hold it at its recorded time whatever the host does)
    g.pt_d[sp_g[~has_prev]] = 0.0
    g.launcher[gidx] = lidx
    g.launch_w[gidx] = w
    g.add_edges(sp_l, sp_g, w, kind)


def _lane_search(g: TaskGraph, lane: np.ndarray, times: np.ndarray, side: str) -> np.ndarray:
    """Per query, the index of searchsorted(times of `lane`'s points, time, side) as a global
    point index (lane_ptr[lane+1] when past the lane's end). One searchsorted per distinct lane."""
    out = np.empty(len(lane), np.int64)
    for ln in np.unique(lane):
        m = lane == ln
        a, b = g.lane_ptr[ln], g.lane_ptr[ln + 1]
        out[m] = a + np.searchsorted(g.pt_time[a:b], times[m], side=side)  # type: ignore[call-overload]  # side is "left"/"right"
    return out


def host_comm_edges(g: TaskGraph, cfg: SimConfig) -> None:
    """Host collectives run by a backend thread (gloo:all_reduce, ...), enqueued by c10d:: calls.

    Enqueue: the k-th backend collective of a rank is queued by its k-th c10d:: collective call
    (the order both threads see; when the counts differ, the latest c10d:: call before it) and
    is then treated like a kernel and its launch (`_queue_edges`). Completion: no trace records
    where the caller waited, so the caller's first point at or after the collective's original
    end depends on that end (heuristic: pessimistic when the caller had slack).
    """
    t = g.tasks
    gpu = t["gpu"].to_numpy()
    rank = t["rank"].to_numpy()
    cpu_ranks = ~np.isin(rank, np.unique(rank[gpu]))  # with a GPU, kernels are the collectives
    names = g.text("name")
    comm = ~gpu & cpu_ranks & names.where(is_backend_comm)
    if not comm.any():
        return
    c10d = ~gpu & names.where(lambda s: s.startswith("c10d::") and "wait" not in s)
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
    end_t = g.pt_time[ep[gidx]]
    k = _lane_search(g, lane[lidx], end_t, "left")
    ok = k < g.lane_ptr[lane[lidx] + 1]
    if ok.any():
        g.add_edges(ep[gidx][ok], k[ok], g.pt_time[k[ok]] - end_t[ok], EdgeKind.SYNC)


SyncEvents = tuple[np.ndarray, np.ndarray, np.ndarray]  # rank, correlation, stream


def _sync_cs(events: pd.DataFrame, rows: np.ndarray, name: str) -> SyncEvents:
    """(rank, correlation, stream) of the `cuda_sync` rows (`rows` of `events`) called `name`
    that have a stream and a correlation id (numpy arrays; no DataFrame is copied)."""
    if len(rows):
        rows = rows[_cols.isin(events["name"].iloc[rows], (name,))]
    stream = events["stream"].iloc[rows].to_numpy(dtype=np.float64, na_value=np.nan)
    corr = events["correlation"].iloc[rows].to_numpy(dtype=np.float64, na_value=np.nan)
    ok = np.isfinite(stream) & np.isfinite(corr)
    rank = events["rank"].to_numpy(np.int64)[rows]
    return rank[ok], corr[ok].astype(np.int64), stream[ok].astype(np.int64)


def sync_edges(g: TaskGraph, cfg: SimConfig, stream_syncs: SyncEvents) -> Pairs:
    """GPU->CPU: a sync call's return waits for the last GPU task of each stream that ended
    before it returned. A Kineto "Stream Sync" event with the call's correlation id limits the
    wait to that stream. Returns the (GPU end, call end) pairs: `split_waits` cuts a call that
    waited to its own cost, and weighs each edge (waits.py)."""
    t = g.tasks
    rx = compile_user(cfg.sync_regex, "sync_regex")
    is_sync = (~t["gpu"].to_numpy()) & g.text("cat").where(lambda c: c in RUNTIME_CATS)
    is_sync &= g.text("name").where(rx.search)
    sidx = np.flatnonzero(is_sync)
    if not len(sidx):
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    corr = _corr(t)
    rank = t["rank"].to_numpy(np.int64)
    want = np.full(len(sidx), -1, np.int64)
    cs_rank, cs_corr, cs_stream = stream_syncs
    pos_s = cs_stream >= 0
    if pos_s.any():
        cs_stream = cs_stream[pos_s]
        fin = np.isfinite(corr[sidx])
        ck = _key(cs_rank[pos_s], cs_corr[pos_s])
        pos = _lookup(ck, _key(rank[sidx[fin]], corr[sidx[fin]]), last=True)  # the last event wins
        want[fin] = np.where(pos >= 0, cs_stream[np.maximum(pos, 0)], -1)
    return last_gpu_ends(g, sidx, want)


def host_wait_pairs(g: TaskGraph) -> Pairs:
    """GPU->CPU: host operators that enclose a device->host copy and its sync (`aten::item`,
    `aten::_local_scalar_dense`, waits.HOST_WAIT_RX) wait for each stream of their rank; where
    the trace records the runtime calls inside, those carry the wait and the operator's final
    segment holds no GPU end (split_waits then leaves it alone)."""
    calls = np.flatnonzero(~g.tasks["gpu"].to_numpy() & g.text("name").where(HOST_WAIT_RX.search))
    return last_gpu_ends(g, calls)


def event_wait_edges(g: TaskGraph, waits: SyncEvents) -> None:
    """GPU->GPU across streams: cudaEventRecord -> cudaStreamWaitEvent.

    A Kineto "Stream Wait Event" (rank, correlation, stream s) names its cudaStreamWaitEvent
    call W. The event waited for is the latest cudaEventRecord on W's thread at or before W
    (time R). Edge: the GPU task launched last before R on another stream of the rank (its end)
    -> the first task launched on s after W (its start); weight min(0, original gap), so the
    wait never delays more than the original ordering did.
    """
    c_rank, c_corr, c_stream = waits
    if not len(c_rank):
        return
    t = g.tasks
    names = g.text("name")
    rank = t["rank"].to_numpy(np.int64)
    corr = _corr(t)
    sp, ep = t["sp"].to_numpy(), t["ep"].to_numpy()
    lane = t["lane"].to_numpy()
    # the wait call of each event (first task with that rank and correlation)
    wcall = np.flatnonzero(names.where(lambda s: s == "cudaStreamWaitEvent") & np.isfinite(corr))
    pos = _lookup(_key(rank[wcall], corr[wcall]), _key(c_rank, c_corr))
    ok = pos >= 0
    wi, c_rank, c_stream = wcall[pos[ok]], c_rank[ok], c_stream[ok]
    wt = g.pt_time[sp[wi]]
    # the latest cudaEventRecord on the wait's lane starting at or before it
    rec = np.flatnonzero(names.where(lambda s: s == "cudaEventRecord"))
    rec_sp = np.sort(sp[rec])
    j = np.searchsorted(rec_sp, _lane_search(g, lane[wi], wt, "right"), side="left") - 1
    jc = np.maximum(j, 0)
    has = (j >= 0) & (len(rec_sp) > 0)
    if len(rec_sp):
        has &= rec_sp[jc] >= g.lane_ptr[lane[wi]]
    rt = np.where(has, g.pt_time[rec_sp[jc]] if len(rec_sp) else 0.0, np.nan)
    # GPU tasks with a launcher, grouped by (rank, stream), ordered by launch time then index
    gi = np.flatnonzero(t["gpu"].to_numpy() & (g.launcher >= 0))
    lt = g.pt_time[sp[g.launcher[gi]]]
    g_stream = lane_stream(g)[lane[gi]]
    src = np.full(len(wi), -1, np.int64)
    src_t = np.full(len(wi), -np.inf)
    dst = np.full(len(wi), -1, np.int64)
    for r, s in {(int(a), int(b)) for a, b in zip(rank[gi], g_stream)}:
        m = (rank[gi] == r) & (g_stream == s)
        o = np.lexsort((gi[m], lt[m]))
        gm, ltm = gi[m][o], lt[m][o]
        q = has & (c_rank == r)
        # after: on s, the first launched after the wait
        qa = q & (c_stream == s)
        p = np.searchsorted(ltm, wt[qa], side="right")
        okp = p < len(ltm)
        dst[np.flatnonzero(qa)[okp]] = gm[p[okp]]
        # before: on another stream, the last launched before the record (ties: lowest index)
        qb = q & (c_stream != s)
        p = np.searchsorted(ltm, rt[qb], side="left") - 1
        okp = p >= 0
        p0 = np.searchsorted(ltm, ltm[p[okp]], side="left")
        cand_t, cand = ltm[p0], gm[p0]
        at = np.flatnonzero(qb)[okp]
        better = (cand_t > src_t[at]) | ((cand_t == src_t[at]) & (cand < src[at]))
        src[at[better]] = cand[better]
        src_t[at[better]] = cand_t[better]
    keep = (src >= 0) & (dst >= 0)
    if keep.any():
        s_pt, d_pt = ep[src[keep]], sp[dst[keep]]
        g.add_edges(s_pt, d_pt, np.minimum(0.0, g.pt_time[d_pt] - g.pt_time[s_pt]), EdgeKind.EVENT_WAIT)


IMPLICIT_WAIT_US = 10.0  # a late GPU task starting this close to another stream's task end waited for it


def implicit_stream_waits(g: TaskGraph, cfg: SimConfig) -> None:
    """GPU->GPU across streams, where the trace records no wait: a GPU task that started long
    after both its launch (by over the rank's typical launch latency + IMPLICIT_WAIT_US) and its
    stream predecessor's end (by over IMPLICIT_WAIT_US), within IMPLICIT_WAIT_US before (or 1 µs
    of timestamp granularity after) the end of a task another stream of its rank was running,
    waited for that task: a cudaStreamWaitEvent the trace did not record, or that task holding
    the device. Edge: that end -> its start, with the original gap as weight; its launch edge
    keeps only the typical latency and its gap after its stream predecessor at most
    `stream_bound_gap_us` (that gap was the wait, not the stream's overhead). Why: kept as a launch latency of tens of ms (hta_trace_diff's
    fbgemm kernels on a side stream wait 40 ms for the main stream), the wait is fixed host time
    and a faster GPU cannot move it."""
    t = g.tasks
    # collective kernels too: with one rank loaded it is the ProcessGroup's wait on the compute
    # stream that shows (hta_trace_diff/test: the all-to-all starts 19 µs after the kernel that
    # produced its input, 45 ms after launch); with more, collectives.py forwards a member's
    # event waits to the member all others wait for
    gi = np.flatnonzero(t["gpu"].to_numpy() & (g.launcher >= 0))
    if not len(gi) or len(g.lanes) < 2:
        return
    sp = t["sp"].to_numpy()
    rank = t["rank"].to_numpy(np.int64)
    lane = t["lane"].to_numpy()
    s_t = g.pt_time[sp[gi]]
    l_t = g.pt_time[sp[g.launcher[gi]]]
    first = np.zeros(len(g.pt_d) + 1, bool)
    first[g.lane_ptr[:-1]] = True
    pred_t = np.where(first[sp[gi]], -np.inf, g.pt_time[np.maximum(sp[gi] - 1, 0)])
    typ = np.zeros(len(gi))
    for r in np.unique(rank[gi]):
        m = rank[gi] == r
        typ[m] = float(np.median(g.launch_w[gi[m]]))
    late = (s_t - l_t > typ + IMPLICIT_WAIT_US) & (s_t - pred_t > IMPLICIT_WAIT_US)
    if not late.any():
        return
    k, s_k = gi[late], s_t[late]
    src = np.full(len(k), -1, np.int64)
    src_t = np.full(len(k), -np.inf)
    for ln in np.flatnonzero(g.lanes["gpu"].to_numpy()):
        q = np.flatnonzero((rank[k] == int(g.lanes["rank"].iat[ln])) & (lane[k] != ln))
        a, b = g.lane_ptr[ln], g.lane_ptr[ln + 1]
        ends = np.flatnonzero(g.pt_end[a:b]) + a
        if not len(q) or not len(ends):
            continue
        j = np.searchsorted(g.pt_time[ends], s_k[q] + 1.0, side="right") - 1
        ok = j >= 0
        q, e = q[ok], ends[j[ok]]
        # the task ending there had started before (it was running or done), not a later one
        ok = (g.pt_time[e] >= s_k[q] - IMPLICIT_WAIT_US) & (g.pt_time[sp[g.pt_task[e]]] < s_k[q])
        better = ok & (g.pt_time[e] > src_t[q])
        src[q[better]], src_t[q[better]] = e[better], g.pt_time[e[better]]
    hit = src >= 0
    if not hit.any():
        return
    k, src, typ_k = k[hit], src[hit], typ[late][hit]
    g.add_edges(src, sp[k], g.pt_time[sp[k]] - g.pt_time[src], EdgeKind.EVENT_WAIT)
    launch = np.flatnonzero((g.e_kind == EDGE_KINDS.index(EdgeKind.LAUNCH)) & np.isin(g.e_dst, sp[k]))
    cap = np.zeros(len(g.pt_d))
    cap[sp[k]] = typ_k
    g.e_w[launch] = np.minimum(g.e_w[launch], cap[g.e_dst[launch]])
    g.launch_w[k] = np.minimum(g.launch_w[k], typ_k)
    gap = ~first[sp[k]]
    g.pt_d[sp[k][gap]] = np.minimum(g.pt_d[sp[k][gap]], cfg.stream_bound_gap_us)


def inter_thread_edges(g: TaskGraph, cfg: SimConfig) -> None:
    """Host thread -> host thread, by a gap heuristic (no trace records the hand-off itself).

    A point that ends a segment of at least `thread_block_us` is where a thread woke up (after
    idling or blocking). It depends on the latest point of another thread of the same rank
    strictly earlier and at most `thread_window_us` earlier (strictly, so edges never form a
    cycle), with the original gap as weight; equal times: the later lane in lane order. A gap
    that no recorded operator owns and that lasts at least `thread_idle_us` (a thread idle for a
    millisecond waited for another: a DataLoader queue, the autograd engine's hand-off) depends
    on the latest point of another thread inside the gap, however early; one that a pure label
    owns (a ProfilerStep or record_function span around the wait), on the latest point of
    another thread at most `thread_idle_us` earlier. The woken thread's gap itself, when no
    recorded operator owns it, shrinks to nothing: the thread waited, it did no
    work there.
    """
    lanes = g.lanes
    host = np.flatnonzero(~lanes["gpu"].to_numpy())
    if not len(host):
        return
    lane_rank = lanes["rank"].to_numpy()
    if np.unique(lane_rank[host], return_counts=True)[1].max() < 2:
        return
    npt = len(g.pt_d)
    lane_of_pt = np.repeat(np.arange(len(lanes)), np.diff(g.lane_ptr))
    first = np.zeros(npt, bool)
    first[g.lane_ptr[:-1][g.lane_ptr[:-1] < npt]] = True
    cand = np.flatnonzero((g.pt_d >= cfg.thread_block_us) & ~first & ~lanes["gpu"].to_numpy()[lane_of_pt])
    if not len(cand):
        return
    t_c = g.pt_time[cand]
    c_lane = lane_of_pt[cand]
    c_rank = lane_rank[c_lane]
    # how far back a wake-up may be linked: the window; the whole gap when it is a long idle one;
    # `thread_idle_us` when a pure label owns a long gap (the main thread's ProfilerStep while
    # the autograd thread runs the backward pass: it wakes ~0.1 ms after that thread's last
    # event). Not a Python frame's gap (the interpreter's own work), nor a label's woken long
    # after the other thread went quiet (unrecorded work inside a module's annotation)
    cat = g.text("cat")
    label = cat.where(lambda c: c in ANNOTATION_CATS) | step_mask(g.text("name"))
    pure = label & ~cat.where(lambda c: c == "python_function")
    reach = np.full(len(cand), float(cfg.thread_window_us))
    own_c = g.pt_owner[cand]
    long = g.pt_d[cand] >= cfg.thread_idle_us
    long_idle = long & (own_c < 0)
    reach[long_idle] = np.maximum(reach[long_idle], g.pt_d[cand][long_idle])
    long_label = long & (own_c >= 0) & pure[np.maximum(own_c, 0)]
    reach[long_label] = np.maximum(reach[long_label], cfg.thread_idle_us)
    best = np.full(len(cand), -1, np.int64)
    best_t = np.full(len(cand), -np.inf)
    for ln in host:
        q = np.flatnonzero((c_rank == lane_rank[ln]) & (c_lane != ln))
        if not len(q):
            continue
        a, b = g.lane_ptr[ln], g.lane_ptr[ln + 1]
        k = a + np.searchsorted(g.pt_time[a:b], t_c[q], side="left") - 1
        ok = k >= a
        q, k = q[ok], k[ok]
        tk = g.pt_time[k]
        better = (tk >= t_c[q] - reach[q]) & (tk >= best_t[q])
        best[q[better]] = k[better]
        best_t[q[better]] = tk[better]
    hit = best >= 0
    if hit.any():
        g.add_edges(best[hit], cand[hit], t_c[hit] - best_t[hit], EdgeKind.INTER_THREAD)
        # a woken thread's gap that no recorded operator owns (idle, or a label's own time: a
        # ProfilerStep, record_function or Python frame around the wait) was the wait itself:
        # it ends when the other thread gets there, not after a fixed time
        own = g.pt_owner[cand[hit]]
        waits = (own < 0) | label[np.maximum(own, 0)]
        g.pt_d[cand[hit][waits]] = 0.0
