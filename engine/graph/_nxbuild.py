"""Bulk construction of attributed networkx DiGraphs.

Why: `add_nodes_from`/`add_edges_from` re-check and merge every attribute dict, which is most of
the time of `call_tree` + `data_deps` on a 14k-node trace. For a *fresh* graph with unique node
keys and unique edges, filling networkx's adjacency dicts directly gives the identical graph
(`tests/test_graph_calltree.py` checks it against the public API) in about half the time.
networkx 3.x keeps a DiGraph in `_node`, `_succ` (== `_adj`) and `_pred`; if a future version
changes that layout the public API is used instead.
"""
from __future__ import annotations

import gc
from typing import Any, Sequence

import numpy as np


def build_digraph(nodes: Sequence[int], node_attrs: dict[str, Sequence[Any]], src: Sequence[int],
                  dst: Sequence[int], edge_attrs: dict[str, Sequence[Any]], **graph_attrs):
    """DiGraph with one node per `nodes` key and one edge per (src[i], dst[i]) (pairs unique).

    The cyclic garbage collector is paused while the ~50k small dicts are created: they hold
    no cycles, and generation-0 collections triggered by the allocations are most of the cost.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        return _build(nodes, node_attrs, src, dst, edge_attrs, graph_attrs)
    finally:
        if enabled:
            gc.enable()


def _dicts(attrs: dict[str, Sequence[Any]], n: int) -> list[dict]:
    """One attribute dict per row; dict displays for the usual 1-3 keys (twice dict(zip()))."""
    keys = list(attrs)
    cols = list(attrs.values())
    if not keys:
        return [{} for _ in range(n)]
    if len(keys) == 1:
        (k0,) = keys
        return [{k0: a} for a in cols[0]]
    if len(keys) == 2:
        k0, k1 = keys
        return [{k0: a, k1: b} for a, b in zip(*cols)]
    if len(keys) == 3:
        k0, k1, k2 = keys
        return [{k0: a, k1: b, k2: c} for a, b, c in zip(*cols)]
    return [dict(zip(keys, vals)) for vals in zip(*cols)]


def _fill(adj: dict, key: np.ndarray, other: np.ndarray, edge_dicts: list) -> None:
    """adj[key[i]][other[i]] = edge_dicts[i], one dict.update per distinct key instead of one
    Python step per edge; a stable sort keeps each node's neighbours in the given edge order."""
    order = np.argsort(key, kind="stable")
    k = key[order]
    cut = (np.flatnonzero(k[1:] != k[:-1]) + 1).tolist()
    if 2 * (len(cut) + 1) > len(k):  # mostly one edge per node (a tree's parents): plain loop
        for a, b, e in zip(key.tolist(), other.tolist(), edge_dicts):
            adj[a][b] = e
        return
    starts, ends = [0, *cut], [*cut, len(k)]
    ed = [edge_dicts[i] for i in order.tolist()]
    oth = other[order].tolist()
    for node, a, b in zip(k[starts].tolist(), starts, ends):
        adj[node].update(zip(oth[a:b], ed[a:b]))


def _build(nodes, node_attrs, src, dst, edge_attrs, graph_attrs):
    import networkx as nx

    g = nx.DiGraph(**graph_attrs)
    node_dicts = _dicts(node_attrs, len(nodes))
    edge_dicts = _dicts(edge_attrs, len(src))
    fast = all(hasattr(g, a) and isinstance(getattr(g, a), dict) and not getattr(g, a)
               for a in ("_node", "_succ", "_pred")) and g._succ is g._adj
    if not fast:  # unknown networkx layout: the public, slower path
        g.add_nodes_from(zip(nodes, node_dicts))
        g.add_edges_from((s, d, a) for s, d, a in zip(src, dst, edge_dicts))
        return g
    g._node.update(zip(nodes, node_dicts))
    succ = {n: {} for n in nodes}
    pred = {n: {} for n in nodes}
    if len(src):
        s_arr = np.asarray(src, dtype=np.int64)
        d_arr = np.asarray(dst, dtype=np.int64)
        for extra in set(np.unique(np.concatenate([s_arr, d_arr])).tolist()).difference(succ):
            succ[extra], pred[extra] = {}, {}  # an edge to a node outside `nodes`: added bare
            g._node[extra] = {}
        _fill(succ, s_arr, d_arr, edge_dicts)
        _fill(pred, d_arr, s_arr, edge_dicts)
    g._succ.update(succ)
    g._pred.update(pred)
    return g
