"""Rank filtering, in one place: every table of a `Trace` (ops, events, tensors, flows) has a
`rank` column, and node ids are unique per rank only.

Why one home: the same filter was written at eight call sites with three different behaviours
for a missing rank (empty result, KeyError, the whole table). Here: `of_rank` filters any table
(a table without a rank column, or `rank=None`, is returned whole); `rank_ops` is the stricter
form for the ops table (None means the lowest rank; an absent rank is a TraceError naming the
ranks present); `ranks_of` lists the ranks a trace has.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from engine.errors import TraceError


def of_rank(table: pd.DataFrame, rank: int | None) -> pd.DataFrame:
    """The rows of `table` on `rank` (all rows when `rank` is None or there is no rank column)."""
    if rank is None or "rank" not in table.columns or len(table) == 0:
        return table
    return table[table["rank"].to_numpy() == rank]


def rank_ops(ops: pd.DataFrame, rank: int | None = None) -> pd.DataFrame:
    """The ops of one rank (lowest rank when `rank` is None), in file order; TraceError if absent."""
    if "rank" not in ops.columns or len(ops) == 0:
        return ops
    ranks = ops["rank"].to_numpy()
    if rank is None:
        rank = int(ranks.min())
        if (ranks == rank).all():
            return ops
    mask = ranks == rank
    if not mask.any():
        present = sorted(int(r) for r in np.unique(ranks))
        raise TraceError(f"rank {rank} is not in the trace (ranks present: {present})")
    return ops[mask]


def resolve_rank(ops: pd.DataFrame, rank: int | None) -> int:
    """The rank a rank=None request means: the lowest present (0 for an empty table)."""
    if rank is not None:
        rank_ops(ops, rank)  # validates
        return int(rank)
    if "rank" not in ops.columns or len(ops) == 0:
        return 0
    return int(ops["rank"].min())


def ranks_of(*tables: Any) -> list[int]:
    """Sorted ranks present in any of the tables (ops, events, ...); None entries are ignored."""
    out: set[int] = set()
    for t in tables:
        if t is not None and "rank" in t.columns and len(t):
            out.update(int(r) for r in pd.unique(t["rank"].to_numpy()))
    return sorted(out)


__all__ = ["of_rank", "rank_ops", "ranks_of", "resolve_rank"]
