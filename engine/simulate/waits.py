"""Host time that waits is not host work: a waiting host call becomes its own cost plus a wait edge.

A host call's recorded duration includes the time it spent blocked on the GPU (a synchronize
call, a blocking copy, `cudaFree`, `.item()`, a launch that found the launch queue full). Kept
as a fixed segment, that wait can never shrink: a faster GPU would change nothing and the
critical path would blame the host. Here each such call's *final segment* (the time after its
last child, which holds the wait) is cut to the call's own cost, and the GPU task end it waited
for gets an edge into the call's end whose weight is the original post-wait time (GPU end ->
call return). An unchanged trace reproduces itself: the edge lands exactly on the recorded
return, and the own cost never exceeds the recorded segment.

Own cost: the median final segment of the same call name on the same rank over its calls that
did not wait (no GPU end inside their final segment); without any, the median over the rank's
runtime calls that did not wait. Why per rank: a rank's graph is the same built alone (the fleet
simulator) or with the other ranks.

Launch back-pressure: a call that put work on the GPU and lasted over BACKPRESSURE_X times its
name's median waited for a free slot in the launch queue. The slot is freed by the GPU task
that ended last before the call returned (inside its final segment). The queue's depth Q is
the median, over those waits, of how many launches separate the waiting launch from the one
whose task freed its slot; every launch i then also waits for the end of launch i-Q's work
(weight: the typical post-wait time, at most its original gap), so a slower GPU or a faster
host fills the queue again.
"""

from __future__ import annotations

import re

import numpy as np

from engine.simulate.taskgraph import EdgeKind, TaskGraph
from engine.trace.vocab import RUNTIME_CATS

BACKPRESSURE_X = 10.0  # a launch lasting this many times its name's median waited for a slot
BACKPRESSURE_MIN_US = 20.0  # ... and at least this much longer than the median (timer noise)
# the queue's signature (_queue_waits): calls this much over their name's fastest cost (FASTEST_Q
# quantile of its durations) that returned just after a GPU completion leaving, most of the time,
# the same number of earlier launches outstanding; that number, the depth, is at least
# MIN_QUEUE_DEPTH (CUDA and HIP queue hundreds of launches: a smaller repeated count is a kernel
# that merely ended during the next launch), over at least MIN_QUEUE_WAITS calls
FASTEST_Q = 0.01
QUEUE_MARGIN_US = 2.0
MIN_QUEUE_DEPTH = 8
MIN_QUEUE_WAITS = 8
# kernel launch calls: asynchronous, they never wait for their own kernel (only for a queue slot)
LAUNCH_RX = re.compile(
    r"^(cuda|hip)(LaunchKernel(ExC)?|LaunchCooperativeKernel|ExtModuleLaunchKernel|ModuleLaunchKernel|GraphLaunch)$"
    r"|^cuLaunchKernel(Ex)?$"
)
# host operators that enclose a device->host copy and its synchronisation
HOST_WAIT_RX = re.compile(r"^aten::(item|_local_scalar_dense)$")
_TOL = 1e-6
# Host and GPU clocks disagree by tens of µs: a blocking copy's GPU task can end a little after
# the call that waited for it returned. A GPU task that started before a call returned and
# ended at most this long after is what the call waited for (see split_waits).
SKEW_US = 100.0
_NO_STREAM = -(1 << 62)  # stream code of a lane whose tid is not an integer (never matches)


def lane_stream(g: TaskGraph) -> np.ndarray:
    """Stream number of every lane (its tid as an integer), _NO_STREAM when it is not one."""
    out = np.full(len(g.lanes), _NO_STREAM, np.int64)
    for i, tid in enumerate(g.lanes["tid"]):
        try:
            out[i] = int(str(tid))
        except ValueError:
            pass
    return out


def last_gpu_ends(
    g: TaskGraph, calls: np.ndarray, want_stream: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Per call (task index) and per GPU lane of its rank (the one stream in `want_stream`, when
    >= 0): the last GPU task end at or before the call's return. Returns (src, dst) points."""
    t = g.tasks
    rank = t["rank"].to_numpy(np.int64)[calls]
    ep_c = t["ep"].to_numpy()[calls]
    ce = g.pt_time[ep_c]
    want = np.full(len(calls), -1, np.int64) if want_stream is None else want_stream
    lanes = g.lanes
    streams = lane_stream(g)
    src_l, dst_l = [], []
    for lane in np.flatnonzero(lanes["gpu"].to_numpy()):
        lr = int(lanes["rank"].iat[lane])
        a, b = g.lane_ptr[lane], g.lane_ptr[lane + 1]
        ends = np.flatnonzero(g.pt_end[a:b]) + a
        sel = (rank == lr) & ((want < 0) | (want == streams[lane]))
        if not len(ends) or not sel.any():
            continue
        k = np.searchsorted(g.pt_time[ends], ce[sel] + _TOL, side="right") - 1
        # clock skew: the next end, when it came just after the return of a task already running
        nxt = np.minimum(k + 1, len(ends) - 1)
        t_n = g.pt_time[ends[nxt]]
        k = np.where((nxt > k) & (t_n <= ce[sel] + SKEW_US) & _before(g, ends[nxt], ce[sel]), nxt, k)
        ok = k >= 0
        src_l.append(ends[k[ok]])
        dst_l.append(ep_c[sel][ok])
    if not src_l:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    return np.concatenate(src_l), np.concatenate(dst_l)


def _before(g: TaskGraph, src: np.ndarray, t: np.ndarray) -> np.ndarray:
    """A GPU end point that comes after time `t` (clock skew) may feed a host point at `t` only
    when every earlier point of its lane is at or before `t` (overlapping kernels, e.g. with
    programmatic dependent launch, would otherwise close a cycle through later launches)."""
    return g.pt_time[src - 1] <= t + _TOL


def waited(g: TaskGraph, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """Pairs whose GPU end lies inside the host call's final segment (the call waited for it)."""
    ts, td = g.pt_time[src], g.pt_time[dst]
    return (ts > g.pt_time[dst - 1] + _TOL) & (ts <= td + SKEW_US)


def split_waits(g: TaskGraph, src: np.ndarray, dst: np.ndarray) -> None:
    """Add the wait edges GPU end `src` -> host call end `dst` and cut each waiting call's final
    segment to its own cost (module docstring). Pairs the call did not wait for keep an edge of
    weight min(original gap, the call's final segment), as before: a slower GPU can delay it."""
    if not len(src):
        return
    td = g.pt_time[dst]
    keep = (g.pt_time[src] <= td) | ((g.pt_time[src] <= td + SKEW_US) & _before(g, src, td))
    src, dst = src[keep], dst[keep]
    w8 = waited(g, src, dst)
    wdst = np.unique(dst[w8])
    if len(wdst):
        own = own_cost(g, g.pt_task[wdst])
        g.pt_d[wdst] = np.minimum(g.pt_d[wdst], own)
    gap = g.pt_time[dst] - g.pt_time[src]
    w = np.where(w8, np.maximum(gap, 0.0), np.minimum(gap, g.pt_d[dst]))
    g.add_edges(src, dst, w, EdgeKind.SYNC)
    # clock skew: a call fed by a GPU end recorded after its return returns at that end (no edge
    # runs back in time, so the critical path's walks stay monotone); the host segment after it
    # gives the difference back, so the lane is on time again at its next point
    late = w8 & (gap < 0)
    if late.any():
        d = np.zeros(len(g.pt_d))
        np.maximum.at(d, dst[late], -gap[late])
        k = np.flatnonzero(d > 0)
        nxt = k + 1
        lane_end = g.lane_ptr[np.searchsorted(g.lane_ptr, k, side="right")]
        ok = nxt < lane_end
        g.pt_d[nxt[ok]] -= np.minimum(g.pt_d[nxt[ok]], d[k[ok]])


def own_cost(g: TaskGraph, tasks: np.ndarray) -> np.ndarray:
    """Own cost of each waiting host task (`tasks`, all the waiting ones): the median final
    segment of the other calls of its (rank, name), else the median of the rank's other runtime
    calls."""
    t = g.tasks
    names = g.text("name")
    code = names.codes
    rank = t["rank"].to_numpy(np.int64)
    ep = t["ep"].to_numpy()
    gpu = t["gpu"].to_numpy()
    blocked = np.zeros(len(t), bool)
    blocked[tasks] = True
    wanted = np.zeros(len(names.values) + 1, bool)
    wanted[code[tasks]] = True
    free_pop = np.flatnonzero(~gpu & wanted[code] & ~blocked)
    out = np.full(len(tasks), np.inf)
    key = rank * (len(names.values) + 2) + code
    if len(free_pop):
        k = key[free_pop]
        o = np.argsort(k, kind="stable")
        ks, ds = k[o], g.pt_d[ep[free_pop]][o]
        uk, starts = np.unique(ks, return_index=True)
        med = np.array([np.median(ds[a:b]) for a, b in zip(starts, [*starts[1:], len(ks)])])
        pos = np.minimum(np.searchsorted(uk, key[tasks]), len(uk) - 1)
        hit = uk[pos] == key[tasks]
        out[hit] = med[pos[hit]]
    if not np.isfinite(out).all():
        free = np.flatnonzero(~gpu & ~blocked & g.text("cat").where(lambda c: c in RUNTIME_CATS))
        for r in np.unique(rank[tasks[~np.isfinite(out)]]):
            fr = free[rank[free] == r]
            m = ~np.isfinite(out) & (rank[tasks] == r)
            out[m] = float(np.median(g.pt_d[ep[fr]])) if len(fr) else np.inf
    return out


def backpressure(g: TaskGraph, gidx: np.ndarray, lidx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Launch back-pressure (module docstring): adds the fixed-depth queue edges and returns the
    (GPU end, launch end) pairs of the launches that waited for a slot, for `split_waits`."""
    none = np.zeros(0, np.int64), np.zeros(0, np.int64)
    if not len(gidx):
        return none
    t = g.tasks
    sp, ep = t["sp"].to_numpy(), t["ep"].to_numpy()
    rank = t["rank"].to_numpy(np.int64)
    names = g.text("name")
    src_l, dst_l = [], []
    for r in np.unique(rank[lidx]):
        m = rank[lidx] == r
        gi, li = gidx[m], lidx[m]
        calls = np.unique(li)
        calls = calls[np.argsort(g.pt_time[sp[calls]], kind="stable")]  # launch order
        n = len(calls)
        pos = np.empty(len(t), np.int64)
        pos[calls] = np.arange(n)
        # end of each launch's work (its last GPU task)
        work_end = np.full(n, -1, np.int64)
        ge = ep[gi]
        o = np.argsort(g.pt_time[ge], kind="stable")
        work_end[pos[li[o]]] = ge[o]
        dur = g.pt_time[ep[calls]] - g.pt_time[sp[calls]]
        # the slot: a GPU work end of an earlier launch inside the call's final segment
        has = work_end >= 0
        order = np.flatnonzero(has)
        order = order[np.argsort(g.pt_time[work_end[order]], kind="stable")]
        e_t = g.pt_time[work_end[order]]
        lane = np.where(has, np.searchsorted(g.lane_ptr, np.maximum(work_end, 0), side="right") - 1, -1)
        seg0, ce = g.pt_time[ep[calls] - 1], g.pt_time[ep[calls]]
        found = _queue_waits(dur, names.codes[calls], order, e_t, seg0, ce, lane, g.pt_time[np.maximum(work_end, 0)])
        if found is None:
            continue
        slow, j, depth = found
        src_l.append(work_end[j])
        dst_l.append(ep[calls[slow]])
        post = float(np.median(g.pt_time[ep[calls[slow]]] - g.pt_time[work_end[j]]))
        i = np.arange(depth, n)
        i = i[has[i - depth]]
        q_src, q_dst = work_end[i - depth], ep[calls[i]]
        gap = g.pt_time[q_dst] - g.pt_time[q_src]
        ok = gap > _TOL  # only where the slot's work ended before the launch returned (no cycles)
        if ok.any():
            g.add_edges(q_src[ok], q_dst[ok], np.minimum(post, gap[ok]), EdgeKind.SYNC)
    if not src_l:
        return none
    return np.concatenate(src_l), np.concatenate(dst_l)


def _outstanding(at: np.ndarray, t: np.ndarray, lane: np.ndarray, end_t: np.ndarray) -> np.ndarray:
    """Per launch position `at`: how many earlier launches' work had not ended before time `t`.
    Per stream the work ends in launch order (FIFO), so the ended ones are a prefix of its
    launches: the count is its launches before `at` less its ends before `t`."""
    out = np.zeros(len(at), np.int64)
    for s in np.unique(lane[lane >= 0]):
        ps = np.flatnonzero(lane == s)
        before = np.searchsorted(ps, at)
        out += before - np.minimum(np.searchsorted(np.sort(end_t[ps]), t - _TOL), before)
    return out


def _queue_waits(
    dur: np.ndarray,
    code: np.ndarray,
    order: np.ndarray,
    e_t: np.ndarray,
    seg0: np.ndarray,
    ce: np.ndarray,
    lane: np.ndarray,
    end_t: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, int] | None:
    """The launches (positions in launch order) that waited for a queue slot, the launch whose
    work freed each slot, and the queue's depth; None when no launch waited.

    A full queue's signature: the call returns just after a GPU completion that left `depth` - 1
    earlier launches' work outstanding, every time (one stream: the work of the launch `depth`
    launches before it). Candidates are calls longer than their name's fastest cost by
    QUEUE_MARGIN_US with a GPU work end inside their final segment; the first such end (the queue
    frees on the first completion) names the freeing launch j, and the launches whose work had
    not ended before it are counted. When one count holds for most candidates (a depth of at
    least MIN_QUEUE_DEPTH), the candidates with that count waited, however short the wait: on a
    step barely GPU-bound every launch waits a few µs. Else only calls over BACKPRESSURE_X times
    their name's median waited (the last end inside names the slot, and the depth is the median
    distance)."""
    n = len(dur)
    fast = np.zeros(n)
    med = np.zeros(n)
    for c in np.unique(code):
        cm = code == c
        fast[cm] = np.quantile(dur[cm], FASTEST_Q)
        med[cm] = np.median(dur[cm])
    # first end after the final segment's start, and last end at the return
    kf = np.searchsorted(e_t, seg0 + _TOL, side="right")
    kl = np.searchsorted(e_t, ce + _TOL, side="right") - 1
    inside = (kf <= kl) & (kf < len(e_t))
    cand = np.flatnonzero(inside & (dur - fast > QUEUE_MARGIN_US))
    if len(cand):
        jf = order[np.minimum(kf[cand], len(order) - 1)]
        ok = jf < cand
        cand, jf = cand[ok], jf[ok]
        if len(cand) >= MIN_QUEUE_WAITS:
            d = _outstanding(cand, e_t[kf[cand]], lane, end_t)
            vals, counts = np.unique(d, return_counts=True)
            q = int(vals[np.argmax(counts)])
            near = np.abs(d - q) <= max(1, q // 16)
            if q >= MIN_QUEUE_DEPTH and near.sum() >= 0.5 * len(cand):
                return cand[near], jf[near], q
    slow = np.flatnonzero((dur > BACKPRESSURE_X * med) & (dur - med > BACKPRESSURE_MIN_US) & (kl >= 0))
    if not len(slow):
        return None
    j = order[kl[slow]]
    keep = (e_t[kl[slow]] > seg0[slow] + _TOL) & (j < slow)
    slow, j = slow[keep], j[keep]
    if not len(slow):
        return None
    return slow, j, int(np.median(slow - j))
