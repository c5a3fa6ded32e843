"""View sizes, streams and opaque arguments a pre-2.1 Kineto trace did not record
(engine/compose/synth_views.py, synth.py's _fill_unknown; issue 35).

The document is written the way the 2022 profiler writes (hta_trace_diff): no "Concrete
Inputs", no strides, an `int[]` argument an empty dims list with type "". Golden values, worked
by hand from the events below:
* the bias gradient of an addmm backward: view([1, 8]) then AccumulateGrad reads a [8] tensor
  (the pattern of hta_trace_diff/control.json.gz's External id 2167 -> 2170): size [8];
* permute([2, 3, 4]) read next as [4, 2, 3] by clone: dims [2, 0, 1];
* two as_strided calls on one [100] buffer (DDP's bucket views), then relu on that [100]
  buffer: no consumer says more than the input's own geometry, so size [100], stride [1],
  listed as guessed;
* record_stream's Stream: the replay's own stream (engine/replay/accel.py), guessed;
* an aten::empty with no parent result stays skipped (a guessed allocation changes the cost)."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")


def _ev(name, ts, dur, dims=None, types=None, cat="cpu_op"):
    args = {"External id": ts}
    if dims is not None:
        args.update({"Input Dims": dims, "Input type": types})
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur, "args": args}


DOC = {
    "traceEvents": [
        _ev("autograd::engine::evaluate_function: AddmmBackward0", 0, 30),
        _ev("aten::view", 10, 4, [[1, 8], []], ["float", ""]),
        _ev("aten::view", 11, 1, [[1, 8], []], ["float", ""]),
        _ev("autograd::engine::evaluate_function: torch::autograd::AccumulateGrad", 40, 20),
        _ev("torch::autograd::AccumulateGrad", 41, 18, [[8]], ["float"]),
        _ev("aten::add_", 42, 10, [[8], [8], []], ["float", "float", "Scalar"]),
        _ev("aten::permute", 70, 2, [[2, 3, 4], []], ["float", ""]),
        _ev("aten::clone", 75, 5, [[4, 2, 3], []], ["float", ""]),
        _ev("aten::as_strided", 90, 1, [[100], [], [], []], ["float", "", "", "Scalar"]),
        _ev("aten::as_strided", 92, 1, [[100], [], [], []], ["float", "", "", "Scalar"]),
        _ev("aten::relu", 95, 3, [[100]], ["float"]),
        _ev("aten::record_stream", 100, 1, [[8], []], ["float", ""]),
        _ev("aten::empty", 110, 1, [[], [], [], [], [], []], ["", "Scalar", "Scalar", "", "", ""]),
    ]
}


def _nodes(et, name):
    return [n for n in et["nodes"] if n["name"] == name]


def _guessed(node) -> list[int]:
    import json

    return json.loads(next((a["value"] for a in node["attrs"] if a["name"] == "mystique_guessed"), "[]"))


def test_view_sizes_come_from_their_consumer_else_the_input():
    from engine.compose.synth import synthesize

    et, rep = synthesize(DOC, "crafted_2022.json", flow=False)
    assert rep.cpu_ops == 13  # the two evaluate_function labels are cpu_ops too
    assert rep.skipped == {"a list argument's value is not recorded": 1}, rep.skipped_ops
    assert rep.skipped_ops[0]["name"] == "aten::empty"
    outer, inner = _nodes(et, "aten::view")
    assert outer["inputs"]["values"][1] == [8] and inner["inputs"]["values"][1] == [8]
    assert _nodes(et, "aten::permute")[0]["inputs"]["values"][1] == [2, 0, 1]
    for a in _nodes(et, "aten::as_strided"):
        assert a["inputs"]["values"][1:3] == [[100], [1]]
        assert a["inputs"]["types"][3] == "None"  # storage_offset: the input's own (the schema default)
        assert _guessed(a) == [1, 2, 3]
    rs = _nodes(et, "aten::record_stream")[0]
    assert rs["inputs"]["values"][1] == 0 and _guessed(rs) == [1]
    # inferred: 2 view sizes + permute's dims; guessed: as_strided 2 x (size, stride, offset),
    # record_stream's stream, add_'s alpha (a Scalar), clone's memory_format ("": None)
    assert rep.inferred_values == 3
    assert rep.guessed_values == 9


def test_synthesized_views_run_on_meta():
    """Every filled view makes a tensor on meta tensors with the element count it was given."""
    from engine.compose.synth import synthesize
    from engine.compose.synth_flow import _meta_outputs

    et, _rep = synthesize(DOC, "crafted_2022.json", flow=False)
    shapes = {}
    for n in et["nodes"]:
        if n["name"] in ("aten::view", "aten::permute", "aten::as_strided"):
            got = _meta_outputs(n)
            assert got is not None, n["name"]
            shapes.setdefault(n["name"], []).append(list(got[1][0].shape))
    assert shapes == {"aten::view": [[8], [8]], "aten::permute": [[4, 2, 3]], "aten::as_strided": [[100], [100]]}


def test_a_tensor_list_without_its_tensors_is_skipped():
    """hta_trace_diff's 108 aten::cat (control) record their list as Input Dims [[], []], types
    ["TensorList", "Scalar"]: an empty list would fail at replay ("expected a non-empty list of
    Tensors"), so the synthesis lists it by reason instead."""
    from engine.compose.synth import SynthSkip, synthesize

    doc = {"traceEvents": [_ev("aten::cat", 0, 5, [[], []], ["TensorList", "Scalar"])]}
    _et, rep = synthesize(doc, "crafted_2022.json", flow=False)
    assert rep.skipped == {str(SynthSkip.UNKNOWN_VALUE): 1}
    assert rep.skipped_ops[0]["detail"] == "a tensor list whose tensors are not recorded"


def test_resize_under_a_parent_makes_the_result_its_allocation_took():
    """hta_trace_diff/control.json.gz at ts ...2617734: aten::where([1024] bool, long, long) runs
    aten::empty, then aten::resize_ on that empty [0] long tensor (where's out= kernel): both are
    where's [1024] long result."""
    from engine.compose.synth import synthesize

    doc = {
        "traceEvents": [
            _ev("aten::where", 0, 30, [[1024], [1024], [1024]], ["bool", "long", "long"]),
            _ev("aten::empty", 4, 4, [[], [], [], [], [], []], ["", "Scalar", "Scalar", "", "", ""]),
            _ev("aten::resize_", 11, 4, [[0], [], []], ["long", "", ""]),
        ]
    }
    et, rep = synthesize(doc, "crafted_2022.json", flow=False)
    assert rep.skipped == {}, rep.skipped_ops
    assert _nodes(et, "aten::empty")[0]["inputs"]["values"][0] == [1024]
    rs = _nodes(et, "aten::resize_")[0]
    assert rs["inputs"]["values"][1] == [1024] and 1 in _guessed(rs)
