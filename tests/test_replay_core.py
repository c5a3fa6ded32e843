"""Replay engine on hand-made traces: bad records, memory limits, trace code, CLI, value realism.

Hand-made ETs are written in the real 1.0.1 / chakra JSON layouts and go through
`engine.trace.load`, so these tests exercise the same path a user's file takes.
"""

from __future__ import annotations

import gzip
import io
import json
import sys
import tarfile
from pathlib import Path

import pytest
import torch

import engine.trace as T
from engine.errors import TraceError
from engine.replay import ReplayConfig, ReplayResult, replay
from engine.replay.dispatch import DispatchError, resolve
from engine.replay.plan import TRACE_CODE_REASON, build_plan
from engine.replay.tensors import StorageManager

ROOT = Path(__file__).resolve().parents[1]
ADD_SCHEMA = "aten::add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor"


def _node(nid, name, schema, inputs, in_shapes, in_types, outputs=(), out_shapes=(), out_types=(), **extra):
    return {
        "name": name,
        "id": nid,
        "rf_id": nid,
        "parent": 2,
        "fw_parent": 0,
        "seq_id": -1,
        "scope": 0,
        "tid": 1,
        "fw_tid": 0,
        "op_schema": schema,
        "inputs": list(inputs),
        "input_shapes": list(in_shapes),
        "input_types": list(in_types),
        "outputs": list(outputs),
        "output_shapes": list(out_shapes),
        "output_types": list(out_types),
        **extra,
    }


def _write_et(path: Path, nodes: list[dict]) -> Path:
    roots = [
        _node(1, "[pytorch|profiler|execution_trace|process]", "", [], [], []),
        _node(2, "[pytorch|profiler|execution_trace|thread]", "", [], [], []),
    ]
    roots[0]["parent"] = 1
    roots[1]["parent"] = 1
    doc = {"schema": "1.0.1", "pid": 1, "time": "2026-11-22 00:00:00", "start_ts": 0, "nodes": roots + nodes}
    path.write_bytes(gzip.compress(json.dumps(doc).encode()))
    return path


def _t(tid, sid, numel, shape, dtype="float"):
    return [tid, sid, 0, numel, 4 if dtype == "float" else 8, "cuda:0"], shape, f"Tensor({dtype})"


def _add(nid, a, b, out):
    (va, sa, ta), (vb, sb, tb), (vo, so, to) = a, b, out
    return _node(nid, "aten::add", ADD_SCHEMA, [va, vb, 1], [sa, sb, []], [ta, tb, "Int"], [vo], [so], [to])


@pytest.fixture()
def bad_trace(tmp_path, cache_dir) -> Path:
    good = _add(10, _t(100, 1, 16, [4, 4]), _t(101, 2, 16, [4, 4]), _t(102, 3, 16, [4, 4]))
    unknown = _node(
        11,
        "aten::definitely_not_an_op",
        "",
        [_t(102, 3, 16, [4, 4])[0]],
        [[4, 4]],
        ["Tensor(float)"],
        [_t(103, 4, 16, [4, 4])[0]],
        [[4, 4]],
        ["Tensor(float)"],
    )
    bad_dtype = _add(
        12,
        (_t(102, 3, 16, [4, 4])[0], [4, 4], "Tensor(float)"),
        ([104, 5, 0, 16, 4, "cuda:0"], [4, 4], "Tensor(wobbly_float99)"),
        _t(105, 6, 16, [4, 4]),
    )
    bad_numel = _add(13, _t(102, 3, 16, [4, 4]), _t(106, 7, 99, [4, 4]), _t(107, 8, 16, [4, 4]))
    consumer = _add(14, _t(102, 3, 16, [4, 4]), _t(102, 3, 16, [4, 4]), _t(108, 9, 16, [4, 4]))
    return _write_et(tmp_path / "bad_et.json.gz", [good, unknown, bad_dtype, bad_numel, consumer])


def test_bad_records_are_reported_per_op_while_the_rest_replays(bad_trace):
    res = replay(T.load(bad_trace), config=ReplayConfig(warmup=0, iters=1, metrics=False))
    cov = res.coverage
    assert (cov["selected"], cov["replayed"], cov["skipped"]) == (5, 2, 3)
    details = {s["op_id"]: s["detail"] for s in res.skipped_ops}
    assert "aten::definitely_not_an_op" in details[11] and "not found" in details[11]
    assert "wobbly_float99" in details[12] and "input 1" in details[12]
    assert "99" in details[13] and "16 elements" in details[13]
    assert set(details) == {11, 12, 13}
    assert len(res.iteration_ms) == 1 and res.iteration_ms[0] > 0
    j = res.to_json()
    for key in ("iteration_ms", "median_ms", "per_op", "coverage", "metrics", "kineto_path", "device", "paths"):
        assert key in j
    assert {p["op_id"] for p in j["per_op"] if p["status"] == "replayed"} == {10, 14}


def test_runtime_failure_synthesizes_outputs_so_dependents_run(tmp_path, cache_dir):
    # mm with inner dims that do not match: dispatch resolves, execution fails
    mm = "aten::mm(Tensor self, Tensor mat2) -> Tensor"
    bad = _node(
        10,
        "aten::mm",
        mm,
        [_t(1, 1, 6, [2, 3])[0], _t(2, 2, 8, [4, 2])[0]],
        [[2, 3], [4, 2]],
        ["Tensor(float)", "Tensor(float)"],
        [_t(3, 3, 4, [2, 2])[0]],
        [[2, 2]],
        ["Tensor(float)"],
    )
    dep = _add(11, _t(3, 3, 4, [2, 2]), _t(3, 3, 4, [2, 2]), _t(4, 4, 4, [2, 2]))
    res = replay(
        T.load(_write_et(tmp_path / "mm_et.json.gz", [bad, dep])), config=ReplayConfig(warmup=1, iters=2, metrics=False)
    )
    assert res.coverage["replayed"] == 1
    (reason,) = res.coverage["by_reason"]
    assert reason == "failed at run time"  # a stable key; the exception text is the detail
    (skip,) = res.skipped_ops
    assert skip["reason"] == reason and "RuntimeError" in skip["detail"] and "aten::mm" in skip["detail"]
    assert [p["status"] for p in res.per_op] == ["skipped", "replayed"]


def test_terabyte_tensor_is_refused_or_skipped_not_allocated(tmp_path, cache_dir):
    n = 2**38  # 2^38 float32 = 1 TiB
    huge = _add(10, _t(1, 1, n, [n]), _t(2, 2, n, [n]), _t(3, 3, n, [n]))
    small = _add(11, _t(4, 4, 16, [16]), _t(5, 5, 16, [16]), _t(6, 6, 16, [16]))
    trace = T.load(_write_et(tmp_path / "huge_et.json.gz", [huge, small]))
    with pytest.raises(TraceError, match="GiB"):
        replay(trace, config=ReplayConfig(warmup=0, iters=1, lazy=False, metrics=False))
    res = replay(trace, config=ReplayConfig(warmup=0, iters=1, lazy="auto", metrics=False))
    assert res.memory["lazy"] is True and res.memory["eager_peak_bytes"] > 2**40
    assert res.coverage["replayed"] == 1
    assert res.coverage["by_reason"] == {"needs more memory than the device has free": 1}
    assert "TiB" in res.skipped_ops[0]["detail"] or "GiB" in res.skipped_ops[0]["detail"]


def test_aliasing_views_share_one_storage(tmp_path, cache_dir):
    # two external views of one storage: an in-place add through one must be visible in the other
    add_ = "aten::add_.Tensor(Tensor(a!) self, Tensor other, *, Scalar alpha=1) -> Tensor(a!)"
    a = [1, 7, 0, 4, 4, "cpu"]
    b = [2, 7, 4, 4, 4, "cpu"]  # second half of storage 7
    f32 = "Tensor(float)"
    n1, n2 = (
        _node(i, "aten::add_", add_, [t, t, 1], [[4], [4], []], [f32, f32, "Int"], [t], [[4]], [f32])
        for i, t in ((10, a), (11, b))
    )
    trace = T.load(_write_et(tmp_path / "alias_et.json.gz", [n1, n2]))
    plan = build_plan(trace.ops, [10, 11], device="cpu", allow_trace_code=False)
    store = StorageManager(device="cpu")
    exts = list(plan.externals.values())
    store.plan(exts)
    assert store.total_bytes() == 8 * 4  # one buffer covering both views
    gen = torch.Generator().manual_seed(0)
    ta, tb = (store.materialize(e, gen) for e in exts)
    assert ta.untyped_storage().data_ptr() == tb.untyped_storage().data_ptr()
    assert tb.storage_offset() == 4


def test_cudnn_ops_are_substituted_on_cpu_and_rnn_has_no_equivalent():
    bn_bwd = (
        "aten::cudnn_batch_norm_backward(Tensor input, Tensor grad_output, Tensor weight, Tensor? running_mean, "
        "Tensor? running_var, Tensor? save_mean, Tensor? save_var, float epsilon, Tensor reserveSpace) "
        "-> (Tensor, Tensor, Tensor)"
    )
    types = ["Tensor(float)"] * 7 + ["Double", "Tensor(unsigned char)"]
    r = resolve("aten::cudnn_batch_norm_backward", bn_bwd, types, "cpu")
    assert r.substituted == "aten::cudnn_batch_norm_backward -> aten::native_batch_norm_backward"
    assert r.overload is torch.ops.aten.native_batch_norm_backward.default
    with pytest.raises(DispatchError, match="no CPU equivalent"):
        resolve("aten::_cudnn_rnn", "", ["Tensor(float)"], "cpu")
    with pytest.raises(DispatchError, match="collective"):
        resolve("c10d::allreduce_", "", [], "cpu")


def test_schema_less_trace_resolves_overload_by_argument_kinds():
    r = resolve("aten::add", "", ["Tensor(float)", "Tensor(float)", "Int"], "cpu")
    assert r.overload is torch.ops.aten.add.Tensor
    r = resolve("aten::sum", "", ["Tensor(float)", "GenericList[Int]", "Bool", "None"], "cpu")
    assert r.overload is torch.ops.aten.sum.dim_IntList


def test_embedding_bag_inputs_get_valid_indices_and_offsets(cache_dir):
    folder = ROOT / "sample_traces" / "dlrm"
    if not (folder / "dlrm_et.json.gz").is_file():
        pytest.skip("dlrm sample capture not present")
    from engine.graph import replay_ops

    trace = T.load(folder / "dlrm_et.json.gz")
    ops = trace.ops
    plan = build_plan(ops, replay_ops(trace), device="cpu", allow_trace_code=False)
    store = StorageManager(device="cpu")
    store.plan(list(plan.externals.values()))
    gen = torch.Generator().manual_seed(1)
    checked = 0
    for st in plan.steps:
        if st.name != "aten::embedding_bag" or not st.runnable:
            continue
        ins = json.loads(ops.loc[ops["id"] == st.op_id, "inputs"].iloc[0])
        rows, n_idx = ins["shapes"][0][0], ins["shapes"][1][0]
        by_arg = {(w, p): slot for w, p, sub, slot in st.fixups}
        idx = store.materialize(plan.externals[by_arg[("p", 1)]], gen)
        off = store.materialize(plan.externals[by_arg[("p", 2)]], gen)
        assert int(idx.min()) >= 0 and int(idx.max()) < rows
        assert int(off[0]) == 0 and bool((off[1:] >= off[:-1]).all()) and int(off[-1]) <= n_idx
        assert len(set(idx.tolist())) > 1  # not a constant fill
        checked += 1
    assert checked == 4  # one per embedding table


def _evil_tarball(tmp_path: Path, sentinel: Path) -> Path:
    et = {
        "schema": "1.1.1-chakra.0.0.4",
        "pid": 1,
        "time": "x",
        "start_ts": 0,
        "finish_ts": 1,
        "nodes": [
            {
                "id": 1,
                "name": "[pytorch|profiler|execution_trace|process]",
                "ctrl_deps": 1,
                "inputs": {"values": [], "shapes": [], "types": []},
                "outputs": {"values": [], "shapes": [], "types": []},
                "attrs": [],
            },
            {
                "id": 2,
                "name": "triton_poi_fused_evil_0",
                "ctrl_deps": 1,
                "inputs": {
                    "values": [[3, 4, 0, 4, 4, "cuda:0"]],
                    "shapes": [[4]],
                    "types": ["Tensor(float)"],
                    "strides": [[1]],
                },
                "outputs": {"values": [], "shapes": [], "types": []},
                "attrs": [
                    {"name": "rf_id", "type": "uint64", "value": 2},
                    {"name": "kernel_backend", "type": "string", "value": "triton"},
                    {"name": "kernel_file", "type": "string", "value": "evil.py"},
                ],
            },
        ],
    }
    evil = f"open({str(sentinel)!r}, 'w').write('executed')\n".encode()
    path = tmp_path / "evil_et.json.tar.gz"
    with tarfile.open(path, "w:gz") as tf:
        for name, data in (("evil_et.json", json.dumps(et).encode()), ("pt2_et_resources/evil.py", evil)):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return path


def test_trace_code_is_never_executed_without_opt_in(tmp_path, cache_dir, shared_traces):
    sentinel = tmp_path / "SENTINEL"
    before = set(sys.modules)
    trace = T.load(_evil_tarball(tmp_path, sentinel))
    res = replay(trace, config=ReplayConfig(warmup=0, iters=1, metrics=False))
    assert res.coverage["by_reason"] == {TRACE_CODE_REASON: 1}
    pt2 = T.load(shared_traces / "param_pt2" / "pt2_et.json.tar.gz")
    res2 = replay(pt2, config=ReplayConfig(warmup=0, iters=1, metrics=False))
    assert res2.coverage["by_reason"] == {TRACE_CODE_REASON: 2}
    assert res2.coverage["replayed_compute"] == res2.coverage["selected_compute"] == 2  # the two aten::mm
    assert not sentinel.exists()
    new = set(sys.modules) - before
    assert not [m for m in new if "evil" in m or "pt2_et_resources" in m or m.startswith(("cm742", "cth3n"))]


def test_profile_writes_kineto_trace_labelled_with_et_ids(tmp_path, cache_dir):
    path = _write_et(tmp_path / "p_et.json.gz", [_add(10, _t(1, 1, 16, [16]), _t(2, 2, 16, [16]), _t(3, 3, 16, [16]))])
    res = replay(
        T.load(path), config=ReplayConfig(warmup=0, iters=1, profile=True, out_dir=tmp_path / "o", metrics=False)
    )
    doc = json.loads(gzip.decompress(Path(res.kineto_path).read_bytes()))
    names = {e.get("name") for e in doc["traceEvents"]}
    assert "et:10:aten::add" in names


def test_config_validation():
    with pytest.raises(TraceError, match="device"):
        ReplayConfig(device="tpu")
    with pytest.raises(TraceError, match="iters"):
        ReplayConfig(iters=0)
    with pytest.raises(TraceError, match="mode"):
        ReplayConfig(mode="middle")
    assert isinstance(ReplayResult(iteration_ms=[1.0, 3.0], per_op=[], coverage={}, device="cpu").median_ms, float)


def test_replay_json_round_trips_through_from_json(tmp_path, cache_dir):
    """`ReplayResult.from_json` is the inverse of `to_json` on a real replay of a sample capture,
    and `read` of the written file gives the same result back (statuses as OpStatus)."""
    from engine.replay import OpStatus

    mlp = ROOT / "sample_traces" / "mlp"
    res = replay(
        T.load(mlp / "mlp_et.json.gz", mlp / "mlp_kineto.json.gz"),
        config=ReplayConfig(warmup=0, iters=2, metrics=True, num_threads=1),
    )
    doc = res.to_json()
    back = ReplayResult.from_json(doc)
    assert back.to_json() == doc and back == res
    assert {p["status"] for p in back.per_op} <= set(OpStatus)
    assert all(isinstance(p["status"], OpStatus) for p in back.per_op)
    assert back.coverage["replayed"] == sum(p["status"] != OpStatus.SKIPPED for p in back.per_op) > 50
    path = res.write(tmp_path / "out")
    read = ReplayResult.read(path)
    assert read.to_json() == res.to_json() and read.median_ms == res.median_ms


@pytest.mark.parametrize(
    "doc, message",
    [
        ([], "must be a JSON object"),
        ({"median_ms": 1.0}, "lacks iteration_ms, per_op, coverage"),
        ({"iteration_ms": [1.0], "median_ms": 1.0, "per_op": [None], "coverage": {}}, r"per_op\[0\] is null"),
        ({"iteration_ms": [1.0], "median_ms": 1.0, "per_op": [{"op_id": 1}], "coverage": {}}, "lacks name, dur_us"),
        (
            {
                "iteration_ms": [1.0],
                "median_ms": 1.0,
                "coverage": {},
                "per_op": [{"op_id": 1, "name": "a", "dur_us": 1.0, "status": "lost"}],
            },
            "malformed per_op row",
        ),
        ({"iteration_ms": ["x"], "median_ms": 1.0, "per_op": [], "coverage": {}}, "numbers only"),
    ],
)
def test_from_json_refuses_malformed_results_with_one_line(doc, message):
    with pytest.raises(TraceError, match=message):
        ReplayResult.from_json(doc, "r/replay.json")


def test_cli_exit_code_2_on_bad_files(tmp_path, capsys, cache_dir, monkeypatch):
    from engine.cli.main import main

    monkeypatch.chdir(tmp_path)  # runs without --out default to ./replay_out/<name>: never the checkout

    assert main(["replay", str(tmp_path / "missing_et.json.gz")]) == 2
    junk = tmp_path / "junk_et.json.gz"
    junk.write_bytes(b"\x1f\x8b not really gzip")
    assert main(["replay", str(junk)]) == 2
    err = capsys.readouterr().err
    assert "mystique replay: error:" in err and "Traceback" not in err


def test_cli_replays_and_writes_json(tmp_path, capsys, bad_trace):
    from engine.cli.main import main

    out = tmp_path / "out"
    assert main(["replay", str(bad_trace), "--iters", "1", "--warmup", "0", "--out", str(out), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["coverage"]["replayed"] == 2 and doc["coverage"]["skipped"] == 3
    assert Path(doc["paths"]["replay_json"]).is_file() and Path(doc["paths"]["kineto"]).is_file()
    assert doc["device"] == "cpu" and len(doc["iteration_ms"]) == 1


def test_cli_exported_benchmark_folder_replays_each_rank_sequentially(tmp_path, capsys, cache_dir, monkeypatch):
    monkeypatch.chdir(tmp_path)  # runs without --out default to ./replay_out/<name>: never the checkout
    from engine.cli.main import main

    bench = tmp_path / "bench"
    bench.mkdir()
    for r in (0, 1):
        gz = _write_et(
            tmp_path / f"r{r}_et.json.gz", [_add(10 + r, _t(1, 1, 16, [16]), _t(2, 2, 16, [16]), _t(3, 3, 16, [16]))]
        )
        (bench / f"rank_{r}.et.json").write_bytes(gzip.decompress(gz.read_bytes()))
    (bench / "spec.json").write_text(json.dumps({"name": "bench", "ranks": [0, 1]}))
    from engine.compose.marker import MARKER, marker_doc

    # an exported folder is replayed only with its completion marker (written last by export)
    (bench / MARKER).write_text(json.dumps(marker_doc(2, {r: bench / f"rank_{r}.et.json" for r in (0, 1)}, [])))
    out = tmp_path / "out"
    assert (
        main(
            [
                "replay",
                str(bench),
                "--sequential",
                "--iters",
                "1",
                "--warmup",
                "0",
                "--out",
                str(out),
                "--json",
                "--no-profile",
            ]
        )
        == 0
    )
    doc = json.loads(capsys.readouterr().out)
    assert sorted(doc["ranks"]) == ["0", "1"]
    assert all(v["coverage"]["replayed"] == 1 for v in doc["ranks"].values())
    assert (out / "rank_1" / "replay.json").is_file()
    assert (
        main(
            [
                "replay",
                str(bench),
                "--rank",
                "1",
                "--iters",
                "1",
                "--warmup",
                "0",
                "--out",
                str(out / "one"),
                "--json",
                "--no-profile",
            ]
        )
        == 0
    )
    one = json.loads(capsys.readouterr().out)
    assert one["rank"] == 1 and one["coverage"]["selected"] == 1
    assert main(["replay", str(bench), "--rank", "5"]) == 2


def test_cli_kineto_only_trace_is_a_clear_error(shared_traces, capsys, cache_dir, tmp_path, monkeypatch):
    from engine.cli.main import main

    monkeypatch.chdir(tmp_path)  # runs without --out default to ./replay_out/<name>: never the checkout

    path = shared_traces / "hta_event_sync" / "event_sync_trace.json.gz"
    assert main(["replay", str(path)]) == 2
    err = capsys.readouterr().err
    # Kineto-only: replay synthesizes an ET first (engine/compose/synth.py); without shapes it cannot
    assert "event_sync_trace.json.gz" in err and "recorded without shapes" in err
    assert len(err.strip().splitlines()) == 1
