"""The operator graph of a real model (issue 32 item 9): GPT-2's backward level opened as a single
column of groups all labelled "autograd::engine::evaluate_f" (the name cut at 28 characters).
Groups now carry the autograd function or module they stand for, and a tall layer wraps into a
grid. The bundled GPT-2 sample (HF GPT2LMHeadModel, 2 layers) is the trace."""

from __future__ import annotations

from pathlib import Path

import pytest

import engine.figures.hierarchy as hier
from engine.figures.hierarchy import Focus, build_hierarchy_model, hierarchy_figure

GRID_ROWS = getattr(hier, "GRID_ROWS", 16)

GPT2 = Path(__file__).resolve().parents[1] / "sample_traces" / "gpt2_hf"


@pytest.fixture(scope="module")
def gpt2():
    if not (GPT2 / "gpt2_hf_et.json.gz").exists():
        pytest.skip("bundled gpt2_hf sample missing (make samples)")
    from engine.graph import data_deps
    from engine.trace import load

    tr = load(GPT2 / "gpt2_hf_et.json.gz", GPT2 / "gpt2_hf_kineto.json.gz")
    return tr, data_deps(tr)


def test_backward_groups_are_named_and_laid_out_in_a_grid(gpt2):
    tr, dag = gpt2
    ops = tr.ops
    backward = int(ops.loc[ops["name"].astype(str).str.strip("# ") == "backward", "id"].iloc[0])
    model = build_hierarchy_model(ops, dag, Focus(parent=backward))
    nodes = model.nodes
    groups = nodes[nodes["kind"] == "tree"]
    assert len(groups) > 100
    # each group is named for the autograd function it evaluates (hand: the ET node's name tail)
    names = ops.drop_duplicates("id").set_index("id")["name"].astype(str)
    for key, label in zip(groups["key"], groups["label"]):
        fn = names.loc[int(key[5:])].removeprefix("autograd::engine::evaluate_function: ")
        assert label.startswith(fn.removeprefix("torch::autograd::")[:40]), (label, fn)
    assert groups["label"].str.contains("AddmmBackward0").any()
    # a layer taller than GRID_ROWS wraps into columns, each at most GRID_ROWS high
    per_col = nodes.groupby("x").size()
    assert len(per_col) > 1 and per_col.max() <= GRID_ROWS
    fig = hierarchy_figure(model)
    shown = [t for tr_ in fig.data if tr_.text is not None for t in tr_.text]
    assert len(shown) == len(nodes)  # every group has its name on the chart
    # reading order: down each column, then the next, in execution order
    g = groups.sort_values(["x", "y"], ascending=[True, False])
    first_ids = [min(model.groups[k]) for k in g["key"]]
    assert first_ids == sorted(first_ids)
