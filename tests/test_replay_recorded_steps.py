"""An ET recorded over several profiler steps replays all of them in one iteration.

Found on an H200 (issue 33's GPU run): the mlp capture's ET held 3 `ProfilerStep#N` nodes, its
replay took 28.3 ms per iteration against 9.7 ms per original step, and Compare showed a 192 %
error where the replay was within 1 % per step. The replay now counts the recorded steps it runs
(`steps_per_iteration`) and Compare, the CLI, fidelity and the fleet compare per step; its
profiled iteration labels each recorded step (a trace-vs-trace Compare showed the replay's
kernels "3.00x slower" for the same reason).

The truth is the raw ET: its step nodes counted from the JSON by hand, not by our loader.
"""

from __future__ import annotations

import gzip
import json

import pytest

pytest.importorskip("torch")

from engine.capture.api import capture_sample


@pytest.fixture(scope="module")
def three_steps(tmp_path_factory):
    out = tmp_path_factory.mktemp("mlp3")
    capture_sample(
        "mlp",
        overrides={"widths": [256, 256, 256], "batch": 64},
        out_dir=out,
        name="mlp",
        steps=3,
        warmup=1,
        timing_steps=3,
        threads=1,
    )
    return out


def _raw_step_nodes(et_path) -> int:
    nodes = json.loads(gzip.decompress(et_path.read_bytes()))["nodes"]
    return sum(1 for n in nodes if str(n.get("name", "")).startswith("ProfilerStep#"))


def test_the_replay_counts_the_ets_recorded_steps_and_compares_per_step(three_steps, tmp_path):
    import engine.trace as T
    from engine.compare import compare
    from engine.replay import ReplayConfig, replay
    from engine.replay.result import ReplayResult
    from engine.trace.steps import et_steps

    et = three_steps / "mlp_et.json.gz"
    assert _raw_step_nodes(et) == 3  # hand count from the raw JSON
    trace = T.load(et, three_steps / "mlp_kineto.json.gz", use_cache=False)
    assert len(et_steps(trace.ops)) == 3
    cfg = ReplayConfig(device="cpu", warmup=1, iters=3, num_threads=1, out_dir=tmp_path, profile=True)
    res = replay(trace, config=cfg)
    assert res.steps_per_iteration == 3
    # the replay's own Kineto trace labels each recorded step with the ET's name, so that a
    # trace-vs-trace comparison (and every step reader) sees three steps, not one
    from engine.trace.steps import step_spans

    spans = step_spans(T.load(res.kineto_path, use_cache=False).events)
    assert spans["name"].tolist() == ["ProfilerStep#1", "ProfilerStep#2", "ProfilerStep#3"]
    assert res.median_step_ms == pytest.approx(res.median_ms / 3)
    back = ReplayResult.from_json(json.loads(json.dumps(res.to_json())))
    assert back.steps_per_iteration == 3
    meta = json.loads((three_steps / "mlp_meta.json").read_text())
    e2e = compare(trace, res, original_meta=meta).to_json()["e2e"]
    assert e2e["replay_ms"] == pytest.approx(res.median_step_ms)
    assert e2e["replay_steps_per_iteration"] == 3


def test_a_subgraph_inside_one_step_replays_one_step(three_steps, tmp_path):
    import engine.trace as T
    from engine.replay import ReplayConfig, replay
    from engine.trace.steps import et_steps

    trace = T.load(three_steps / "mlp_et.json.gz", use_cache=False)
    steps = et_steps(trace.ops)
    ops = trace.ops
    parent = dict(zip(ops["id"].astype(int), ops["parent"].astype(int), strict=True))

    def under(i, s):
        while i >= 0 and i in parent:
            if i == s:
                return True
            i = parent[i] if parent[i] != i else -1
        return False

    first = [
        int(i)
        for i, n in zip(ops["id"], ops["name"], strict=True)
        if n.startswith("aten::") and under(int(i), steps[0])
    ]
    assert first and et_steps(ops, first) == [steps[0]]
    res = replay(trace, config=ReplayConfig(device="cpu", warmup=0, iters=1, num_threads=1), op_ids=first)
    assert res.steps_per_iteration == 1


def test_a_malformed_steps_per_iteration_is_one_line(tmp_path):
    from engine.errors import TraceError
    from engine.replay.result import ReplayResult

    doc = {"iteration_ms": [1.0], "median_ms": 1.0, "per_op": [], "coverage": {}, "steps_per_iteration": 0}
    with pytest.raises(TraceError, match="steps_per_iteration"):
        ReplayResult.from_json(doc, tmp_path / "replay.json")
