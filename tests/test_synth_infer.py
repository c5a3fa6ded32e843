"""Size lists a pre-2.1 Kineto trace did not record, inferred from the call tree
(engine/compose/synth_infer.py, issue 35).

The document below is written the way the 2022 profiler writes (hta_trace_diff): no "Concrete
Inputs", no strides, an `int[]` argument recorded as an empty dims list with type "". Golden
values come from the operators' definitions, worked by hand: layer_norm's normalized_shape is its
weight's shape; addmm(bias[8], x[4,16], w[16,8]) allocates its [4, 8] result; zeros([3, 5])
runs empty then zero_ on the [3, 5] result; transposing a contiguous [4, 8] tensor (its unrecorded
dims guessed as the last two) is
as_strided(size [8, 4], stride [1, 8]); native_layer_norm([4, 8]) makes out [4, 8], mean and
rstd [4, 1]; its backward asks for all three gradients when weight and bias were passed."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")


def _ev(name, ts, dur, dims, types):
    return {
        "ph": "X",
        "cat": "cpu_op",
        "name": name,
        "pid": 1,
        "tid": 1,
        "ts": ts,
        "dur": dur,
        "args": {"Input Dims": dims, "Input type": types, "External id": ts},
    }


EMPTY6 = ([[], [], [], [], [], []], ["", "Scalar", "Scalar", "", "", ""])
DOC = {
    "traceEvents": [
        _ev("aten::addmm", 0, 10, [[8], [4, 16], [16, 8], [], []], ["float", "float", "float", "Scalar", "Scalar"]),
        _ev("aten::empty", 1, 1, *EMPTY6),
        _ev("aten::zeros", 20, 10, [[], [], [], [], []], ["", "", "", "", "Scalar"]),
        _ev("aten::empty", 21, 1, *EMPTY6),
        _ev("aten::zero_", 23, 5, [[3, 5]], ["float"]),
        _ev("aten::transpose", 40, 5, [[4, 8], [], []], ["float", "Scalar", "Scalar"]),
        _ev("aten::as_strided", 41, 1, [[4, 8], [], [], []], ["float", "", "", ""]),
        _ev(
            "aten::layer_norm",
            50,
            20,
            [[4, 8], [], [8], [8], [], []],
            ["float", "", "float", "float", "Scalar", "Scalar"],
        ),
        _ev("aten::native_layer_norm", 51, 18, [[4, 8], [], [8], [8], []], ["float", "", "float", "float", "Scalar"]),
        _ev("aten::empty", 52, 1, *EMPTY6),
        _ev("aten::empty", 54, 1, *EMPTY6),
        _ev("aten::empty", 56, 1, *EMPTY6),
        _ev(
            "aten::native_layer_norm_backward",
            80,
            10,
            [[4, 8], [4, 8], [], [4, 1], [4, 1], [8], [8], []],
            ["float", "float", "", "float", "float", "float", "float", ""],
        ),
        _ev("aten::fill_", 95, 2, [[6], []], ["float", "Scalar"]),
        _ev("aten::view", 100, 2, [[4, 8], []], ["float", ""]),  # top level: no call tree pins its size
        _ev("aten::clamp", 110, 2, [[4, 8], [], []], ["float", "Scalar", ""]),  # min passed, max not
    ]
}


def _node(et, name, k=0):
    return [n for n in et["nodes"] if n["name"] == name][k]


def _arg(node, i):
    return node["inputs"]["values"][i]


def test_unrecorded_size_lists_come_from_the_call_tree():
    from engine.compose.synth import synthesize

    et, rep = synthesize(DOC, "crafted_2022.json", flow=False)
    assert rep.cpu_ops == 16
    assert rep.skipped == {}, rep.skipped_ops
    # the top-level view: its reader (clamp) reads the input's own [4, 8]: kept, guessed (synth_views.py)
    view = _node(et, "aten::view")
    assert _arg(view, 1) == [4, 8] and {"name": "mystique_guessed", "type": "string", "value": "[1]"} in view["attrs"]
    assert _arg(_node(et, "aten::layer_norm"), 1) == [8]
    assert _arg(_node(et, "aten::native_layer_norm"), 1) == [8]
    assert _arg(_node(et, "aten::native_layer_norm_backward"), 2) == [8]
    assert _arg(_node(et, "aten::native_layer_norm_backward"), 7) == [True, True, True]
    assert _arg(_node(et, "aten::empty", 0), 0) == [4, 8]  # addmm's result
    assert _arg(_node(et, "aten::zeros"), 0) == [3, 5]
    assert _arg(_node(et, "aten::empty", 1), 0) == [3, 5]
    a = _node(et, "aten::as_strided")
    assert (_arg(a, 1), _arg(a, 2)) == ([8, 4], [1, 8])
    assert [_arg(_node(et, "aten::empty", k), 0) for k in (2, 3, 4)] == [[4, 8], [4, 1], [4, 1]]
    assert _node(et, "aten::fill_")["inputs"]["types"][1] == "Int"  # a Scalar ("number") not recorded: guessed
    clamp = _node(et, "aten::clamp")["inputs"]
    assert clamp["types"][1:] == ["Int", "None"]  # a passed Scalar is not dropped to None (clamp refuses both None)
    for name in ("aten::zeros", "aten::as_strided", "aten::layer_norm", "aten::fill_"):
        attrs = {x["name"] for x in _node(et, name)["attrs"]}
        assert "mystique_guessed" in attrs, name  # inferred or guessed, never passed off as recorded
    assert rep.inferred_values >= 11
