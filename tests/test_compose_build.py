"""Composition on the bundled samples: boundaries, loading/validation, repeats, dtype, DP, examples."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import engine.trace as et
from engine.compose import compose, export, load_spec, spec_from_dict, validate_et
from engine.errors import TraceError
from engine.graph import Selection, replay_ops, select

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "sample_traces"
EXAMPLES = ROOT / "examples"


def _build(tmp_path, spec: dict, name: str):
    bench = compose(spec_from_dict(spec))
    res = export(bench, tmp_path / name)
    return bench, {int(r): Path(p) for r, p in res["ranks"].items()}


def _replay(path: Path):
    from engine.replay import ReplayConfig, replay

    return replay(et.load(path, use_cache=False), config=ReplayConfig(warmup=0, iters=1, metrics=False, num_threads=1))


def test_segment_inputs_from_outside_are_synthesized(tmp_path, cache_dir, sample_path):
    mlp = sample_path("mlp")
    bench, paths = _build(
        tmp_path, {"sources": [str(mlp)], "segments": [{"selection": {"module": "nn.Module: body.2"}}]}, "body2"
    )
    # body.2 (the 2nd Linear) reads the [256, 1024] ReLU output produced outside the segment
    loaded = et.load(paths[0], use_cache=False)
    sub = select(loaded, Selection())
    ext = {(tuple(r.shape), str(r.dtype)) for r in sub.external_inputs.itertuples()}
    assert ((256, 1024), "float32") in ext  # the activation from body.1
    assert ((1024, 1024), "float32") in ext  # the weight
    rep = validate_et(paths[0])
    assert rep["external_inputs"] == len(sub.external_inputs) and rep["meta"]["mismatches"] == []
    res = _replay(paths[0])
    assert res.coverage["replayed"] == res.coverage["selected"] == len(bench.replay_ids[0]) > 0
    assert bench.meta["segments"][0]["external_inputs"] >= 3


@pytest.mark.parametrize("example", ["mlp_batch2", "transformer_layer_x4", "dlrm_greedy_4ranks", "mlp_tp2"])
def test_examples_load_validate_and_match_replay_rule(tmp_path, cache_dir, example):
    p = EXAMPLES / f"{example}.json"
    spec = load_spec(p)
    for s in spec.source_paths():
        if not s.exists():
            pytest.skip(f"sample trace {s} missing")
    calls = []
    bench = compose(spec, progress=lambda f, m: calls.append((f, m)))
    assert calls and calls[-1][0] == 1.0 and all(0 <= f <= 1 for f, _ in calls)
    assert [f for f, _ in calls] == sorted(f for f, _ in calls)
    res = export(bench, tmp_path / example)
    assert (tmp_path / example / "spec.json").exists() and (tmp_path / example / "README.md").exists()
    assert "mystique replay" in (tmp_path / example / "README.md").read_text()
    n_ranks = {"dlrm_greedy_4ranks": 4, "mlp_tp2": 2}.get(example, 1)
    assert len(res["ranks"]) == n_ranks
    for r, path in res["ranks"].items():
        doc = json.loads(Path(path).read_text())
        assert doc["schema"] == "1.1.1-chakra.0.0.4"
        assert doc["nodes"][0]["name"] == "[pytorch|profiler|execution_trace|process]"
        ids = [n["id"] for n in doc["nodes"]]
        assert len(ids) == len(set(ids)) and ids == sorted(ids)
        rep = validate_et(path)
        assert rep["problems"] == []
        t = et.load(path, use_cache=False)
        assert len(t.ops) == len(doc["nodes"])
        # the composer's replay marking is the project's replay rule on the exported file
        assert replay_ops(t) == sorted(bench.replay_ids[int(r)])


def test_repeat_chains_layer_outputs_into_inputs(tmp_path, cache_dir, sample_path):
    tx = sample_path("transformer")
    seg = {"selection": {"module": "nn.Module: blocks.0"}, "label": "layer"}
    b1, p1 = _build(tmp_path, {"sources": [str(tx)], "segments": [dict(seg, repeat=1)]}, "k1")
    b4, p4 = _build(tmp_path, {"sources": [str(tx)], "segments": [dict(seg, repeat=4)]}, "k4")
    assert len(b4.replay_ids[0]) == 4 * len(b1.replay_ids[0])
    assert b4.meta["segments"][0]["chained_inputs"] == 1
    e1 = select(et.load(p1[0], use_cache=False), Selection()).external_inputs
    e4 = select(et.load(p4[0], use_cache=False), Selection()).external_inputs
    # weights are shared, the hidden state is chained: no new external inputs per repeat
    assert len(e4) == len(e1)
    # fresh node ids and fresh tensor ids for each repeat's intermediates
    t4 = et.load(p4[0], use_cache=False)
    outs = t4.tensors[t4.tensors["io"].astype(str) == "out"]
    per_op = outs.groupby("tensor_id")["op_id"].nunique()
    assert len(outs["tensor_id"].unique()) > 3.5 * len(
        et.load(p1[0], use_cache=False).tensors.query("io == 'out'")["tensor_id"].unique()
    )
    assert (per_op >= 1).all()


def test_batch_scale_rewrites_shapes_and_sizes(tmp_path, cache_dir, sample_path):
    mlp = sample_path("mlp")
    bench, paths = _build(tmp_path, {"sources": [str(mlp)], "segments": [{"selection": {}}], "batch_scale": 2}, "x2")
    info = bench.meta["transforms"][0]
    assert info["batch"] == 256 and info["new_batch"] == 512 and info["mismatches"] == []
    t = et.load(paths[0], use_cache=False)
    shapes = set(t.tensors["shape"])
    assert (512, 512) in shapes and (256, 512) not in shapes and (512, 1024) in shapes
    assert (1024, 512) in shapes  # weights keep their shape


def test_dtype_bf16_keeps_integer_tensors(tmp_path, cache_dir, sample_path):
    tx = sample_path("transformer")
    _bench, paths = _build(
        tmp_path,
        {"sources": [str(tx)], "segments": [{"selection": {"module": "nn.Module: blocks.0"}}], "dtype": "bf16"},
        "bf16",
    )
    t = et.load(paths[0], use_cache=False)
    dt = set(t.tensors["dtype"].astype(str))
    assert "float32" not in dt and "bfloat16" in dt
    bf = t.tensors[t.tensors["dtype"].astype(str) == "bfloat16"]
    assert (bf["itemsize"] == 2).all()
    orig = et.load(tx)
    assert "int64" in set(orig.tensors["dtype"].astype(str))
    res = _replay(paths[0])
    assert res.coverage["replayed"] == res.coverage["selected"]


def test_data_parallel_halves_batch_and_buckets_gradients(tmp_path, cache_dir, sample_path):
    mlp = sample_path("mlp")
    bench, paths = _build(
        tmp_path,
        {"sources": [str(mlp)], "segments": [{"selection": {}}], "sharding": {"kind": "dp", "degree": 2}},
        "dp2",
    )
    sh = bench.meta["sharding"]
    # 512->1024->1024->1024->512 Linear weights + biases, fp32
    assert sh["grad_bytes"] == 4 * (512 * 1024 + 1024 + 1024 * 1024 + 1024 + 1024 * 1024 + 1024 + 1024 * 512 + 512)
    assert sh["per_rank_batch"] == 128 and len(paths) == 2
    for _r, p in paths.items():
        t = et.load(p, use_cache=False)
        comm = t.ops[t.ops["category"].astype(str) == "communication"]
        assert list(comm["name"].astype(str)) == ["c10d::allreduce_"] * len(sh["buckets"])
        assert (128, 512) in set(t.tensors["shape"]) and (256, 512) not in set(t.tensors["shape"])
        assert t.meta.get("world_size") in (2, None)
    res = _replay(paths[1])
    assert res.coverage["by_reason"] == {"collective (single-process replay)": len(sh["buckets"])}


def test_dp_degree_must_divide_batch(cache_dir, sample_path):
    with pytest.raises(TraceError, match="dp degree 3 does not divide the batch 256"):
        compose(
            spec_from_dict(
                {
                    "sources": [str(sample_path("mlp"))],
                    "segments": [{"selection": {}}],
                    "sharding": {"kind": "dp", "degree": 3},
                }
            )
        )


@pytest.mark.slow
def test_cli_json_and_standalone_script(tmp_path, capsys, cache_dir):
    import subprocess
    import sys

    from engine.cli.main import main as cli

    if not (SAMPLES / "mlp" / "mlp_et.json.gz").exists():
        pytest.skip("sample trace mlp missing")
    out = tmp_path / "bench"
    rc = cli(["compose", str(EXAMPLES / "mlp_batch2.json"), "--out", str(out), "--json", "--script"])
    assert rc == 0
    doc = json.loads(capsys.readouterr().out)
    r0 = doc["summary"]["ranks"]["0"]
    assert r0["replay_ops"] == 56 and r0["external_inputs"] > 0 and r0["estimated_memory_bytes"] > 0
    assert doc["validation"]["0"]["ok"] and doc["command"] == f"mystique replay {out}"
    # the script runs with torch only: -I keeps the repo (and engine) off sys.path
    proc = subprocess.run(
        [sys.executable, "-I", doc["script"], "--iters", "1", "--warmup", "0"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    assert res["ops"] == res["ran"] == 56 and res["median_ms"] > 0
