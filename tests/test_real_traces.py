"""The knob matrix on real traces (benchmarks/real_traces.py) and the fixes it drove.

Golden values are read from the shared traces themselves (../shared/traces; skipped without it).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SPEC = {"version": 1, "edits": [{"kind": "batch", "scale": 2.0}]}


@pytest.mark.slow
def test_kineto_only_batch_whatif_on_a_module_annotated_gpu_trace(shared_traces):
    """TimeSformer on H100, Kineto only: the batch (8, the leading dim of its recorded activations)
    is inferred from Input Dims, and batch x2 lengthens the predicted step."""
    from engine.simulate import simulate
    from engine.trace import load

    tr = load(shared_traces / "tracelens_timesformer" / "h100_timesformer.json.gz")
    base = simulate(tr).predicted_iteration_ms
    r = simulate(tr, SPEC)
    rep = r.extra["batch"][0]
    assert rep == {**rep, "size": 8, "inferred": True, "shapes_from": "Kineto Input Dims"}
    assert rep["tasks_rescaled"] > 100
    assert r.predicted_iteration_ms > 1.05 * base
    lay = simulate(tr, {"version": 1, "edits": [{"kind": "layers", "copies": 1}]})
    assert lay.predicted_iteration_ms > base


def test_kineto_without_shapes_refuses_in_one_line(shared_traces):
    from engine.simulate import simulate
    from engine.simulate.whatif import SpecError
    from engine.trace import load

    tr = load(shared_traces / "hta_alexnet" / "benchmark_result_2869224_1695835535_trace.json.gz")
    with pytest.raises(SpecError, match="record_shapes") as e:
        simulate(tr, SPEC)
    assert "\\n" not in str(e.value)


@pytest.mark.slow
def test_matrix_script_no_error_no_wrong(shared_traces, tmp_path):
    """The matrix on two small traces (a Kineto+ET pair and a Kineto-only GPU trace), compose
    without replay: every case is ok or a refusal the rules accept."""
    out = tmp_path / "rt.json"
    cmd = [
        sys.executable,
        "benchmarks/real_traces.py",
        "--no-replay",
        "--only",
        "hta_simple_add",
        "tracelens_bert_small",
        "--scratch",
        str(tmp_path / "s"),
        "--out",
        str(out),
    ]
    p = subprocess.run(
        cmd,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
    )
    doc = json.loads(out.read_text())
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    assert [r["trace"] for r in doc["traces"]] == ["hta_simple_add", "tracelens_bert_small"]
    c = doc["counts"]
    assert c["error"] == 0 and c["wrong"] == 0 and c["refused_bad"] == 0
    assert c["ok"] >= 6  # what-ifs on both, batch from Input Dims on BERT included
    bert = doc["traces"][1]["cases"]
    assert bert["wi_batch_x2"]["outcome"] == "ok" and bert["batch_x2"]["outcome"] == "refused_ok"


def test_dp2_of_variable_length_lookups_rounds_the_indices(cache_dir):
    """DP 2 of the sample DLRM (batch 1024, variable-length bags): each rank's lookups are half of
    the recorded ones, rounded (20821 sorted indices -> 10410), not a refusal."""
    from engine.compose import compose, spec_from_dict
    from engine.trace import load

    src = ROOT / "sample_traces" / "dlrm" / "dlrm_et.json.gz"
    tr = load(src)
    sort = tr.ops[tr.ops["name"].astype(str) == "aten::sort"]["id"].tolist()
    rec = tr.tensors[tr.tensors["op_id"].isin(sort) & (tr.tensors["io"].astype(str) == "out")]
    n = max(int(s[0]) for s in rec["shape"])
    assert n % 2 == 1  # an odd count: no exact half
    spec = {"version": 1, "sources": [str(src)], "segments": [{"selection": {}}], "device": "cpu"}
    bench = compose(spec_from_dict({**spec, "sharding": {"kind": "dp", "degree": 2}}))
    assert bench.world_size == 2
    dims: set[int] = set()

    def walk(x) -> None:
        if isinstance(x, list):
            for y in x:
                walk(y)
        elif isinstance(x, int):
            dims.add(x)

    for nd in bench.ranks[0]:
        walk(nd.get("inputs", {}).get("shapes"))
        walk(nd.get("outputs", {}).get("shapes"))
    assert n not in dims and {n // 2, n // 2 + 1} & dims


def test_tp2_of_a_ddp_trace_splits_the_gradient_bucket_views(cache_dir):
    """TP 2 of the DDP sample (MLP 256 -> 512 -> ... under DistributedDataParallel): DDP copies each
    parameter's slice of the flat gradient bucket (an as_strided view) into its gradient; the slice
    follows the split gradient instead of refusing 'breaks shape at aten::copy_'."""
    from engine.compose import compose, spec_from_dict

    src = ROOT / "sample_traces" / "ddp" / "ddp_rank0_et.json.gz"
    spec = {"version": 1, "sources": [str(src)], "segments": [{"selection": {}}], "device": "cpu"}
    bench = compose(spec_from_dict({**spec, "sharding": {"kind": "tp", "degree": 2}}))
    assert bench.world_size == 2
    copies = [nd for nd in bench.ranks[0] if nd["name"] == "aten::copy_"]
    pairs = [nd["inputs"]["shapes"][:2] for nd in copies if len(nd["inputs"]["shapes"]) >= 2]
    assert pairs and all(a == b for a, b in pairs)  # every copy's source matches its destination
    assert [256, 256] in [a for a, _ in pairs]  # the row-parallel weight's gradient, [256, 512] split


@pytest.mark.parametrize("model", ["dlrm_a2a", "dlrm_tbe"])
@pytest.mark.slow
def test_tp2_keeps_the_embedding_all_to_all_and_replays_on_2_ranks(model, tmp_path, capsys, cache_dir):
    """The model-parallel DLRMs return the pooled-embedding gradient through an all_to_all whose
    output buffer aten::empty makes as [512, 128]: the recorded shape of a split top-MLP weight,
    and 512 (the job's batch of bags) a split width. A factory's sizes are no dataflow of the
    split, so the exchange keeps its recorded shapes (it refused 'would change the all_to_all'
    on the old main) and the composition replays on 2 gloo ranks with every op run."""
    from engine.cli.main import main
    from engine.compose import compose, export, spec_from_dict
    from engine.trace import load

    src = ROOT / "sample_traces" / model / f"{model}_rank0_et.json.gz"
    tr = load(src)
    a2a = tr.ops.loc[tr.ops["name"].astype(str) == "c10d::alltoall_base_", "id"].tolist()
    t = tr.tensors[tr.tensors["op_id"].isin(a2a) & (tr.tensors["io"].astype(str) == "in")]
    rec = [list(s) for s in t.sort_values(["op_id", "arg"])["shape"]]
    assert len(a2a) == 2 and [512, 128] in rec  # forward rows out, gradients back
    spec = {"version": 1, "sources": [str(src)], "segments": [{"selection": {}}], "device": "cpu"}
    bench = compose(spec_from_dict({**spec, "sharding": {"kind": "tp", "degree": 2}}))
    sh = bench.meta["sharding"]
    assert bench.world_size == 2 and sh["pairs"] and not sh["meta_check"]["mismatches"]
    res = export(bench, tmp_path / "tp2")
    for p in res["ranks"].values():
        c = load(p, use_cache=False)
        ids = c.ops.loc[c.ops["name"].astype(str) == "c10d::alltoall_base_", "id"].tolist()
        ct = c.tensors[c.tensors["op_id"].isin(ids) & (c.tensors["io"].astype(str) == "in")]
        assert [list(s) for s in ct.sort_values(["op_id", "arg"])["shape"]] == rec
    code = main(
        ["replay", str(tmp_path / "tp2"), "--iters", "1", "--warmup", "0", "--out", str(tmp_path / "r")] + ["--json"]
    )
    doc = json.loads(capsys.readouterr().out)
    assert code == 0 and doc["world_size"] == 2
    cov = doc["coverage"]
    assert cov["replayed"] == cov["selected"] > 0 and cov["comm_replayed"] == cov["comm_selected"] > 0, cov


def test_batch_x2_of_a_pt2_graph_keeps_the_mm_reduction_operand(shared_traces, cache_dir):
    """param_pt2 (torch.compile'd, batch 4): each aten::mm reads the batch and a [4, 4] graph input
    as its reduction operand; no optimizer marks that input a parameter, and its dim 0 equals the
    batch. Batch x2 scales the first operand only ([8, 4] x [4, 4] -> [8, 4]) instead of refusing
    'a and b must have same reduction dim'."""
    from engine.compose import compose, spec_from_dict
    from engine.trace import load

    src = shared_traces / "param_pt2" / "pt2_et.json.tar.gz"
    tr = load(src)
    mm = tr.ops.loc[tr.ops["name"].astype(str) == "aten::mm", "id"].tolist()
    t = tr.tensors[tr.tensors["op_id"].isin(mm)]
    rec = {(int(r.op_id), str(r.io), int(r.arg)): list(r.shape) for r in t.itertuples(index=False)}
    b = rec[(mm[0], "in", 0)][0]
    assert len(mm) == 2 and rec[(mm[0], "in", 1)][0] == b  # the reduction dim equals the batch
    spec = {"version": 1, "sources": [str(src)], "segments": [{"selection": {}}], "device": "cpu"}
    bench = compose(spec_from_dict({**spec, "batch_scale": 2}))
    got = [nd for nd in bench.ranks[0] if nd["name"] == "aten::mm"]
    assert len(got) == len(mm)
    for nd, i in zip(got, mm, strict=True):
        a, w = rec[(i, "in", 0)], rec[(i, "in", 1)]
        assert nd["inputs"]["shapes"][:2] == [[2 * a[0], *a[1:]], w]
        assert nd["outputs"]["shapes"][0] == [2 * a[0], w[1]]
