"""FBGEMM TBE ops of the committed dlrm_tbe sample: rebuilt with the `dlrm` extra, substituted by
torch ops (and counted so) without it."""

from __future__ import annotations

import sys

import pytest
from conftest import SAMPLES

import engine.trace as T
from engine.replay import ReplayConfig, replay

TBE_OPS = {
    "fbgemm::bounds_check_indices",
    "fbgemm::split_embedding_codegen_lookup_sgd_function_pt2",
    "fbgemm::split_embedding_backward_codegen_sgd_unweighted_pt2_wrapper",
}


def _trace():
    d = SAMPLES / "dlrm_tbe"
    return T.load(d / "dlrm_tbe_rank0_et.json.gz", d / "dlrm_tbe_rank0_kineto.json.gz")


def test_without_fbgemm_the_tbe_is_substituted_and_counted(monkeypatch, cache_dir):
    """Was: skipped naming the package. Issue 31 item 19: a TBE without FBGEMM runs as torch
    stand-ins (engine.replay.custom), each counted as substituted, naming the package."""
    monkeypatch.setitem(sys.modules, "fbgemm_gpu", None)  # import fbgemm_gpu -> ImportError
    res = replay(_trace(), config=ReplayConfig(warmup=0, iters=1, metrics=False))
    status = {p["name"]: p["status"] for p in res.per_op if p["name"].startswith("fbgemm::")}
    assert status == dict.fromkeys(TBE_OPS, "substituted")
    assert res.coverage["substituted"] == len(TBE_OPS)
    assert {k.split(" -> ")[0] for k in res.coverage["by_substitution"]} == TBE_OPS
    assert all("fbgemm_gpu not installed" in k for k in res.coverage["by_substitution"])
    assert set(res.coverage["by_reason"]) == {"collective (single-process replay)"}


@pytest.mark.perf  # bounds the rebuilt lookup's measured time
def test_with_fbgemm_the_tbe_is_rebuilt_and_runs(cache_dir):
    pytest.importorskip("fbgemm_gpu", reason="the dlrm extra (fbgemm-gpu-cpu==1.8.0) is not installed")
    trace = _trace()
    res = replay(trace, config=ReplayConfig(warmup=1, iters=2, metrics=False))
    status = {p["name"]: p["status"] for p in res.per_op if p["name"].startswith("fbgemm::")}
    assert status == dict.fromkeys(TBE_OPS, "replayed")
    # only the collectives (single process here) are skipped: compute coverage is complete
    assert set(res.coverage["by_reason"]) == {"collective (single-process replay)"}
    assert res.coverage["compute_rate"] == 1.0
    # the rebuilt lookup costs what the recorded one did, within an order of magnitude
    ops = trace.ops.set_index("name")
    rec_us = float(ops.loc["fbgemm::split_embedding_codegen_lookup_sgd_function_pt2", "k_dur_us"])
    rep_us = next(p["dur_us"] for p in res.per_op if p["name"].endswith("lookup_sgd_function_pt2"))
    assert rec_us / 10 < rep_us < rec_us * 10, (rec_us, rep_us)


def test_bf16_composition_of_the_tbe_model_replays_every_compute_op(tmp_path, cache_dir):
    """Was: the rebuilt TBE always made fp32 pooled embeddings, so after a bf16 composition of the
    whole DLRM step the interaction bmm and the top MLP met fp32 and bf16 operands and failed at
    run time (FBGEMM's CPU kernels have no bf16: the lookup runs in fp32, its output is cast)."""
    pytest.importorskip("fbgemm_gpu", reason="the dlrm extra (fbgemm-gpu-cpu==1.8.0) is not installed")
    from engine.compose import compose, export, spec_from_dict

    src = SAMPLES / "dlrm_tbe" / "dlrm_tbe_rank0_et.json.gz"
    export(compose(spec_from_dict({"sources": [str(src)], "segments": [{"selection": {}}], "dtype": "bf16"})), tmp_path)
    res = replay(T.load(tmp_path / "rank_0.et.json"), config=ReplayConfig(warmup=0, iters=1, metrics=False))
    assert set(res.coverage["by_reason"]) == {"collective (single-process replay)"}, res.skipped_ops[:3]
    assert res.coverage["compute_rate"] == 1.0
