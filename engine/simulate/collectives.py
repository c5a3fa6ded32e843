"""Cross-rank collectives: the members of one collective start when all have arrived, end together.

Matching: communication tasks (NCCL/RCCL kernels by name, host gloo:/nccl: backend ops) are matched across ranks
by (rank-independent name, occurrence index on the rank), the order in which every rank must
issue the same collectives. Each member starts at the latest member's *arrival* (its stream
predecessor's end plus its gap, and its launch plus its launch latency), without extra points:
the arrivals meet at one member (O(members) edges, see collective_edges). Its modelled duration is the shortest
member duration: the last member to arrive waited least, so its kernel time is the transfer.
A matched group is used only if the trace shows its members ending together (within 2 % of the
longest or 200 us): otherwise the pairing is doubtful and the tasks keep their own timing.

With one rank loaded nothing changes here; the data-parallel what-if (whatif/dp.py) instead
rescales collective durations with a ring model and relies on symmetry (identical ranks arrive
together), so 1,024 ranks never need 1,024 copies.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from engine.trace.vocab import is_backend_comm, is_comm

if TYPE_CHECKING:
    from engine.simulate.taskgraph import TaskGraph


def comm_mask(g: TaskGraph) -> np.ndarray:
    """Tasks that are the transfer of a collective / p2p op: communication GPU tasks
    (engine.trace.vocab.is_comm), and on ranks without GPU work the backend's host op."""
    gpu = g.tasks["gpu"].to_numpy()
    rank = g.tasks["rank"].to_numpy()
    # host backend ops are the transfer only on ranks without GPU work (gloo on CPU); with a GPU
    # the host "nccl:*" op is just the enqueue and the kernel is the collective
    cpu_ranks = ~np.isin(rank, np.unique(rank[gpu]))
    names = g.text("name")
    return (gpu & names.where(is_comm)) | (~gpu & cpu_ranks & names.where(is_backend_comm))


def collective_ids(tasks, idx: np.ndarray) -> dict:
    """pg / seq / comms arrays of tasks `idx` for match_groups, from the events' collective
    metadata columns (engine/trace/kineto.py) where the table has them."""
    out: dict = {}
    if "pg_name" in tasks.columns:
        raw = tasks["pg_name"].astype(object).to_numpy()[idx]
        out["pg"] = np.array(["" if v is None or v != v else str(v) for v in raw], dtype=object)  # None/NaN: none
    for col, key in (("coll_seq", "seq"), ("comms_id", "comms")):
        if col in tasks.columns:
            out[key] = tasks[col].to_numpy(dtype=np.float64, na_value=-1.0)[idx].astype(np.int64)
    return out


def collective_edges(g: TaskGraph) -> None:
    """COLLECTIVE edges of a multi-rank graph: O(members) per matched collective, vectorised.

    Every member must start no earlier than every member's arrival. Instead of an edge from each
    member's arrival to each other member's start (members^2), the arrivals all feed one member,
    the *hub*, and the hub's start feeds the others (weight 0). The hub is a member whose start
    has no incoming edge but its own launch (and which is not first on its lane): its simulated
    start is then exactly the latest arrival, so every schedule equals the all-pairs one. A group
    without such a member (rare: e.g. a stream wait into a collective kernel) keeps all pairs.
    """
    from engine.simulate.taskgraph import EdgeKind

    t = g.tasks
    if t.empty or t["rank"].nunique() < 2:
        return
    cm = comm_mask(g)
    if not cm.any():
        return
    idx = np.flatnonzero(cm)
    names = g.text("name")
    pos, gstart = match_groups(
        t["rank"].to_numpy(np.int64)[idx],
        np.asarray(names.values, dtype=object)[names.codes[idx]],
        t["ts_us"].to_numpy(np.float64)[idx],
        int(t["rank"].nunique()),
        **collective_ids(t, idx),
    )
    members = idx[pos]
    sp = t["sp"].to_numpy()
    ep = t["ep"].to_numpy()
    ends = t["ts_us"].to_numpy(np.float64) + t["dur_us"].to_numpy(np.float64)
    durs = t["dur_us"].to_numpy(np.float64)
    n_cm = int(cm.sum())
    # the trace must show them finishing together (same clock across ranks); otherwise the
    # pairing is doubtful (e.g. backends that run one collective on several threads)
    if len(members):
        spread = np.maximum.reduceat(ends[members], gstart) - np.minimum.reduceat(ends[members], gstart)
        ok = spread <= np.maximum(0.02 * np.maximum.reduceat(durs[members], gstart), 200.0)
        sizes = np.diff(np.append(gstart, len(members)))
        keep = np.repeat(ok, sizes)
        members = members[keep]
        gstart = np.concatenate([[0], np.cumsum(sizes[ok])])[:-1]
    unmatched = n_cm - len(members)
    if unmatched:
        g.warnings.append(
            f"{unmatched} collective task(s) had no counterpart on every rank that ended with them; "
            "they keep their own timing"
        )
    if not len(members):
        return
    sizes = np.diff(np.append(gstart, len(members)))
    gid = np.repeat(np.arange(len(gstart)), sizes)
    pure = np.minimum.reduceat(g.pt_d[ep[members]], gstart)
    g.pt_d[ep[members]] = pure[gid]
    src, dst, w = _arrivals(g, members, gid, sp, ep)
    g.add_edges(src, dst, w, EdgeKind.COLLECTIVE)


def match_groups(
    rank: np.ndarray,
    name: np.ndarray,
    ts: np.ndarray,
    nranks: int,
    pg: np.ndarray | None = None,
    seq: np.ndarray | None = None,
    comms: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """(members, group starts) of collective tasks given per task (rank, name text, start time,
    and where the trace records them: process group text, sequence number and comms id, -1 when
    absent): members of a group are consecutive positions into these arrays, in rank order.

    Key, best first: `comms_id` (one id on every member); (process group, `seq`); (process
    group, name, occurrence index): the task's position among its rank's tasks of that group and
    name in time order, the order in which every rank must issue the same collectives. A group
    is used when it has a member on each rank of its process group (the ranks that show that
    group at all; every rank when none is recorded) and at least two."""
    n = len(rank)
    if not n:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    neg = np.full(n, -1, np.int64)
    seq = neg if seq is None else np.asarray(seq, np.int64)
    comms = neg if comms is None else np.asarray(comms, np.int64)
    pg_t = np.full(n, "", dtype=object) if pg is None else np.asarray(pg, dtype=object)
    has_c = comms >= 0
    has_s = (seq >= 0) & ~has_c
    label = np.where(has_c, "\x01c", np.where(has_s, pg_t + "\x01s", pg_t + "\x00" + np.asarray(name, dtype=object)))
    _, key = np.unique(label.astype(str), return_inverse=True)
    # occurrence index per (rank, key) in time order, for tasks with neither id
    o = np.lexsort((ts, key, rank))
    r, k = rank[o], key[o]
    new = np.ones(n, bool)
    new[1:] = (r[1:] != r[:-1]) | (k[1:] != k[:-1])
    run0 = np.flatnonzero(new)
    nth = np.empty(n, np.int64)
    nth[o] = np.arange(n) - np.repeat(run0, np.diff(np.append(run0, n)))
    occ = np.where(has_c, comms, np.where(has_s, seq, nth))
    # members a group needs: the ranks that show its process group (every rank without one)
    pgs, pg_code = np.unique(pg_t.astype(str), return_inverse=True)
    pairs = np.unique(pg_code * (int(rank.max()) + 1) + rank)
    per_pg = np.bincount(pairs // (int(rank.max()) + 1), minlength=len(pgs))
    need = np.where(pgs[pg_code] == "", nranks, per_pg[pg_code])
    o2 = np.lexsort((rank, occ, key))  # by key, occurrence, rank
    m, kk, oc = o2, key[o2], occ[o2]
    new = np.ones(n, bool)
    new[1:] = (kk[1:] != kk[:-1]) | (oc[1:] != oc[:-1])
    starts = np.flatnonzero(new)
    sizes = np.diff(np.append(starts, n))
    full = (sizes == need[m[starts]]) & (sizes >= 2)
    keep = np.repeat(full, sizes)
    return m[keep], np.concatenate([[0], np.cumsum(sizes[full])])[:-1].astype(np.int64)


def _arrivals(g: TaskGraph, members: np.ndarray, gid: np.ndarray, sp: np.ndarray, ep: np.ndarray):
    """Edges (src, dst, w) making every member wait for every member's arrival (its stream or
    thread predecessor's end plus its gap, and its launch plus the launch latency): through a hub
    member per group where one qualifies (see collective_edges), else all pairs."""
    npts = len(g.pt_d)
    lane_first = np.zeros(npts, bool)
    lane_first[g.lane_ptr[:-1][g.lane_ptr[:-1] < npts]] = True
    s = sp[members]
    lau = g.launcher[members]
    has_pred = ~lane_first[s]
    has_lau = lau >= 0
    lau_sp = np.where(has_lau, sp[np.maximum(lau, 0)], -1)
    lau_w = g.launch_w[members]
    # hub candidates: not first on the lane; in-edges of its start = exactly its launch edge,
    # besides event waits (edges.implicit_stream_waits: the other members' are forwarded to it)
    from engine.simulate.taskgraph import EDGE_KINDS, EdgeKind

    ev = g.e_kind == EDGE_KINDS.index(EdgeKind.EVENT_WAIT)
    ne = np.flatnonzero(~ev)
    indeg = np.bincount(g.e_dst[ne], minlength=npts) if len(ne) else np.zeros(npts, np.int64)
    last = np.full(npts, -1, np.int64)
    last[g.e_dst[ne]] = ne
    e = last[s]
    only_launch = (
        has_lau
        & (indeg[s] == 1)
        & (e >= 0)
        & (g.e_src[np.maximum(e, 0)] == lau_sp)
        & (g.e_w[np.maximum(e, 0)] == lau_w)
    )
    qual = has_pred & (only_launch | (~has_lau & (indeg[s] == 0)))
    ng = int(gid[-1]) + 1
    pos = np.arange(len(members))
    hub_pos = np.full(ng, len(members), np.int64)
    np.minimum.at(hub_pos, gid[qual], pos[qual])
    has_hub = hub_pos < len(members)
    hub_of = np.where(has_hub[gid], hub_pos[np.minimum(gid, ng - 1)], -1)
    src_l, dst_l, w_l = [], [], []
    # hub groups: arrival of every other member -> hub start; hub start -> every other start
    via = has_hub[gid] & (pos != hub_of)
    hub_sp = s[np.maximum(hub_of, 0)]
    a = via & has_pred
    src_l += [s[a] - 1]
    dst_l += [hub_sp[a]]
    w_l += [g.pt_d[s[a]]]
    b = via & has_lau
    src_l += [lau_sp[b]]
    dst_l += [hub_sp[b]]
    w_l += [lau_w[b]]
    src_l += [hub_sp[via]]
    dst_l += [s[via]]
    w_l += [np.zeros(int(via.sum()))]
    if ev.any():  # the other members' event waits are arrivals too
        hub_at = np.full(npts, -1, np.int64)
        hub_at[s[via]] = hub_sp[via]
        f = np.flatnonzero(ev & (hub_at[g.e_dst] >= 0))
        src_l += [g.e_src[f]]
        dst_l += [hub_at[g.e_dst[f]]]
        w_l += [g.e_w[f]]
    # groups without a hub: all pairs
    for k in np.flatnonzero(~has_hub):
        mk = np.flatnonzero(gid == k)
        for m in mk:
            for o in mk:
                if o == m:
                    continue
                if has_pred[o]:
                    src_l.append(np.array([s[o] - 1]))
                    dst_l.append(np.array([s[m]]))
                    w_l.append(np.array([g.pt_d[s[o]]]))
                if has_lau[o]:
                    src_l.append(np.array([lau_sp[o]]))
                    dst_l.append(np.array([s[m]]))
                    w_l.append(np.array([lau_w[o]]))
    return np.concatenate(src_l), np.concatenate(dst_l), np.concatenate(w_l)
