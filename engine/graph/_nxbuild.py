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


def _build(nodes, node_attrs, src, dst, edge_attrs, graph_attrs):
    import networkx as nx

    g = nx.DiGraph(**graph_attrs)
    nkeys = list(node_attrs)
    ekeys = list(edge_attrs)
    node_dicts = [dict(zip(nkeys, vals)) for vals in zip(*node_attrs.values())] if nkeys else [{} for _ in nodes]
    edge_dicts = [dict(zip(ekeys, vals)) for vals in zip(*edge_attrs.values())] if ekeys else [{} for _ in src]
    fast = all(hasattr(g, a) and isinstance(getattr(g, a), dict) and not getattr(g, a)
               for a in ("_node", "_succ", "_pred")) and g._succ is g._adj
    if not fast:  # unknown networkx layout: the public, slower path
        g.add_nodes_from(zip(nodes, node_dicts))
        g.add_edges_from((s, d, a) for s, d, a in zip(src, dst, edge_dicts))
        return g
    g._node.update(zip(nodes, node_dicts))
    succ = {n: {} for n in nodes}
    pred = {n: {} for n in nodes}
    for s, d, a in zip(src, dst, edge_dicts):
        if s not in succ:  # an edge to a node outside `nodes`: networkx adds it bare
            succ[s], pred[s] = {}, {}
            g._node[s] = {}
        if d not in succ:
            succ[d], pred[d] = {}, {}
            g._node[d] = {}
        succ[s][d] = a
        pred[d][s] = a
    g._succ.update(succ)
    g._pred.update(pred)
    return g
