"""Every shared real trace loads, and `mystique info --json` reports the MANIFEST's golden facts."""

from __future__ import annotations

import json
import os

import numpy as np
import pandas as pd
import pytest
from conftest import et_node

from engine.cli.info import GPU_KEYS
from engine.cli.main import main
from engine.trace import CATEGORIES, load, summarize
from engine.trace.model import PHASES
from engine.trace.summary import KEYS

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OPS_COLS = """id rank name parent depth tid fw_tid fw_parent rf_id seq_id scope schema category inputs outputs attrs n_children phase module k_ts_us k_dur_us gpu_dur_us""".split()  # the documented ops table (engine/trace/model.py)
EVENT_COLS = [
    "ev",
    "rank",
    "cat",
    "name",
    "pid",
    "tid",
    "ts_us",
    "dur_us",
    "device",
    "stream",
    "correlation",
    "external_id",
    "rf_id",
    "seq_num",
    "fwd_tid",
    "pg_name",
    "coll_name",
    "coll_seq",
    "comms_id",
]
TENSOR_COLS = [
    "op_id",
    "rank",
    "io",
    "arg",
    "sub",
    "tensor_id",
    "storage_id",
    "offset",
    "numel",
    "itemsize",
    "dtype",
    "shape",
    "strides",
    "device",
]


def _info_json(capsys, *args) -> object:
    assert main(["info", "--json", *map(str, args)]) == 0
    return json.loads(capsys.readouterr().out)


def _check_against_manifest(obj: dict, entry: dict) -> None:
    assert obj["kind"] == entry["kind"]
    if entry["kind"] == "execution_trace":
        assert obj["schema"] == entry["schema"]
        assert obj["nodes"] == entry["nodes"]
    else:
        assert obj["events"] == entry["events"]
        assert obj["kernels"] == entry["kernels"]
        assert obj["cpu_ops"] == entry["cpu_ops"]
        assert obj["rank"] == entry["rank"]
        assert obj["world_size"] == entry["world_size"]


@pytest.mark.slow
def test_every_manifest_file_matches_info_json(shared_traces, manifest, cache_dir, capsys):
    assert len(manifest) >= 13
    for entry in manifest:
        obj = _info_json(capsys, shared_traces / entry["path"])
        assert isinstance(obj, dict), entry["path"]
        _check_against_manifest(obj, entry)
        assert obj["link_rate"] is None
        # the summary's keys, then the GPU analyses' where the trace has GPU work (hand count:
        # the manifest's kernel count)
        has_gpu = (entry.get("kernels") or 0) > 0
        assert tuple(obj) == KEYS + (GPU_KEYS if has_gpu else ()), (entry["path"], tuple(obj)[len(KEYS) :])


def test_info_json_subprocess_single_and_pair(shared_traces, manifest, cache_dir):
    by_path = {e["path"]: e for e in manifest}
    paths = ["hta_simple_add/benchmark_simple_add_et.json.gz", "hta_simple_add/benchmark_simple_add_trace.json.gz"]
    from clirun import cli

    out = cli("info", "--json", *[str(shared_traces / p) for p in paths], cache=cache_dir, timeout=120)
    assert out.returncode == 0, out.stderr
    objs = json.loads(out.stdout)
    assert isinstance(objs, list) and len(objs) == 2
    for obj, p in zip(objs, paths):
        _check_against_manifest(obj, by_path[p])
        assert obj["link_rate"] == 1.0


def test_tables_follow_the_model_contract(shared_traces, cache_dir):
    tr = load(shared_traces / "param_resnet/resnet_et.json.gz", shared_traces / "param_resnet/resnet_kineto.json.gz")
    assert list(tr.ops.columns[: len(OPS_COLS)]) == OPS_COLS
    assert list(tr.events.columns[: len(EVENT_COLS)]) == EVENT_COLS
    assert list(tr.tensors.columns) == TENSOR_COLS
    ops = tr.ops
    assert len(ops) == 14392 and ops["id"].is_unique
    for c in ("name", "schema", "category", "phase", "module"):
        assert isinstance(ops[c].dtype, pd.CategoricalDtype), c
    assert set(ops["category"].cat.categories) <= set(CATEGORIES)
    assert set(ops["phase"].astype(str)) <= set(PHASES)
    assert ops["depth"].dtype == np.int32 and ops["n_children"].dtype == np.int32
    # Tree facts: the process root exists with parent -1; children counts add up.
    root = ops[ops["id"] == 1].iloc[0]
    assert root["name"] == "[pytorch|profiler|execution_trace|process]" and root["parent"] == -1
    assert int(ops["n_children"].sum()) == int((ops["parent"] >= 0).sum())
    assert int(ops.loc[ops["parent"] == 1, "depth"].max()) == 0
    conv = ops[ops["name"] == "aten::cudnn_convolution"]
    assert len(conv) > 0 and (conv["category"] == "compute").all()
    assert (ops.loc[ops["name"] == "aten::view", "category"] == "view").all()
    assert (ops.loc[ops["name"] == "aten::empty", "category"] == "allocation").all()
    assert (ops.loc[ops["name"] == "## forward ##", "category"] == "annotation").all()
    assert (
        ops.loc[ops["name"].astype(str).str.startswith("autograd::engine::evaluate_function"), "category"] == "autograd"
    ).all()
    comm = ops.loc[ops["category"] == "communication", "name"].astype(str)
    assert "record_param_comms" in set(comm)
    # Tensors: float32 CUDA tensors with tuple shapes; tensor lists are flattened with `sub`.
    t = tr.tensors
    assert len(t) == 33678
    assert {"float32", "int64", "uint8", "float64"} <= set(t["dtype"].astype(str))
    assert set(t["device"].astype(str)) <= {"cuda:0", "cpu", ""}
    assert all(isinstance(s, tuple) for s in t["shape"].head(100))
    assert (t["sub"] > 0).any()
    row = t[(t["op_id"] == 221) & (t["io"] == "in")].iloc[0]  # aten::view of a [64] float tensor
    assert row["shape"] == (64,) and row["numel"] == 64 and row["itemsize"] == 4 and row["strides"] is None
    ev = tr.events
    assert str(ev["device"].dtype) == "Int64" and str(ev["op_id"].dtype) == "Int64"
    assert (ev["cat"] == "kernel").sum() == 9628


def test_chakra_strides_and_kernel_file_attrs(shared_traces, cache_dir):
    tr = load(shared_traces / "param_pt2/pt2_et.json.tar.gz")
    assert tr.meta["schema"] == "1.1.1-chakra.0.0.4" and len(tr.ops) == 20
    res = tr.meta["resources"]
    assert any(k.startswith("pt2_et_resources/") and k.endswith(".py") for k in res)
    assert summarize(tr)["resources"] == sorted(res)
    triton = tr.ops[tr.ops["name"].astype(str).str.startswith("triton_")].iloc[0]
    assert json.loads(triton["attrs"])["kernel_backend"] == "triton"
    assert triton["category"] == "custom"
    t = tr.tensors[tr.tensors["op_id"] == triton["id"]]
    assert t["strides"].iloc[0] == (4, 1) and t["shape"].iloc[0] == (4, 4)


def test_old_flat_schema_and_dtypes(shared_traces, cache_dir):
    tr = load(shared_traces / "param_linear/linear_et.json.gz")
    assert tr.meta["schema"] == "1.0.1" and len(tr.ops) == 931
    inputs = json.loads(tr.ops.loc[tr.ops["name"] == "aten::as_strided", "inputs"].iloc[0])
    assert set(inputs) >= {"values", "shapes", "types"}
    assert {"float32", "uint8", "int64"} <= set(tr.tensors["dtype"].astype(str))


def test_pairs_link(shared_traces, cache_dir):
    """Golden link rates (numbers reported to the lead; see engine.trace.link for the method)."""
    add = load(
        shared_traces / "hta_simple_add/benchmark_simple_add_et.json.gz",
        shared_traces / "hta_simple_add/benchmark_simple_add_trace.json.gz",
    )
    assert add.meta["kind"] == "execution_trace+kineto"
    assert add.meta["link"]["link_rate"] == 1.0 and add.meta["link"]["et_ops"] == 36
    add_ops = add.ops[add.ops["name"] == "aten::add"]
    assert add_ops["k_dur_us"].notna().all() and (add_ops["gpu_dur_us"] > 0).all()
    assert summarize(add)["link_rate"] == 1.0
    linear = load(
        shared_traces / "param_linear/linear_et.json.gz", shared_traces / "param_linear/linear_kineto.json.gz"
    )
    assert linear.meta["link"]["link_rate"] == 1.0
    # The ET holds one iteration, the Kineto trace 40: each ET op links to one event, no event twice.
    ev_linked = linear.events["op_id"].dropna()
    assert ev_linked.size > 0
    host = linear.events[linear.events["cat"].isin(["cpu_op", "user_annotation"]) & linear.events["op_id"].notna()]
    assert host["op_id"].nunique() == len(host) == 928
    mm = linear.ops[linear.ops["name"] == "aten::addmm"]
    assert (mm["gpu_dur_us"] > 0).all()
    resnet = load(
        shared_traces / "param_resnet/resnet_et.json.gz", shared_traces / "param_resnet/resnet_kineto.json.gz"
    )
    info = resnet.meta["link"]
    # 14,392 nodes less the 3 profiler roots and the "## process_group:init ##" metadata node.
    assert info["method"] == "external_id" and info["et_ops"] == 14388
    # The ResNet ET is a DDP run, its Kineto trace a plain one: only part of the ops exist in both.
    assert 0.2 < info["link_rate"] < 0.5
    assert any("different runs" in w for w in resnet.meta["warnings"])
    linked = resnet.ops[resnet.ops["k_ts_us"].notna()]
    assert (linked["k_dur_us"] >= 0).all()


def test_directory_and_rank_from_names(tmp_path, shared_traces, cache_dir):
    import shutil

    d = tmp_path / "ranks"
    d.mkdir()
    shutil.copy(shared_traces / "hta_simple_add/benchmark_simple_add_et.json.gz", d / "et_rank_0.json.gz")
    shutil.copy(shared_traces / "hta_simple_add/benchmark_simple_add_et.json.gz", d / "et_rank_1.json.gz")
    shutil.copy(shared_traces / "hta_trace_diff/test.json.gz", d / "kineto_rank1.json.gz")
    tr = load(d)
    assert tr.meta["ranks"] == [0, 1]
    assert sorted(tr.ops["rank"].unique().tolist()) == [0, 1]
    assert tr.meta["world_size"] == 2  # from the Kineto file's distributedInfo
    assert [s["rank"] for s in tr.meta["sources"]] == [0, 1, 1]


def test_project_samples_link_by_record_function_id(cache_dir):
    """Our own captures (torch >= 2.1) carry "Record function id": every ET op links exactly."""
    root = os.path.join(ROOT, "sample_traces")
    models = sorted(d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d))) if os.path.isdir(root) else []
    if not models:
        pytest.skip("sample_traces/ not captured yet (make samples)")
    pairs = [
        (os.path.join(root, m, f), os.path.join(root, m, f.replace("_et.json.gz", "_kineto.json.gz")))
        for m in models
        for f in sorted(os.listdir(os.path.join(root, m)))
        if f.endswith("_et.json.gz")
    ]
    assert len(pairs) >= len(models)
    for et, k in pairs:
        m = os.path.basename(et)
        tr = load(et, k)
        assert tr.meta["link"]["method"] == "rf_id"
        assert tr.meta["link"]["link_rate"] == 1.0, m
        assert len(tr.meta["iterations"]) >= 1 and tr.meta["iterations"][0]["name"].startswith("ProfilerStep#")
        host = tr.events[tr.events["cat"] == "cpu_op"]
        assert host["op_id"].notna().mean() > 0.9


def _to_chakra(doc: dict, schema: str) -> dict:
    """Rewrite a 1.0.1 (flat) ET into the chakra layout, as newer PyTorch writes it."""
    out = {k: v for k, v in doc.items() if k != "nodes"}
    out["schema"] = schema
    nodes = []
    for n in doc["nodes"]:
        attrs = [
            {"name": k, "type": "uint64", "value": n[k]}
            for k in ("rf_id", "fw_parent", "seq_id", "scope", "tid", "fw_tid")
        ]
        attrs.append({"name": "op_schema", "type": "string", "value": n["op_schema"]})
        nodes.append(
            {
                "id": n["id"],
                "name": n["name"],
                "ctrl_deps": n["parent"],
                "inputs": {"values": n["inputs"], "shapes": n["input_shapes"], "types": n["input_types"]},
                "outputs": {"values": n["outputs"], "shapes": n["output_shapes"], "types": n["output_types"]},
                "attrs": attrs,
            }
        )
    out["nodes"] = nodes
    return out


@pytest.mark.parametrize("schema", ["1.0.3-chakra.0.0.4", "1.0.4-chakra.0.0.4", "1.1.1-chakra.0.0.4"])
def test_flat_and_chakra_layouts_give_the_same_tables(shared_traces, tmp_path, cache_dir, schema):
    import gzip

    src = shared_traces / "param_linear/linear_et.json.gz"
    doc = json.loads(gzip.decompress(src.read_bytes()))
    f = tmp_path / "chakra.json"
    f.write_text(json.dumps(_to_chakra(doc, schema)))
    flat, chakra = load(src), load(f)
    assert chakra.meta["warnings"] == [] and chakra.meta["schema"] == schema
    cols = [c for c in OPS_COLS if c not in ("inputs", "outputs", "attrs")]
    pd.testing.assert_frame_equal(flat.ops[cols], chakra.ops[cols], check_categorical=False)
    pd.testing.assert_frame_equal(flat.tensors, chakra.tensors, check_categorical=False)
    assert [json.loads(x) for x in flat.ops["inputs"]] == [json.loads(x) for x in chakra.ops["inputs"]]


def test_progress_is_reported_monotonically(shared_traces, cache_dir):
    seen = []
    load(
        shared_traces / "hta_alexnet/benchmark_result_2869224_1695835535_trace.json.gz",
        progress=lambda f, msg: seen.append((f, msg)),
    )
    fractions = [f for f, _ in seen]
    assert fractions[0] == 0.0 and fractions[-1] == 1.0 and fractions == sorted(fractions)
    assert all(isinstance(m, str) and m for _, m in seen)


def test_info_human_output(shared_traces, cache_dir, capsys):
    assert main(["info", str(shared_traces / "hta_amd_mi250/mi250_minitoy_train_ROCm6_2_kineto.json.gz")]) == 0
    out = capsys.readouterr().out
    assert "kineto" in out and "events          220" in out and "kernels         14" in out
    assert "cpu ops         70" in out


def test_et_without_rank_adopts_the_kineto_rank(tmp_path, shared_traces, cache_dir):
    import gzip

    k = json.loads(gzip.decompress((shared_traces / "hta_simple_add/benchmark_simple_add_trace.json.gz").read_bytes()))
    k["distributedInfo"] = {"rank": 3, "world_size": 4}
    kf = tmp_path / "kineto.json"
    kf.write_text(json.dumps(k))
    tr = load(shared_traces / "hta_simple_add/benchmark_simple_add_et.json.gz", kf)
    assert tr.meta["ranks"] == [3] and tr.meta["world_size"] == 4
    assert set(tr.tensors["rank"]) == {3} and tr.meta["link"]["link_rate"] == 1.0


def _tiny_et_and_kineto(tmp_path, kineto_names):
    nodes = [et_node(2, 1, "[pytorch|profiler|execution_trace|thread]", rf_id=0, scope=7)]
    nodes += [et_node(i, 2, name, rf_id=i * 10) for i, name in enumerate(["aten::mm", "aten::relu", "aten::sum"], 3)]
    et = tmp_path / "tiny_et.json"
    et.write_text(json.dumps({"schema": "1.1.1-chakra.0.0.4x", "nodes": nodes}))
    events = [
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": n,
            "pid": 7,
            "tid": 7,
            "ts": 100.0 * k,
            "dur": 50.0,
            "args": {"Record function id": (k + 3) * 10, "External id": k + 1},
        }
        for k, n in enumerate(kineto_names)
    ]
    events += [
        {
            "ph": "X",
            "cat": "cuda_runtime",
            "name": "cudaLaunchKernel",
            "pid": 7,
            "tid": 7,
            "ts": 100.0 * k + 5,
            "dur": 3.0,
            "args": {"correlation": 500 + k, "External id": k + 1},
        }
        for k in range(3)
    ]
    events += [
        {
            "ph": "X",
            "cat": "kernel",
            "name": f"k{k}",
            "pid": 0,
            "tid": 7,
            "ts": 100.0 * k + 20,
            "dur": 4.0 + k,
            "args": {"correlation": 500 + k, "device": 0, "stream": 7},
        }
        for k in range(3)
    ]
    k = tmp_path / "tiny_kineto.json"
    k.write_text(json.dumps({"traceEvents": events}))
    return et, k


def test_rf_id_links_kernels_and_refuses_name_mismatch(tmp_path, cache_dir):
    et, k = _tiny_et_and_kineto(tmp_path, ["aten::mm", "aten::relu", "aten::sum"])
    with pytest.warns(UserWarning, match="unknown ET schema"):
        tr = load(et, k)
    assert tr.meta["link"]["method"] == "rf_id" and tr.meta["link"]["link_rate"] == 1.0
    ops = tr.ops.set_index("id")
    assert ops.loc[3, "k_ts_us"] == 0.0 and ops.loc[5, "k_dur_us"] == 50.0
    assert ops.loc[3, "gpu_dur_us"] == 4.0 and ops.loc[5, "gpu_dur_us"] == 6.0
    assert ops.loc[2, "gpu_dur_us"] == 15.0  # the thread node includes its children's GPU time
    kern = tr.events[tr.events["cat"] == "kernel"]
    assert kern["op_id"].tolist() == [3, 4, 5]
    et2, k2 = _tiny_et_and_kineto(tmp_path, ["aten::mm", "aten::gelu", "aten::sum"])
    with pytest.warns(UserWarning):
        bad = load(et2, k2)
    assert bad.meta["link"]["linked"] == 2 and bad.meta["link"]["name_mismatch"] == 1
    assert any("another name" in w for w in bad.meta["warnings"])


def test_kineto_with_nan_literals_and_bom(tmp_path, cache_dir):
    text = (
        '{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1, "dur": 2, '
        '"args": {"est. achieved occupancy %": NaN, "correlation": 3}}], "deviceProperties": []}'
    )
    f = tmp_path / "nan.json"
    f.write_bytes(b"\xef\xbb\xbf" + text.encode())
    tr = load(f)
    assert tr.meta["events"] == 1 and tr.events["correlation"].tolist() == [3]
