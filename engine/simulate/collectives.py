"""Cross-rank collectives: the members of one collective start when all have arrived, end together.

Matching: communication tasks (NCCL/RCCL kernels by name, host gloo:/nccl: backend ops) are matched across ranks
by (rank-independent name, occurrence index on the rank), the order in which every rank must
issue the same collectives. Each member's start gets edges from every other member's *arrival*
(its stream predecessor's end plus its gap, and its launch plus its launch latency), so it
starts at the latest arrival without extra points. Its modelled duration is the shortest
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


def collective_edges(g: TaskGraph) -> None:
    from engine.simulate.taskgraph import EdgeKind

    t = g.tasks
    if t.empty or t["rank"].nunique() < 2:
        return
    cm = comm_mask(g)
    if not cm.any():
        return
    idx = np.flatnonzero(cm)
    sub = t.iloc[idx][["rank", "name", "ts_us"]].copy()
    sub["i"] = idx
    sub = sub.sort_values(["rank", "ts_us"], kind="stable")
    sub["nth"] = sub.groupby(["rank", "name"], observed=True).cumcount()
    nranks = t["rank"].nunique()
    launcher = g.launcher
    sp = t["sp"].to_numpy()
    ep = t["ep"].to_numpy()
    lane_first = set(g.lane_ptr[:-1].tolist())
    launch_w = g.launch_w
    src_l, dst_l, w_l = [], [], []
    unmatched = 0
    ends = t["ts_us"].to_numpy(np.float64) + t["dur_us"].to_numpy(np.float64)
    durs = t["dur_us"].to_numpy(np.float64)
    for _, grp in sub.groupby(["name", "nth"], observed=True):
        members = grp["i"].to_numpy()
        if len(members) < nranks:
            unmatched += len(members)
            continue
        # the trace must show them finishing together (same clock across ranks); otherwise the
        # pairing is doubtful (e.g. backends that run one collective on several threads)
        spread = ends[members].max() - ends[members].min()
        if spread > max(0.02 * durs[members].max(), 200.0):
            unmatched += len(members)
            continue
        pure = g.pt_d[ep[members]].min()
        g.pt_d[ep[members]] = pure
        for m in members:
            for o in members:
                if o == m:
                    continue
                if sp[o] not in lane_first:
                    src_l.append(sp[o] - 1)
                    dst_l.append(sp[m])
                    w_l.append(g.pt_d[sp[o]])
                if launcher[o] >= 0:
                    src_l.append(sp[launcher[o]])
                    dst_l.append(sp[m])
                    w_l.append(float(launch_w[o]))
    if unmatched:
        g.warnings.append(
            f"{unmatched} collective task(s) had no counterpart on every rank that ended with them; "
            "they keep their own timing"
        )
    if src_l:
        g.add_edges(np.array(src_l), np.array(dst_l), np.array(w_l), EdgeKind.COLLECTIVE)
