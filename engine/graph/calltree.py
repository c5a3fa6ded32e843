"""The ET call tree (who called whom) as a networkx graph, plus vectorized tree queries.

Why both: networkx is what the UI and analyses want to walk, but selections and the replay
operator rule need "descendants of these ids" on every request, which `_tree`'s pointer
doubling answers over the whole table at numpy speed without building a graph at all.

All functions work on one rank at a time: ET node ids are unique per rank only.
`rank=None` means the lowest rank present (the only one for single-rank traces).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from engine.errors import TraceError
from engine.trace.columns import as_str
from engine.trace.ranks import rank_ops, resolve_rank
from engine.trace.tree import any_marked_ancestor, parent_positions

if TYPE_CHECKING:
    import networkx as nx

    from engine.trace.model import Trace


def descendants(ops: pd.DataFrame, ids: Iterable[int], *, include_self: bool = True) -> np.ndarray:
    """Sorted ids of all call-tree descendants of `ids` (one rank's ops; self included by default).

    Vectorized: marks `ids` and asks, for every row at once, whether an ancestor is marked.
    """
    if len(ops) == 0:
        return np.empty(0, dtype=np.int64)
    if "rank" in ops.columns and ops["rank"].nunique() > 1:
        raise TraceError("descendants() needs the ops of one rank; filter with rank_ops() first")
    node_ids = ops["id"].to_numpy(dtype=np.int64)
    marked = np.isin(node_ids, np.fromiter(ids, dtype=np.int64))
    hit = any_marked_ancestor(parent_positions(ops), marked, include_self=True)
    if not include_self:
        hit &= ~marked
    return np.unique(node_ids[hit])


def roots(ops: pd.DataFrame) -> np.ndarray:
    """Ids of nodes without a parent in the table (the profiler's process node, orphans)."""
    if len(ops) == 0:
        return np.empty(0, dtype=np.int64)
    return ops["id"].to_numpy(dtype=np.int64)[parent_positions(ops) < 0]


def leaves(ops: pd.DataFrame) -> np.ndarray:
    """Ids of nodes without children in the table."""
    if len(ops) == 0:
        return np.empty(0, dtype=np.int64)
    parent = parent_positions(ops)
    has_child = np.zeros(len(ops), dtype=bool)
    has_child[parent[parent >= 0]] = True
    return ops["id"].to_numpy(dtype=np.int64)[~has_child]


def call_tree(trace: Trace, rank: int | None = None) -> nx.DiGraph:
    """parent -> child DiGraph of one rank's ET nodes.

    Node key: ET node id. Node attributes: name, category, phase (strings; "" when the trace
    lacks the column). Graph attribute `rank` records which rank it is.
    """
    from engine.graph._nxbuild import build_digraph

    ops = rank_ops(trace.ops, rank)
    r = resolve_rank(trace.ops, rank)
    ids = ops["id"].to_numpy(dtype=np.int64)
    attrs = {col: str_list(ops, col) for col in ("name", "category", "phase")}
    parent = parent_positions(ops)
    child = np.flatnonzero(parent >= 0)
    return build_digraph(ids.tolist(), attrs, ids[parent[child]].tolist(), ids[child].tolist(), {}, rank=r)


def str_list(ops: pd.DataFrame, col: str, rows: np.ndarray | None = None) -> list[str]:
    """Column as a list of str ("" for missing), of the rows where the mask `rows` is True (all
    rows by default); distinct values convert once (engine.trace.columns)."""
    if col not in ops.columns:
        return [""] * (len(ops) if rows is None else int(rows.sum()))
    text = as_str(ops[col])
    return (text if rows is None else text[rows]).tolist()


__all__ = ["call_tree", "descendants", "leaves", "roots"]
