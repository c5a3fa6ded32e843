"""Vectorized call-tree primitives over the `ops` table (numpy only, no networkx).

Why: the loader annotates phases while loading, and selections close over descendants on every
UI click, so walking 14k-node trees in Python per node is too slow. Everything here works on
*positions* (0..n-1 rows of `ops`) and a `parent_pos` array, and answers "nearest marked
ancestor" / "any marked ancestor" questions with pointer doubling: O(n log depth).

Node ids are unique per rank only, so rows are keyed by (rank, id).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from engine.trace.columns import sorted_positions

_RANK_SHIFT = np.int64(1) << np.int64(40)
_MAX_DOUBLING = 64  # 2**64 levels: more than any tree; bounds the loop if parent links cycle


def row_keys(ops: pd.DataFrame, id_col: str = "id") -> np.ndarray:
    """One int64 key per row combining rank and node id (ids are unique per rank only)."""
    ids = ops[id_col].to_numpy(dtype=np.int64, na_value=-1)
    if "rank" in ops.columns:
        ranks = ops["rank"].to_numpy(dtype=np.int64, na_value=0)
        return ranks * _RANK_SHIFT + ids
    return ids


def parent_positions(ops: pd.DataFrame) -> np.ndarray:
    """Row position of each row's parent, -1 for roots, self-parents and dangling parents."""
    n = len(ops)
    if n == 0:
        return np.empty(0, dtype=np.int64)
    keys = row_keys(ops)
    par_ids = ops["parent"].to_numpy(dtype=np.int64, na_value=-1)
    if "rank" in ops.columns:
        par_keys = ops["rank"].to_numpy(dtype=np.int64, na_value=0) * _RANK_SHIFT + par_ids
    else:
        par_keys = par_ids
    if n > 1 and (keys[1:] > keys[:-1]).all():  # ids ascend in file order (the usual ET): no hash table
        parent = sorted_positions(keys, par_keys)
        parent[par_ids < 0] = -1
        parent[parent == np.arange(n)] = -1
        return parent
    index = pd.Index(keys)
    if not index.is_unique:  # duplicated ids: link to the first row carrying the id
        first = ~index.duplicated(keep="first")
        lookup = pd.Index(keys[first])
        pos = np.flatnonzero(first)
        found = lookup.get_indexer(par_keys)
        parent = np.where(found >= 0, pos[np.maximum(found, 0)], -1)
    else:
        parent = index.get_indexer(par_keys)
    parent = parent.astype(np.int64, copy=False)
    parent[par_ids < 0] = -1
    parent[parent == np.arange(n)] = -1  # Chakra roots name themselves as their parent
    return parent


def nearest_marked(parent: np.ndarray, marked: np.ndarray) -> np.ndarray:
    """Position of the nearest ancestor-or-self with `marked` True, or -1 when none."""
    n = len(parent)
    if n == 0:
        return np.empty(0, dtype=np.int64)
    # jump[i]: i itself if marked, else its parent; sentinel n is a fixed point meaning "none".
    jump = np.where(marked, np.arange(n), np.where(parent >= 0, parent, n)).astype(np.int64)
    jump = np.append(jump, n)
    for _ in range(_MAX_DOUBLING):
        nxt = jump[jump]
        if np.array_equal(nxt, jump):
            break
        jump = nxt
    out = jump[:n]
    # Anything not landing on a marked node (sentinel or a cycle) has no marked ancestor.
    ok = out < n
    ok[ok] = marked[out[ok]]
    return np.where(ok, out, -1)


def any_marked_ancestor(parent: np.ndarray, marked: np.ndarray, *, include_self: bool = True) -> np.ndarray:
    """True where some ancestor (or the node itself when `include_self`) is marked."""
    if include_self:
        return nearest_marked(parent, marked) >= 0
    n = len(parent)
    par_hit = nearest_marked(parent, marked)
    has_parent = parent >= 0
    out = np.zeros(n, dtype=bool)
    out[has_parent] = par_hit[parent[has_parent]] >= 0
    return out


def any_marked_descendant(parent: np.ndarray, marked: np.ndarray) -> np.ndarray:
    """True where some strict descendant is marked (bottom-up propagation by depth)."""
    n = len(parent)
    out = np.zeros(n, dtype=bool)
    if n == 0:
        return out
    depth = depths(parent)
    flag = marked.copy()
    # Process deepest level first: a node's flag reaches its parent before the parent is read.
    order = np.argsort(-depth, kind="stable")
    d_sorted = depth[order]
    bounds = np.flatnonzero(np.diff(d_sorted)) + 1
    for level in np.split(order, bounds):
        level = level[parent[level] >= 0]
        hit = level[flag[level]]
        out[parent[hit]] = True
        flag[parent[hit]] = True
    return out


def depths(parent: np.ndarray) -> np.ndarray:
    """Depth of every node (roots = 0) by pointer doubling on (ancestor, distance) pairs."""
    n = len(parent)
    if n == 0:
        return np.empty(0, dtype=np.int64)
    anc = np.where(parent >= 0, parent, n).astype(np.int64)
    anc = np.append(anc, n)
    dist = np.where(parent >= 0, 1, 0).astype(np.int64)
    dist = np.append(dist, 0)
    for _ in range(_MAX_DOUBLING):
        if np.all(anc == n):
            break
        dist = dist + dist[anc]
        anc = anc[anc]
    return dist[:n]
