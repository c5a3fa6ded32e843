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


def test_tp2_refuses_an_all_to_all_that_a_weight_split_would_change(cache_dir):
    """dlrm_a2a's pooled-embedding gradient is [512, 128], the recorded shape of a split top-MLP
    weight too: TP 2 refuses in one line naming the all_to_all instead of exporting ranks whose
    exchange sizes differ (gloo: 'in->size == out->size' at replay)."""
    from engine.compose import compose, spec_from_dict
    from engine.errors import TraceError

    src = ROOT / "sample_traces" / "dlrm_a2a" / "dlrm_a2a_rank0_et.json.gz"
    spec = {"version": 1, "sources": [str(src)], "segments": [{"selection": {}}], "device": "cpu"}
    with pytest.raises(TraceError, match=r"all_to_all at node \d+ \(c10d::alltoall_base_\) from \[\[512, 128\]") as e:
        compose(spec_from_dict({**spec, "sharding": {"kind": "tp", "degree": 2}}))
    assert "\n" not in str(e.value)
