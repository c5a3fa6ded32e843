"""Replay-set adjustments for communication: top-level comms records and the replay mode.

Why: `engine.graph.replay_ops` picks registered operators (`c10d::allreduce_`), but NCCL-era
traces also record collectives and their waits only as `record_param_comms` nodes (no `::`);
a distributed replay must run those where no selected op covers them. The replay mode then keeps
everything (full), only compute, or only communication.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from engine.replay.collectives import ReplayMode, is_collective


def with_comm_records(ops: pd.DataFrame, ids: list[int]) -> list[int]:
    """`ids` plus every `record_param_comms` node with no selected ancestor."""
    if len(ops) == 0:
        return list(ids)
    names = ops["name"].astype(str).to_numpy()
    cand = np.flatnonzero(names == "record_param_comms")
    if len(cand) == 0:
        return list(ids)
    chosen = {int(i) for i in ids}
    parent = dict(zip(ops["id"].astype(int), ops["parent"].astype(int)))
    op_ids = ops["id"].astype(int).to_numpy()
    extra = []
    for pos in cand:
        i = int(op_ids[pos])
        p, covered, hops = parent.get(i, -1), False, 0
        while p in parent and hops < 10_000:
            if p in chosen:
                covered = True
                break
            if parent[p] == p:
                break
            p, hops = parent[p], hops + 1
        if not covered:
            extra.append(i)
    return sorted(chosen | set(extra))


def by_replay_mode(ops: pd.DataFrame, ids: list[int], mode: ReplayMode | str) -> list[int]:
    """Keep all ids (full), the non-collective ones (compute-only) or the collectives (comm-only)."""
    mode = ReplayMode(str(mode))
    if mode is ReplayMode.FULL:
        return list(ids)
    name_of = dict(zip(ops["id"].astype(int), ops["name"].astype(str)))
    want_comm = mode is ReplayMode.COMM_ONLY
    return [i for i in ids if is_collective(name_of.get(int(i), "")) == want_comm]
