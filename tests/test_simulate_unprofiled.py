"""The `unprofiled` what-if edit against ground truth captured on an H200.

sample_traces/h200_pairs/ holds seven captures made by benchmarks' GPU code on an NVIDIA H200
(torch 2.11, 3 profiled steps each; the meta's `median_ms` is the same step timed without the
profiler): a base and its changed model captured as the truth (mlp batch x2, transformer batch
x2, transformer layers x2), and one MLP at batch 16 and 16384. Profiled, the transformer's host
took 47.4 ms per simulated step against 29.4 ms unprofiled, so predictions from the raw trace
were 18-70 % high (docs/gpu_run.md).

The truths here are independent of the simulator: the changed model's own unprofiled step, and
for "GPU 2x faster" the physical bounds (a step can not get faster than 2x; a step whose GPU is
idle 97 % of the time hardly moves).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import engine.trace as T
from engine.simulate import simulate
from engine.simulate.whatif import SpecError, WhatIfSpec

PAIRS = Path(__file__).resolve().parents[1] / "sample_traces" / "h200_pairs"


def _capture(label: str):
    folder = PAIRS / label
    meta = json.loads(next(folder.glob("*_meta.json")).read_text())
    return T.load(next(folder.glob("*_kineto.json.gz")), use_cache=False), float(meta["median_ms"])


def _spec(*edits):
    return {"version": 1, "edits": list(edits)}


CHANGES = {
    "mlp_batch_x2": ("mlp", {"kind": "batch", "scale": 2.0, "size": 1536}),
    "transformer_batch_x2": ("transformer", {"kind": "batch", "scale": 2.0, "size": 6, "multiples": [512]}),
    "transformer_layers_x2": ("transformer", {"kind": "layers", "module": r"blocks\.\d+", "copies": 1}),
}


@pytest.mark.parametrize("changed", sorted(CHANGES))
def test_predictions_from_the_unprofiled_base_meet_the_captured_truth(changed):
    base_label, edit = CHANGES[changed]
    base, base_ms = _capture(base_label)
    _, truth_ms = _capture(changed)  # the changed model, captured and timed without the profiler
    res = simulate(base, _spec({"kind": "unprofiled", "step_ms": base_ms}, edit))
    assert res.predicted_iteration_ms == pytest.approx(truth_ms, rel=0.10)
    rep = res.extra["unprofiled"]
    assert 0.02 <= rep["host_factor"] < 1.0  # the profiled host was slower than the unprofiled one
    assert rep["calibrated_step_ms"] == pytest.approx(base_ms, rel=1e-3)


def test_gpu_2x_faster_moves_the_gpu_bound_step_and_not_the_host_bound_one():
    gpu2 = {"kind": "speedup", "category": "gpu", "factor": 2.0}
    ratios = {}
    for label in ("bound_small", "bound_large"):
        tr, ms = _capture(label)
        unprof = {"kind": "unprofiled", "step_ms": ms}
        ratios[label] = simulate(tr, _spec(unprof, gpu2)).predicted_iteration_ms / ms
    assert ratios["bound_small"] >= 0.95  # batch 16: the GPU is idle ~97 % of the step
    assert 0.5 <= ratios["bound_large"] <= 0.6  # batch 16384: kernels fill the step; 2x is the limit


def test_a_step_already_at_or_below_the_target_keeps_its_host_and_says_so():
    tr, _ = _capture("bound_large")
    plain = simulate(tr).predicted_iteration_ms
    res = simulate(tr, _spec({"kind": "unprofiled", "step_ms": plain * 1.5}))
    assert res.extra["unprofiled"]["host_factor"] == 1.0
    assert res.predicted_iteration_ms == pytest.approx(plain)
    assert any("left as recorded" in w for w in res.warnings)


def test_a_target_below_the_gpu_work_is_refused_softly_with_a_warning():
    tr, _ = _capture("bound_large")  # ~8 ms of kernels per step
    res = simulate(tr, _spec({"kind": "unprofiled", "step_ms": 1.0}))
    assert any("GPU work and waits alone take longer" in w for w in res.warnings)
    assert res.predicted_iteration_ms > 1.0


def test_a_non_positive_step_is_a_spec_error_naming_the_field():
    with pytest.raises(SpecError, match=r"edits\[0\]\.step_ms"):
        WhatIfSpec.parse(_spec({"kind": "unprofiled", "step_ms": 0}))
