"""Phase and module annotation on real traces (engine.trace.phases)."""

from __future__ import annotations

import gzip
import json
import time
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from engine.graph import annotate_phases
from engine.trace import load

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "sample_traces"


@pytest.fixture(scope="module")
def resnet(shared_traces):
    return load(shared_traces / "param_resnet" / "resnet_et.json.gz", use_cache=False)


def _count(trace) -> dict[str, int]:
    return {k: int(v) for k, v in trace.ops["phase"].value_counts().items()}


def test_resnet_phase_counts_golden(resnet):
    # Verified by hand from the raw file: forward = 3 ProfilerStep nodes + the three
    # "## forward ##" subtrees; backward = every node of the autograd thread (tid 2) but its
    # profiler root (7,200) + the three "## backward ##" subtrees (loss + grad seed, 48 nodes);
    # optimizer = "## optimizer ##" subtrees + 3 childless Optimizer.zero_grad nodes; other =
    # the profiler's process/thread roots and "## process_group:init ##".
    assert _count(resnet) == {"forward": 5673, "backward": 7248, "optimizer": 1467, "other": 4}


def test_resnet_phase_of_known_ops(resnet):
    ops = resnet.ops
    by_name = ops.groupby(ops["name"].astype(str))["phase"]

    def phases(name):
        return set(by_name.get_group(name).astype(str))

    assert phases("aten::convolution_backward") == {"backward"}
    assert phases("autograd::engine::evaluate_function: ConvolutionBackward0") == {"backward"}
    assert phases("aten::_foreach_add_") == {"optimizer"}
    assert phases("Optimizer.zero_grad#SGD.zero_grad") == {"optimizer"}
    assert phases("aten::cudnn_convolution") == {"forward"}
    # DDP reducer hooks run on the autograd thread outside any evaluate_function node
    assert phases("torch.distributed.ddp.reducer::copy_bucket_to_grad") == {"backward"}
    assert phases("[pytorch|profiler|execution_trace|thread]") == {"other"}


def test_resnet_modules(resnet):
    ops = resnet.ops
    mods = ops["module"].astype(str)
    fw_conv = ops[(ops["name"].astype(str) == "aten::cudnn_convolution")]
    assert set(mods[fw_conv.index]) == {"DistributedDataParallel.forward"}
    # backward ops inherit the module of the forward op that shares their autograd seq_id
    bw_conv = ops[(ops["name"].astype(str) == "aten::convolution_backward")]
    assert set(mods[bw_conv.index]) == {"DistributedDataParallel.forward"}
    wrappers = ops[ops["name"].astype(str) == "autograd::engine::evaluate_function: ConvolutionBackward0"]
    assert set(mods[wrappers.index]) == {"DistributedDataParallel.forward"}
    # optimizer ops are outside every module label
    assert set(mods[ops["phase"].astype(str) == "optimizer"]) == {""}
    # pure phase labels are not modules
    assert "## forward ##" not in set(mods)


def test_param_linear_without_profiler_step(shared_traces):
    # schema 1.0.1, no ProfilerStep: main-thread ops are forward, thread 2 is the autograd thread
    tr = load(shared_traces / "param_linear" / "linear_et.json.gz", use_cache=False)
    ops = tr.ops
    raw = json.loads(gzip.open(shared_traces / "param_linear" / "linear_et.json.gz").read())
    tid2 = {n["id"] for n in raw["nodes"] if n["tid"] == 2 and not n["name"].startswith("[pytorch|")}
    ph = dict(zip(ops["id"].tolist(), ops["phase"].astype(str).tolist()))
    assert {ph[i] for i in tid2} == {"backward"}
    names = ops.set_index("id")["name"].astype(str)
    assert ph[int(names[names == "aten::cross_entropy_loss"].index[0])] == "forward"
    opt = {i for i, n in names.items() if n.startswith("Optimizer.")}
    assert {ph[i] for i in opt} == {"optimizer"}
    assert Counter(ph.values()) == {"backward": 617, "forward": 182, "optimizer": 129, "other": 3}


@pytest.mark.perf
def test_annotate_phases_is_fast(resnet):
    ops = resnet.ops.drop(columns=["phase", "module"])
    annotate_phases(ops)  # warm caches
    best = min(_timed(annotate_phases, ops) for _ in range(3))
    assert best < 0.05, f"annotate_phases took {best * 1e3:.1f} ms on 14,392 nodes"


def _timed(fn, *a):
    t0 = time.perf_counter()
    fn(*a)
    return time.perf_counter() - t0


def test_annotate_phases_matches_loader_and_aligns_index(resnet):
    shuffled = resnet.ops.sample(frac=1.0, random_state=0)
    phase, module = annotate_phases(shuffled)
    assert phase.index.equals(shuffled.index) and module.index.equals(shuffled.index)
    assert (phase.astype(str) == shuffled["phase"].astype(str)).all()
    assert (module.astype(str) == shuffled["module"].astype(str)).all()


def _sample(name):
    et = SAMPLES / name / f"{name}_et.json.gz"
    if not et.exists():
        pytest.skip(f"sample trace {et} not captured yet (run `make samples`)")
    return load(et, use_cache=False)


@pytest.mark.parametrize("name", ["mlp", "cnn", "transformer", "dlrm"])
def test_sample_traces_phases(name):
    tr = _sample(name)
    ops = tr.ops
    names = ops["name"].astype(str)
    phase = ops["phase"].astype(str)
    kids = defaultdict(list)
    for i, p in zip(ops["id"].tolist(), ops["parent"].tolist()):
        kids[p].append(i)
    ph = dict(zip(ops["id"].tolist(), phase.tolist()))

    def subtree(i):
        out, stack = [], [i]
        while stack:
            j = stack.pop()
            out.append(j)
            stack.extend(kids[j])
        return out

    # our captures label the three steps; every node under a label has that label's phase
    # (the loss is computed under "## forward ##" in our captures)
    for label, want in (("## forward ##", "forward"), ("## backward ##", "backward"), ("## optimizer ##", "optimizer")):
        roots = ops["id"][names == label].tolist()
        assert roots, f"{name}: no {label} label"
        for r in roots:
            assert {ph[i] for i in subtree(r)} == {want}, label
    assert (phase[names.str.startswith("autograd::engine::evaluate_function:")] == "backward").all()
    mods = ops["module"].astype(str)
    assert mods[phase == "forward"].str.startswith("nn.Module: ").any()
