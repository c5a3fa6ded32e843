"""Selections -> closed Subgraphs (engine.graph.selection), checked by hand on hta_simple_add."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from engine.errors import TraceError
from engine.graph import Selection, replay_ops, select, selection_from_dict
from engine.graph.calltree import descendants
from engine.trace import load

ROOT = Path(__file__).resolve().parents[1]
MLP = ROOT / "sample_traces" / "mlp" / "mlp_et.json.gz"


@pytest.fixture(scope="module")
def simple_add(shared_traces):
    # hta_simple_add (schema 1.0.1, 38 nodes): two aten::rand inputs, a "clear cache" block, then
    # aten::add twice (warmup, measure). Node ids below were read from the file by hand.
    d = shared_traces / "hta_simple_add"
    return load(d / "benchmark_simple_add_et.json.gz", d / "benchmark_simple_add_trace.json.gz", use_cache=False)


def _pairs(df):
    return sorted(zip(df["tensor_id"].astype(int), df["storage_id"].astype(int)))


def test_select_by_name_pattern(simple_add):
    sub = select(simple_add, Selection(name_pattern=r"^aten::add$"))
    assert sub.op_ids == [36, 58]
    assert sub.replay_ids == [36, 58]
    # both adds read the two rand outputs, produced outside the selection: synthesize them once
    assert _pairs(sub.external_inputs) == [(6, 7), (11, 12)]
    assert sub.external_inputs["consumer"].tolist() == [36, 36]
    assert [tuple(s) for s in sub.external_inputs["shape"]] == [(256, 256), (256, 256)]
    assert sub.outputs.empty  # nothing after the adds reads their results
    assert sub.rank == 0


def test_select_by_module_closes_over_the_label(simple_add):
    sub = select(simple_add, Selection(module="[param|clear_cache]"))
    assert sub.op_ids == [16, 17, 18, 21, 22, 23, 26, 27, 28, 29, 32, 40, 41, 42, 44, 45, 46, 49, 50, 51, 52, 55]
    # aten::zeros, aten::to, aten::mul per block; zero_/fill_/_to_copy are their children
    assert sub.replay_ids == [17, 23, 26, 41, 46, 49]
    # the zeros buffers are produced inside; only the scalar operands of aten::mul come from outside
    assert _pairs(sub.external_inputs) == [(24, 25), (47, 48)]
    assert sub.external_inputs["consumer"].tolist() == [26, 49]


def test_select_outputs_are_consumed_outside(simple_add):
    sub = select(simple_add, Selection(ids=[4]))  # the first aten::rand and its children
    assert sub.op_ids == [4, 5, 8]
    assert sub.replay_ids == [4]
    assert sub.external_inputs.empty
    assert _pairs(sub.outputs) == [(6, 7)]  # read later by both adds
    assert sub.outputs["producer"].tolist() == [4]


def test_select_phase_and_descendant_flag(simple_add):
    # "other" holds only the profiler roots and the outer param labels; a phase filter keeps
    # each op's own phase, so their forward children are not dragged in
    sub = select(simple_add, Selection(phase="other"))
    assert sub.op_ids == [1, 2, 3, 14] and sub.replay_ids == []
    everything = select(simple_add, Selection(ids=[1]))
    assert len(everything.op_ids) == 38 and everything.replay_ids == replay_ops(simple_add)
    only = select(simple_add, Selection(ids=[14], include_descendants=False))
    assert only.op_ids == [14] and only.replay_ids == []
    child = select(simple_add, Selection(ids=[8]))  # aten::uniform_ alone, inside aten::rand
    assert child.replay_ids == [8]
    assert _pairs(child.external_inputs) == [(6, 7)]


def test_select_time_window(simple_add):
    ops = simple_add.ops.set_index("id")
    if not np.isfinite(ops["k_ts_us"]).any():
        pytest.fail("hta_simple_add ET should link to its Kineto trace")
    t0 = float(simple_add.events["ts_us"].min())
    start = float(ops.loc[58, "k_ts_us"]) - t0  # the measured aten::add
    sub = select(simple_add, Selection(time_window_us=(start, start + 0.5)))
    assert 58 in sub.replay_ids and 36 not in sub.op_ids
    with pytest.raises(TraceError, match="matched no operators"):
        select(simple_add, Selection(time_window_us=(1e12, 2e12)))


def test_select_errors(simple_add):
    with pytest.raises(TraceError, match="matched no operators"):
        select(simple_add, Selection(ids=[36], name_pattern="rand"))
    with pytest.raises(TraceError, match=r"unknown ET node ids on rank 0: 1000, 1001, 1002, 1003, 1004 \(and 2 more\)"):
        select(simple_add, Selection(ids=list(range(1000, 1007))))
    with pytest.raises(TraceError, match="rank 7 is not in the trace"):
        select(simple_add, Selection(name_pattern="add", rank=7))


@pytest.mark.parametrize(
    "kw, msg",
    [
        ({"name_pattern": "aten::(add"}, "bad regular expression"),
        ({"phase": "training"}, "unknown phase"),
        ({"time_window_us": (-1.0, 5.0)}, "non-negative"),
        ({"time_window_us": (5.0, 5.0)}, "end must be after start"),
        ({"ids": "12"}, "list of integers"),
        ({"ids": [1.5]}, "integers"),
        ({"rank": -1}, "rank must be >= 0"),
        ({"include_descendants": "yes"}, "true or false"),
    ],
)
def test_selection_validation(kw, msg):
    with pytest.raises(TraceError, match=msg):
        Selection(**kw)


def test_selection_json_round_trip():
    sel = Selection(
        name_pattern="aten::mm",
        module="nn.Module: body",
        phase="backward",
        time_window_us=(10, 250.5),
        rank=1,
        include_descendants=False,
    )
    d = json.loads(json.dumps(sel.to_dict()))
    assert d == {
        "name_pattern": "aten::mm",
        "module": "nn.Module: body",
        "phase": "backward",
        "time_window_us": [10.0, 250.5],
        "rank": 1,
        "include_descendants": False,
    }
    assert selection_from_dict(d) == sel
    assert Selection(ids=[3, 1]).to_dict() == {"ids": [3, 1]}
    with pytest.raises(TraceError, match="unknown selection field"):
        selection_from_dict({"names": "x"})
    with pytest.raises(TraceError, match=r"\[start, end\]"):
        selection_from_dict({"time_window_us": [1, 2, 3]})


@pytest.fixture(scope="module")
def mlp():
    if not MLP.exists():
        pytest.skip(f"{MLP} not captured yet (run `make samples`)")
    return load(MLP, use_cache=False)


def test_mlp_module_and_backward_selection(mlp):
    ops = mlp.ops.set_index("id")
    names = ops["name"].astype(str)
    body = int(names[names == "nn.Module: body"].index[0])
    sub = select(mlp, Selection(module="nn.Module: body"))
    assert sub.op_ids == descendants(mlp.ops, [body]).tolist()  # nested body.0 .. body.5 included
    assert set(names[sub.replay_ids]) <= {"aten::linear", "aten::relu"}
    rx = select(mlp, Selection(module=r"body\.[0-9]"))  # no label equals it: a regex
    # forward ops under body.0 .. body.5, plus the backward ops attributed to those modules
    extra = set(rx.op_ids) - set(sub.op_ids)
    assert extra and set(ops.loc[sorted(extra), "phase"].astype(str)) == {"backward"}
    fw = select(mlp, Selection(module=r"body\.[0-9]", phase="forward"))
    assert set(fw.op_ids) < set(sub.op_ids)

    bw = select(mlp, Selection(phase="backward"))
    assert set(ops.loc[bw.replay_ids, "phase"].astype(str)) == {"backward"}
    _check_external_inputs_brute_force(mlp, bw)


def _check_external_inputs_brute_force(trace, sub):
    t = trace.tensors[trace.tensors["op_id"].isin(sub.replay_ids)]
    t = t[t["storage_id"] > 0]  # undefined tensors (bias=None) are not memory to synthesize
    io = t["io"].astype(str)
    produced_at: dict[tuple[int, int], int] = {}
    for op, tid, sid in zip(t["op_id"][io == "out"], t["tensor_id"][io == "out"], t["storage_id"][io == "out"]):
        produced_at[(tid, sid)] = min(op, produced_at.get((tid, sid), op))
    want = set()
    for op, tid, sid in zip(t["op_id"][io == "in"], t["tensor_id"][io == "in"], t["storage_id"][io == "in"]):
        if not ((tid, sid) in produced_at and produced_at[(tid, sid)] < op):
            want.add((int(tid), int(sid)))
    assert set(_pairs(sub.external_inputs)) == want
    assert len(want) > 0


def test_resnet_selections_are_closed(shared_traces):
    tr = load(shared_traces / "param_resnet" / "resnet_et.json.gz", use_cache=False)
    for sel in (
        Selection(phase="optimizer"),
        Selection(name_pattern=r"^aten::conv2d$"),
        Selection(module="## backward ##"),
        Selection(ids=[6942]),
    ):
        sub = select(tr, sel)
        assert descendants(tr.ops, sub.op_ids).tolist() == sub.op_ids, sel
        top = set(replay_ops(tr))
        # the global replay ops inside a closed selection are exactly its replay set
        assert set(sub.replay_ids) == top & set(sub.op_ids), sel
    opt = select(tr, Selection(phase="optimizer"))
    names = tr.ops.set_index("id")["name"].astype(str)
    assert set(names[opt.replay_ids]) == {"aten::_foreach_mul_", "aten::_foreach_add_"}
    # the optimizer reads parameters, gradients and momentum buffers produced outside it
    assert len(opt.external_inputs) > 100


def test_two_rank_trace_selects_per_rank(simple_add):
    # the same ET as rank 0 and rank 1: ids collide across ranks, results must not mix
    import dataclasses

    import pandas as pd

    from engine.graph import call_tree, data_deps

    two = dataclasses.replace(
        simple_add,
        ops=pd.concat([simple_add.ops, simple_add.ops.assign(rank=np.int32(1))], ignore_index=True),
        tensors=pd.concat([simple_add.tensors, simple_add.tensors.assign(rank=np.int32(1))], ignore_index=True),
    )
    one = select(simple_add, Selection(name_pattern=r"^aten::add$"))
    r1 = select(two, Selection(name_pattern=r"^aten::add$", rank=1))
    assert r1.rank == 1 and r1.op_ids == one.op_ids and _pairs(r1.external_inputs) == _pairs(one.external_inputs)
    assert select(two, Selection(ids=[36])).rank == 0  # rank None: the lowest rank
    assert call_tree(two, rank=1).number_of_nodes() == 38
    g0, g1 = data_deps(simple_add), data_deps(two, rank=1)
    assert sorted(g0.edges) == sorted(g1.edges) and g1.graph["rank"] == 1


def test_phase_selection_keeps_only_that_phase():
    """A phase filter must not pull in other phases through a shared step/label root."""
    from engine.graph import Selection, select
    from engine.trace import load
    from tests.conftest import SAMPLES

    et = SAMPLES / "mlp" / "mlp_et.json.gz"
    if not et.exists():
        pytest.skip(f"sample trace {et} missing")
    trace = load(et)
    phase = trace.ops.set_index("id")["phase"].astype(object)
    seen = 0
    for ph in ("forward", "backward", "optimizer"):
        sub = select(trace, Selection(phase=ph))
        assert set(phase.loc[sub.op_ids]) == {ph}
        assert set(phase.loc[sub.replay_ids]) == {ph}
        seen += len(sub.replay_ids)
    assert seen == len(select(trace, Selection(name_pattern=".")).replay_ids) - int(
        (phase.loc[select(trace, Selection(name_pattern=".")).replay_ids] == "other").sum()
    )
