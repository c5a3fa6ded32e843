"""Selection payloads (what st.plotly_chart / st.dataframe return) -> ET node ids."""

from __future__ import annotations

import pytest

from engine.figures.graph import GraphView, build_graph_model
from engine.figures.selection import selected_keys, selection_to_node_ids


def _points(*keys, **extra):
    return {
        "selection": {
            "points": [{"curve_number": 1, "point_index": i, "customdata": k} for i, k in enumerate(keys)],
            "point_indices": list(range(len(keys))),
            "box": [],
            "lasso": [],
            **extra,
        }
    }


def test_graph_group_keys_expand_to_members(simple_add):
    from engine.graph import data_deps

    dag = data_deps(simple_add)
    model = build_graph_model(simple_add.ops, dag, GraphView(collapse="depth", depth=0))
    key = max(model.groups, key=lambda k: len(model.groups[k]))
    single = next(i for i in dag.nodes if i not in model.groups[key])
    ids = selection_to_node_ids(_points(key, single, key), "graph", groups=model.groups)
    assert ids == sorted(set(model.groups[key]) | {single})
    assert selected_keys(_points(key, key)) == [key]


def test_box_selection_with_float_customdata():
    event = {"selection": {"points": [{"customdata": 7.0}, {"customdata": [9]}], "box": [{"x": [0, 1], "y": [0, 1]}]}}
    assert selection_to_node_ids(event, "graph", groups={}) == [7, 9]


def test_timeline_cpu_op_and_kernel_map_to_et_ops(simple_add):
    ev, ops = simple_add.events, simple_add.ops
    cpu = ev[(ev["cat"].astype(str) == "cpu_op") & (ev["name"].astype(str) == "aten::uniform_")].iloc[0]
    # the ET node with the same external/record-function id (this trace links by external id)
    expect = sorted(ops[ops["rf_id"] == int(cpu["external_id"])]["id"].astype(int))
    assert len(expect) == 1 and ops.set_index("id").loc[expect[0], "name"] == "aten::uniform_"
    assert selection_to_node_ids(_points(int(cpu["ev"])), "timeline", events=ev, ops=ops) == expect
    # a kernel maps to the op that launched it: the op of the runtime launch with its correlation
    kernel = ev[ev["cat"].astype(str) == "kernel"].iloc[0]
    launch = ev[(ev["name"].astype(str) == "cudaLaunchKernel") & (ev["correlation"] == kernel["correlation"])].iloc[0]
    by_kernel = selection_to_node_ids(_points(int(kernel["ev"])), "timeline", events=ev, ops=ops)
    assert by_kernel == selection_to_node_ids(_points(int(launch["ev"])), "timeline", events=ev, ops=ops)
    assert ops.set_index("id").loc[by_kernel[0], "name"] == "aten::uniform_"
    # without the loader's op_id column the fallback (rf/external id) finds the cpu_op's node too
    legacy = ev.drop(columns=["op_id"])
    assert selection_to_node_ids(_points(int(cpu["ev"])), "timeline", events=legacy, ops=ops) == expect


def test_dataframe_rows_and_bars():
    assert selection_to_node_ids(
        {"selection": {"rows": [2, 0, 9], "columns": []}}, "table", table_ids=[10, 11, 12]
    ) == [10, 12]
    assert selection_to_node_ids(_points("aten::add"), "bars", name_to_ids={"aten::add": [3, 1]}) == [1, 3]
    assert selection_to_node_ids(None, "graph") == []
    with pytest.raises(ValueError):
        selection_to_node_ids({}, "pie")
