"""Replay of real traces on CPU: the committed samples and the shared traces of other teams.

Golden expectations come from the traces themselves: every compute op the operator rule
selects must replay (>= 99 %), cuDNN ops recorded on GPU are substituted on CPU and counted,
collectives are skipped with their reason. ResNet is replayed on a cheap slice (no convolution,
tensors <= 1M elements) so this file stays fast; benchmarks/coverage.py runs it whole.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import engine.trace as T
from engine.graph import replay_ops
from engine.replay import ReplayConfig, replay

ROOT = Path(__file__).resolve().parents[1]
QUICK = dict(warmup=0, iters=1, metrics=False)


@pytest.mark.parametrize("model", ["mlp", "cnn", "transformer", "dlrm"])
def test_sample_replays_with_full_compute_coverage(model, cache_dir):
    folder = ROOT / "sample_traces" / model
    if not (folder / f"{model}_et.json.gz").is_file():
        pytest.skip(f"sample capture {model} not present")
    trace = T.load(folder / f"{model}_et.json.gz")
    res = replay(trace, config=ReplayConfig(**QUICK))
    cov = res.coverage
    assert cov["selected"] == len(replay_ops(trace)) and cov["selected"] > 20
    assert cov["compute_rate"] >= 0.99, cov["by_reason"]
    assert cov["replayed"] / cov["selected"] >= 0.99, cov["by_reason"]
    assert res.iteration_ms[0] > 1.0
    meta = json.loads((folder / f"{model}_meta.json").read_text())
    assert res.config["num_threads"] == meta["num_threads"]  # the capture's thread count is reused


def test_linear_replays_every_op(shared_traces, cache_dir):
    trace = T.load(shared_traces / "param_linear" / "linear_et.json.gz")
    res = replay(trace, config=ReplayConfig(**QUICK))
    cov = res.coverage
    # reference replayer (PARAM et_replay, CPU): 319 / 320
    assert (cov["selected"], cov["replayed"], cov["skipped"]) == (320, 320, 0)
    assert cov["selected_compute"] == 215


def test_simple_add_and_chakra(shared_traces, cache_dir):
    add = replay(
        T.load(shared_traces / "hta_simple_add" / "benchmark_simple_add_et.json.gz"), config=ReplayConfig(**QUICK)
    )
    assert add.coverage["replayed"] == add.coverage["selected"] == 10
    ch = replay(T.load(shared_traces / "chakra_1.0.2" / "1.0.2-chakra.0.0.4.json.gz"), config=ReplayConfig(**QUICK))
    assert ch.coverage["compute_rate"] == 1.0 and ch.coverage["selected_compute"] == 20
    assert ch.coverage["by_reason"] == {"collective (single-process replay)": 10}


def _cheap_slice(trace) -> list[int]:
    """Replay ops without convolutions whose tensors all have <= 1M elements."""
    ops = trace.ops.set_index("id")
    keep = []
    for i in replay_ops(trace):
        row = ops.loc[i]
        if "conv" in str(row["name"]):
            continue
        shapes = json.loads(row["inputs"])["shapes"] + json.loads(row["outputs"])["shapes"]
        flat = [s for s in shapes if isinstance(s, list) and s and all(isinstance(x, int) for x in s)]
        big = max((_prod(s) for s in flat), default=0)
        if big <= 1_000_000:
            keep.append(int(i))
    return keep


def _prod(s):
    n = 1
    for x in s:
        n *= x
    return n


@pytest.mark.parametrize(
    "folder,file", [("param_resnet", "resnet_et.json.gz"), ("param_resnet_2gpu", "resnet_2gpu_et.json.gz")]
)
@pytest.mark.slow
def test_resnet_slice_substitutes_cudnn_and_skips_collectives(shared_traces, cache_dir, folder, file):
    trace = T.load(shared_traces / folder / file)
    ids = _cheap_slice(trace)
    names = trace.ops.set_index("id").loc[ids, "name"].astype(str)
    n_bn_bwd = int((names == "aten::cudnn_batch_norm_backward").sum())
    n_comm = int(names.str.startswith(("c10d::", "nccl:", "record_param_comms")).sum())
    assert n_bn_bwd >= 10 and len(ids) > 1500
    res = replay(trace, config=ReplayConfig(**QUICK), op_ids=ids)
    cov = res.coverage
    assert cov["substituted"] == n_bn_bwd  # every cudnn_batch_norm_backward ran via native
    assert cov["compute_rate"] >= 0.99, cov["by_reason"]
    assert cov["by_reason"].get("collective (single-process replay)", 0) == n_comm
    assert cov["skipped"] == n_comm, cov["by_reason"]


def test_stream_assignment_from_linked_kineto(shared_traces, cache_dir):
    from engine.replay.plan import build_plan
    from engine.replay.streams import op_streams

    d = shared_traces / "hta_simple_add"
    trace = T.load(d / "benchmark_simple_add_et.json.gz", d / "benchmark_simple_add_trace.json.gz")
    plan = build_plan(trace.ops, replay_ops(trace), device="cpu", allow_trace_code=False)
    streams = op_streams(trace, plan)
    # the 4 kernels (2x rand... mul/add) ran on stream 7; each maps to the op that launched it
    assert set(streams.values()) == {7}
    launched = {plan.steps[k].name for k in streams}
    assert launched <= {"aten::rand", "aten::mul", "aten::add", "aten::zeros", "aten::to"}
    assert len(streams) == 4


@pytest.mark.gpu
def test_cuda_replay_uses_recorded_streams_and_events(shared_traces, cache_dir):
    import torch

    d = shared_traces / "hta_simple_add"
    trace = T.load(d / "benchmark_simple_add_et.json.gz", d / "benchmark_simple_add_trace.json.gz")
    res = replay(trace, config=ReplayConfig(device="cuda", warmup=1, iters=3, metrics=False))
    assert res.device.startswith("cuda") and res.coverage["replayed"] == 10
    assert res.config["streams"] >= 1 and all(ms > 0 for ms in res.iteration_ms)
    assert torch.cuda.current_stream() == torch.cuda.default_stream()


@pytest.mark.gpu
def test_cuda_resnet_slice_runs_cudnn_natively(shared_traces, cache_dir):
    trace = T.load(shared_traces / "param_resnet" / "resnet_et.json.gz")
    ids = _cheap_slice(trace)[:400]
    res = replay(trace, config=ReplayConfig(device="cuda", **QUICK), op_ids=ids)
    assert res.coverage["substituted"] == 0 and res.coverage["compute_rate"] >= 0.99


def test_host_gaps_reproduce_original_cpu_time_between_ops(cache_dir):
    from engine.replay.executor import ReplaySession, measured_host_gaps

    folder = ROOT / "sample_traces" / "mlp"
    if not (folder / "mlp_kineto.json.gz").is_file():
        pytest.skip("mlp sample capture not present")
    trace = T.load(folder / "mlp_et.json.gz", folder / "mlp_kineto.json.gz")
    cfg = ReplayConfig(warmup=0, iters=1, host_gaps=True, metrics=False)
    with ReplaySession(trace, config=cfg) as s:
        gaps_ms = sum(measured_host_gaps(s.plan)) / 1e6
        ms = s.run_iteration()
        s.finish()
    linked = sum(1 for st in s.plan.steps if st.k_ts_us == st.k_ts_us)
    assert linked == len(s.plan.steps)  # every replayed op is linked to its Kineto cpu_op
    assert 0.1 < gaps_ms < 1000 and ms >= gaps_ms
