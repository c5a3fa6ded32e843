"""A trace that ran on an accelerator keeps its host tensors on the CPU when replayed on one
(engine/replay/placement.py). Found in an H200 run's figures (issue 33): the transformer replayed
12-17 % over the original with the very same kernels; its Adam step counters, recorded on the
CPU, were moved to the GPU, where each `.item()` drains the GPU queue (the likely cause). The `meta` device stands in
for the GPU here: placement is decided before any kernel runs."""

from __future__ import annotations

import gzip
import json

import pytest
import torch
from clirun import MLP_ET
from crafted_et import _Builder

import engine.trace as T
from engine.graph import replay_ops
from engine.replay.placement import Placement
from engine.replay.plan import build_plan
from engine.replay.tensors import StorageManager


def _devices_in_raw_json(path) -> dict[tuple[int, int], set[str]]:
    """(tensor_id, storage_id) -> the devices recorded for it, from the ET's raw JSON (not
    through our loader)."""
    out: dict[tuple[int, int], set[str]] = {}

    def walk(v):
        if isinstance(v, list) and len(v) == 6 and all(isinstance(x, int) for x in v[:5]) and isinstance(v[5], str):
            out.setdefault((v[0], v[1]), set()).add(v[5])
        elif isinstance(v, list):
            for x in v:
                walk(x)

    for n in json.loads(gzip.decompress(path.read_bytes()))["nodes"]:
        for io in ("inputs", "outputs"):
            if isinstance(n.get(io), dict):
                walk(n[io].get("values", []))
    return out


def _materialized(trace, device: str):
    plan = build_plan(trace.ops, replay_ops(trace, "top"), device=device, allow_trace_code=False)
    store = StorageManager(device=device, placement=plan.placement)
    gen = torch.Generator().manual_seed(0)
    return plan, {
        (e.rec.tensor_id, e.rec.storage_id): store.materialize(e, gen).device.type for e in plan.externals.values()
    }


@pytest.mark.slow
def test_a_cuda_traces_host_tensors_stay_on_the_cpu(shared_traces, cache_dir):
    """param_resnet (a CUDA ET): 651 tensor records on the CPU among 32,547 on cuda:0. Every
    external input lands where the raw JSON says it was: the CPU ones on the CPU, the rest on
    the replay's device."""
    et = shared_traces / "param_resnet" / "resnet_et.json.gz"
    raw = _devices_in_raw_json(et)
    plan, placed = _materialized(T.load(et), "meta")
    assert plan.placement == Placement(target="meta", keep_host=True)
    on_cpu = {tid for tid, dev in placed.items() if dev == "cpu"}
    assert on_cpu and on_cpu == {k for k in placed if raw.get(k) == {"cpu"}}
    assert all(placed[k] == "meta" for k in placed if raw.get(k) == {"cuda:0"})
    assert len(placed) - len(on_cpu) > 100  # the model's weights and activations: on the device


def test_a_cpu_trace_moves_wholly_to_the_replays_device(cache_dir):
    """A trace recorded on the CPU only (our mlp sample): "cpu" is where the job ran, so a GPU
    replay puts every tensor on the GPU, as before."""
    assert set().union(*_devices_in_raw_json(MLP_ET).values()) == {"cpu", ""}  # "": an undefined tensor
    plan, placed = _materialized(T.load(MLP_ET), "meta")
    assert plan.placement == Placement(target="meta", keep_host=False)
    assert placed and set(placed.values()) == {"meta"}
    plan, placed = _materialized(T.load(MLP_ET), "cpu")
    assert set(placed.values()) == {"cpu"} and not plan.placement.keep_host


@pytest.mark.parametrize("recorded, expected", [("cpu", "cpu"), ("cuda:0", "meta")])
def test_a_recorded_device_argument_follows_the_same_rule(tmp_path, cache_dir, recorded, expected):
    """`x.to("cpu")` in a CUDA trace stays a copy to the host; `empty(..., device="cuda:0")`
    goes to the replay's device. Built from the mlp sample with its tensors marked cuda:0."""
    b = _Builder()
    for n in b.doc["nodes"]:
        for io in ("inputs", "outputs"):
            for v in n.get(io, {}).get("values", []):
                if isinstance(v, list) and len(v) == 6 and v[5] == "cpu":
                    v[5] = "cuda:0"
    src = b.tensor()
    src[5] = "cuda:0"
    none = ("<None>", "None", [], [])
    op = b.add(
        "aten::_to_copy",
        "aten::_to_copy(Tensor self, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, "
        "bool? pin_memory=None, bool non_blocking=False, MemoryFormat? memory_format=None) -> Tensor",
        [(src, "Tensor(float)", [16], [1]), none, none, (recorded, "Device", [], []), none,
         (False, "Bool", [], []), none],
        [(b.tensor(), "Tensor(float)", [16], [1])],
        hostile=False,
    )  # fmt: skip
    host_op = b.add(  # an op on host tensors only, in the same GPU job
        "aten::mul",
        "aten::mul.Tensor(Tensor self, Tensor other) -> Tensor",
        [(b.tensor(), "Tensor(float)", [16], [1]), (b.tensor(), "Tensor(float)", [16], [1])],
        [(b.tensor(), "Tensor(float)", [16], [1])],
        hostile=False,
    )
    et = tmp_path / "cuda_et.json.gz"
    et.write_bytes(gzip.compress(json.dumps(b.doc).encode()))
    trace = T.load(et)
    plan = build_plan(trace.ops, [op], device="meta", allow_trace_code=False)
    (st,) = plan.steps
    assert st.runnable, st.reason
    devices = [x for x in (*st.pos, *st.kw.values()) if isinstance(x, torch.device)]
    assert devices == [torch.device(expected)]
    # selected alone, the host-only op stays on the host: where the job ran decides, not the selection
    plan = build_plan(trace.ops, [host_op], device="meta", allow_trace_code=False)
    assert plan.placement.keep_host and {e.rec.device for e in plan.externals.values()} == {"cpu"}


@pytest.mark.gpu
def test_on_cuda_the_host_tensors_stay_on_the_cpu_and_the_slice_replays(shared_traces, cache_dir):
    """The same rule on a real GPU (the check `benchmarks/gpu_run.py`'s gpu_tests step runs):
    every op of a resnet slice replays, the CPU-recorded inputs live on the CPU and the rest on
    the GPU, and the result says so."""
    from engine.replay import ReplayConfig
    from engine.replay.executor import ReplaySession

    et = shared_traces / "param_resnet" / "resnet_et.json.gz"
    raw = _devices_in_raw_json(et)
    trace = T.load(et)
    ids = [i for i in replay_ops(trace, "top") if "conv" not in str(trace.ops.set_index("id").loc[i, "name"])][:600]
    with ReplaySession(trace, config=ReplayConfig(device="cuda", warmup=1, iters=2, profile=False), op_ids=ids) as s:
        s.run_iteration()
        placed = {(e.rec.tensor_id, e.rec.storage_id): s.env[e.slot] for e in s.plan.externals.values()}
        res = s.finish()
    assert res.config["host_tensors_on_cpu"] is True
    assert res.coverage["compute_rate"] >= 0.99, res.coverage["by_reason"]
    kinds = {k: t.device.type for k, t in placed.items() if isinstance(t, torch.Tensor)}
    assert {k for k, d in kinds.items() if d == "cpu"} == {k for k in kinds if raw.get(k) == {"cpu"}}
    assert any(d == "cuda" for d in kinds.values())
