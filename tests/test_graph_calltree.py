"""Call tree, vectorized tree queries and the replay operator rule (engine.graph.calltree/replayset)."""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

import networkx as nx
import numpy as np
import pandas as pd
import pytest
from rawjson import raw_doc

from engine.errors import TraceError
from engine.graph import call_tree, descendants, leaves, replay_ops, roots
from engine.trace import load


@pytest.fixture(scope="module")
def resnet(shared_traces):
    return load(shared_traces / "param_resnet" / "resnet_et.json.gz", use_cache=False)


def _raw_nodes(path: Path) -> list[dict]:
    """Read the ET file directly (independent of the loader) as {id, name, parent, schema, ...}."""
    nodes = raw_doc(path)["nodes"]
    out = []
    for n in nodes:
        if "attrs" in n:
            attrs = {a["name"]: a["value"] for a in n["attrs"]}
            parent = n.get("ctrl_deps", -1)
            values = n["inputs"]["values"]
        else:
            attrs, parent, values = n, n.get("parent", -1), n["inputs"]
        out.append(
            {
                "id": n["id"],
                "name": n["name"],
                "parent": -1 if parent == n["id"] else parent,
                "schema": attrs.get("op_schema", ""),
                "scope": attrs.get("scope", 0),
                "values": values,
            }
        )
    return out


def _reference_top_replay(nodes: list[dict]) -> set[int]:
    """The documented rule, written as a plain recursive walk over the raw file."""
    by_id = {n["id"]: n for n in nodes}
    kids = defaultdict(list)
    for n in nodes:
        kids[n["parent"]].append(n["id"])

    def wrapper(n):  # annotation / autograd categories, by name
        name = n["name"]
        return (
            name.startswith(("autograd::engine::evaluate_function:", "torch::autograd::"))
            or n["scope"] == 1
            or ":" not in name
        )

    def can_rebuild(n):
        return (
            re.fullmatch(r"[A-Za-z_]\w*::[A-Za-z_][\w.]*", n["name"]) is not None
            and not wrapper(n)
            and (bool(n["schema"]) or bool(n["values"]))
        )

    chosen: set[int] = set()
    stack = [i for i in by_id if by_id[i]["parent"] not in by_id]
    while stack:
        i = stack.pop()
        if can_rebuild(by_id[i]):
            chosen.add(i)
            continue  # nothing below a replayed op
        stack.extend(kids[i])
    return chosen


def test_replay_ops_match_reference_rule(shared_et):
    tr = load(shared_et, use_cache=False)
    assert set(replay_ops(tr)) == _reference_top_replay(_raw_nodes(shared_et))


def test_resnet_replay_counts(resnet):
    top = replay_ops(resnet)
    leaf = replay_ops(resnet, "leaf")
    assert len(top) == 3705
    names = resnet.ops.set_index("id")["name"].astype(str)
    top_names = set(names[top])
    # wrappers are looked through, never replayed
    assert not any(
        n.startswith(("autograd::", "torch::autograd::", "##", "[", "ProfilerStep", "nn.Module")) for n in top_names
    )
    assert "torch.distributed.ddp.reducer::copy_bucket_to_grad" not in top_names
    assert {"aten::conv2d", "aten::convolution_backward", "aten::_foreach_add_", "c10d::broadcast_"} <= top_names
    assert "aten::cudnn_convolution" not in top_names  # child of aten::conv2d
    assert "aten::cudnn_convolution" in set(names[leaf])
    assert len(leaf) > len(top)


def _ancestors_map(trace):
    parent = dict(zip(trace.ops["id"].tolist(), trace.ops["parent"].tolist()))

    def anc(i):
        out = []
        p = parent.get(i, -1)
        while p in parent and p not in out:
            out.append(p)
            p = parent[p]
        return out

    return anc


def _assert_never_op_and_ancestor(p: Path) -> None:
    tr = load(p, use_cache=False)
    anc = _ancestors_map(tr)
    for mode in ("top", "leaf"):
        chosen = set(replay_ops(tr, mode))
        assert chosen, p
        bad = [i for i in chosen if chosen.intersection(anc(i))]
        assert not bad, (p.name, mode, bad[:5])


def test_replay_never_includes_op_and_ancestor(sample_et):
    _assert_never_op_and_ancestor(sample_et)


def test_replay_never_includes_op_and_ancestor_shared(shared_et):
    _assert_never_op_and_ancestor(shared_et)


def test_call_tree_shape_and_attrs(resnet):
    g = call_tree(resnet)
    assert g.number_of_nodes() == 14392
    assert g.number_of_edges() == 14391  # one root: the profiler's process node
    assert nx.is_tree(g)
    assert g.graph["rank"] == 0
    root = [n for n, d in g.in_degree() if d == 0]
    assert len(root) == 1 and g.nodes[root[0]]["name"] == "[pytorch|profiler|execution_trace|process]"
    assert list(roots(resnet.ops)) == root
    assert g.nodes[6]["name"] == "## forward ##" and g.nodes[6]["phase"] == "forward"
    assert g.nodes[6]["category"] == "annotation"
    assert set(g.successors(4)) == {5, 6, 3148, 6132}  # ProfilerStep#6's children


def test_descendants_and_leaves_match_networkx(resnet):
    g = call_tree(resnet)
    for i in (6, 3148, 6132, 3204):
        want = sorted(nx.descendants(g, i) | {i})
        assert descendants(resnet.ops, [i]).tolist() == want
        assert descendants(resnet.ops, [i], include_self=False).tolist() == [j for j in want if j != i]
    both = descendants(resnet.ops, [6, 3148])
    assert len(both) == len(descendants(resnet.ops, [6])) + len(descendants(resnet.ops, [3148]))
    assert set(leaves(resnet.ops).tolist()) == {n for n, d in g.out_degree() if d == 0}


def test_multi_rank_requires_known_rank(resnet):
    with pytest.raises(TraceError, match="rank 3 is not in the trace"):
        call_tree(resnet, rank=3)
    two_ranks = pd.concat([resnet.ops, resnet.ops.assign(rank=np.int32(1))])
    with pytest.raises(TraceError, match="one rank"):
        descendants(two_ranks, [6])


def test_bulk_graph_build_equals_public_networkx_api(resnet):
    from engine.graph import data_deps

    for g in (call_tree(resnet), data_deps(resnet)):
        ref = nx.DiGraph(**g.graph)
        ref.add_nodes_from(g.nodes(data=True))
        ref.add_edges_from(g.edges(data=True))
        assert nx.utils.graphs_equal(g, ref)
        assert {n: dict(p) for n, p in g.pred.items()} == {n: dict(p) for n, p in ref.pred.items()}
        # the graph stays a normal, mutable networkx graph
        h = g.copy()
        h.add_edge(-1, -2, kind="raw")
        assert h.has_edge(-1, -2) and not g.has_node(-1)
        assert list(g.predecessors(next(iter(g.nodes)))) == list(ref.predecessors(next(iter(g.nodes))))


def test_bulk_build_with_edges_outside_the_node_list():
    """An edge endpoint not among `nodes` is added bare, exactly as networkx's public API does."""
    from engine.graph._nxbuild import build_digraph

    g = build_digraph(
        [1, 2, 3], {"name": ["a", "b", "c"]}, [1, 3, 1, 9], [2, 2, 7, 1], {"kind": ["raw", "war", "raw", "waw"]}, rank=0
    )
    ref = nx.DiGraph(rank=0)
    ref.add_nodes_from([(1, {"name": "a"}), (2, {"name": "b"}), (3, {"name": "c"})])
    ref.add_edges_from(
        [(1, 2, {"kind": "raw"}), (3, 2, {"kind": "war"}), (1, 7, {"kind": "raw"}), (9, 1, {"kind": "waw"})]
    )
    assert nx.utils.graphs_equal(g, ref)
    assert list(g.successors(1)) == list(ref.successors(1)) == [2, 7]
    assert list(g.predecessors(2)) == [1, 3] and g.nodes[9] == {}
    assert g[1][2] is g.pred[2][1]  # one attribute dict per edge, shared by both directions
