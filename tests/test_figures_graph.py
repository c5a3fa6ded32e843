"""Operator graph figure on real ETs: layered layout, collapsing, customdata mapping."""

from __future__ import annotations

import networkx as nx
import numpy as np
import pytest

from engine.figures.graph import GraphView, build_graph_model, graph_figure, layered_layout


@pytest.fixture(scope="module")
def resnet(load_shared):
    from engine.graph import data_deps

    trace = load_shared("param_resnet/resnet_et.json.gz")
    return trace, data_deps(trace)


@pytest.fixture(scope="module")
def simple(simple_add):
    from engine.graph import data_deps

    return simple_add, data_deps(simple_add)


def test_layered_layout_x_is_topological_generation(resnet):
    _, dag = resnet
    pos = layered_layout(dag)
    for x, gen in enumerate(nx.topological_generations(dag)):
        assert {pos[n][0] for n in gen} == {float(x)}
        ys = sorted(pos[n][1] for n in gen)
        assert ys == [i - (len(gen) - 1) / 2 for i in range(len(gen))]  # centred, one slot each


def test_uncollapsed_model_keeps_every_op_and_edge(simple):
    trace, dag = simple
    model = build_graph_model(trace.ops, dag, GraphView(collapse="none"))
    assert model.collapse == "none"
    assert sorted(model.nodes["key"]) == sorted(dag.nodes)
    assert len(model.edges) == dag.number_of_edges()
    gens = {n: x for x, g in enumerate(nx.topological_generations(dag)) for n in g}
    assert all(model.nodes.set_index("key")["x"][k] == gens[k] for k in dag.nodes)
    hover = model.nodes.set_index("key")["hover"]
    schemas = trace.ops.set_index("id")["schema"].astype(str)
    some = next(iter(dag.nodes))
    assert schemas[some][:40] in hover[some]


def test_resnet_collapses_below_budget_and_covers_all_ops(resnet):
    trace, dag = resnet
    assert dag.number_of_nodes() > 1500  # the reason to collapse
    model = build_graph_model(trace.ops, dag, GraphView())
    # one module ("DistributedDataParallel.forward") holds the whole forward: auto falls back to
    # contiguous chunks, which keep the collapsed graph acyclic
    assert model.collapse == "chunk"
    assert len(model.nodes) <= 1500
    q = nx.DiGraph(model.edges)
    assert nx.is_directed_acyclic_graph(q)
    order = sorted(int(n) for n in dag.nodes)
    rank_of = {n: i for i, n in enumerate(order)}
    for members in model.groups.values():  # contiguous in execution order
        r = sorted(rank_of[m] for m in members)
        assert r == list(range(r[0], r[0] + len(r)))
    members = [i for m in model.groups.values() for i in m]
    assert sorted(members) == sorted(int(n) for n in dag.nodes)  # every op in exactly one group
    # an expanded group shows its members as single-op nodes
    key = max((k for k in model.groups if isinstance(k, str)), key=lambda k: len(model.groups[k]))
    expanded = build_graph_model(trace.ops, dag, GraphView(collapse=model.collapse, expand=(key,)))
    assert key not in expanded.groups
    assert set(model.groups[key]) <= set(expanded.nodes["key"])


def test_figure_traces_carry_keys_and_edges(resnet):
    trace, dag = resnet
    model = build_graph_model(trace.ops, dag, GraphView())
    fig = graph_figure(model, "category")
    edges = fig.data[0]
    assert edges.mode == "lines" and len(edges.x) == 3 * len(model.edges)
    keys = [k for tr in fig.data[1:] for k in tr.customdata]
    assert sorted(map(str, keys)) == sorted(map(str, model.nodes["key"]))
    assert all(tr.type == "scattergl" for tr in fig.data)
    fig_t = graph_figure(model, "time")
    assert fig_t.data[1].marker.colorscale is not None
    assert np.isclose(
        model.nodes["time_us"].sum(),
        trace.ops[trace.ops["id"].isin(list(dag.nodes))]["gpu_dur_us"].fillna(0).sum()
        if trace.ops["gpu_dur_us"].notna().any()
        else trace.ops[trace.ops["id"].isin(list(dag.nodes))]["k_dur_us"].fillna(0).sum(),
    )


def test_bad_view_is_rejected():
    with pytest.raises(ValueError):
        GraphView(collapse="spring")
    with pytest.raises(ValueError):
        GraphView(color_by="rainbow")


def test_module_collapse_on_bundled_mlp_sample(cache_dir):
    from pathlib import Path

    from engine.graph import data_deps
    from engine.trace import load

    root = Path(__file__).resolve().parents[1] / "sample_traces" / "mlp"
    if not (root / "mlp_et.json.gz").exists():
        pytest.skip("bundled mlp sample not captured yet (make samples)")
    trace = load(root / "mlp_et.json.gz", root / "mlp_kineto.json.gz")
    dag = data_deps(trace)
    model = build_graph_model(trace.ops, dag, GraphView(collapse="module"))
    labels = set(trace.ops[trace.ops["id"].isin(list(dag.nodes))]["module"].astype(str)) - {""}
    assert {k for k in model.groups if str(k).startswith("module:")} == {f"module:{m}" for m in labels}
    for k, members in model.groups.items():
        if str(k).startswith("module:"):
            mods = trace.ops.set_index("id").loc[members, "module"].astype(str)
            assert (mods == k.split(":", 1)[1]).all()
