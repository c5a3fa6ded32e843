"""GPU-shaped traces without a GPU and without ../shared: the project's own captures with the
device side added by `engine.testing.gpu_kineto`, checked against the generator's own counts.

What a CUDA Kineto trace carries and these tests pin: runtime launches linked to kernels by
correlation id, kernels on several streams, memcpy/memset, `cuda_sync` events, an
event-record/stream-wait pair, multi-rank folders, and `External id`-only linking.
"""

from __future__ import annotations

import json
import math

import pytest
from conftest import SAMPLES

from engine.testing import write_gpu_run
from engine.trace import load


@pytest.fixture(scope="module")
def mlp_gpu(tmp_path_factory):
    ((et, kin, truth),) = write_gpu_run(SAMPLES / "mlp", tmp_path_factory.mktemp("mlp_gpu"))
    return et, kin, truth, load(et, kin, use_cache=False)


@pytest.fixture(scope="module")
def ddp_gpu(tmp_path_factory):
    out = tmp_path_factory.mktemp("ddp_gpu")
    written = write_gpu_run(SAMPLES / "ddp", out)
    return out, written, load(out, use_cache=False)


def test_generator_adds_every_kind_of_device_event(mlp_gpu):
    *_, truth, _ = mlp_gpu
    assert truth.kernels > 10 and truth.memcpy > 0 and truth.memset > 0
    assert truth.event_records >= 1 and truth.stream_waits == truth.event_records
    assert truth.runtime == truth.gpu_events + truth.event_records + truth.stream_waits + 1  # + the synchronize
    assert truth.flows == 2 * truth.gpu_events


def test_event_tables_hold_what_was_written(mlp_gpu):
    *_, truth, tr = mlp_gpu
    cats = tr.events["cat"].astype(str).value_counts().to_dict()
    assert cats["kernel"] == truth.kernels
    assert cats["gpu_memcpy"] == truth.memcpy and cats["gpu_memset"] == truth.memset
    assert cats["cuda_runtime"] == truth.runtime and cats["cuda_sync"] == truth.syncs
    kernels = tr.events[tr.events["cat"].astype(str) == "kernel"]
    assert set(kernels["stream"].astype(int)) <= set(truth.streams)
    assert (kernels["device"].astype(int) == truth.device).all()
    assert (tr.flows["cat"].astype(str) == "ac2g").sum() == truth.flows
    assert tr.meta["device_properties"][0]["name"].startswith("Synthetic GPU")


@pytest.mark.parametrize("method", ["rf_id", "external_id"])
def test_linking_attributes_every_gpu_event_to_its_op(tmp_path, method):
    ((et, kin, truth),) = write_gpu_run(SAMPLES / "mlp", tmp_path, link=method)
    tr = load(et, kin, use_cache=False)
    link = tr.meta["link"]
    assert link["method"] == method and link["link_rate"] == 1.0
    assert link["gpu_events"] == truth.gpu_events == link["gpu_events_linked"]
    if method == "external_id":
        assert any("External id" in w for w in tr.meta["warnings"])
    # per op: the GPU time launched under a leaf op is exactly what the generator gave it
    by_rf = tr.ops.set_index("rf_id")["gpu_dur_us"]
    for rf, us in truth.gpu_us_by_rf.items():
        assert by_rf[rf] == pytest.approx(us, abs=1e-6), rf
    # and an op's GPU time includes its descendants': the step root holds all of it
    roots = tr.ops[tr.ops["name"].astype(str).str.startswith("ProfilerStep#")]
    assert roots["gpu_dur_us"].sum() == pytest.approx(truth.gpu_busy_us, rel=1e-9)


def test_gpu_events_name_the_op_that_launched_them(mlp_gpu):
    *_, truth, tr = mlp_gpu
    ev = tr.events
    gpu = ev[ev["cat"].astype(str).isin(["kernel", "gpu_memcpy", "gpu_memset"])]
    rf_of = dict(zip(tr.ops["id"].astype(int), tr.ops["rf_id"].astype(int)))
    got = {}
    for op_id, dur in zip(gpu["op_id"].astype(int), gpu["dur_us"]):
        got[rf_of[op_id]] = round(got.get(rf_of[op_id], 0.0) + float(dur), 3)
    assert got == truth.gpu_us_by_rf


def test_info_json_reports_the_generated_counts(mlp_gpu, capsys):
    from engine.cli.main import main

    et, kin, truth, _ = mlp_gpu
    assert main(["info", "--json", "--no-cache", str(kin)]) == 0
    info = json.loads(capsys.readouterr().out)
    n_flows = truth.flows  # s/f events are events of the file too
    assert info["kind"] == "kineto" and info["kernels"] == truth.kernels
    assert info["rank"] == truth.rank and info["world_size"] == truth.world_size
    added = truth.runtime + truth.gpu_events + truth.syncs + n_flows + 1 + len(truth.streams)  # + name metadata
    raw = json.loads(__import__("gzip").decompress(kin.read_bytes()))
    assert info["events"] == len(raw["traceEvents"]) and added < info["events"]
    assert main(["info", "--json", "--no-cache", str(et), str(kin)]) == 0
    (et_info, _) = json.loads(capsys.readouterr().out)
    assert et_info["link_rate"] == 1.0


def test_multi_rank_folder_loads_as_one_run(ddp_gpu):
    _, written, tr = ddp_gpu
    assert sorted(int(r) for r in tr.ops["rank"].unique()) == [0, 1]
    assert tr.meta["world_size"] == 2
    for r, (_, _, truth) in enumerate(written):
        ev = tr.events[tr.events["rank"] == r]
        assert (ev["cat"].astype(str) == "kernel").sum() == truth.kernels
        names = ev[ev["cat"].astype(str) == "kernel"]["name"].astype(str)
        assert names.str.startswith("ncclDevKernel_AllReduce").sum() == truth.nccl_kernels > 0


def test_replay_plan_takes_streams_from_the_launches(mlp_gpu):
    from collections import Counter

    from engine.graph import replay_ops
    from engine.graph.calltree import descendants
    from engine.replay.plan import build_plan
    from engine.replay.streams import op_streams

    *_, truth, tr = mlp_gpu
    plan = build_plan(tr.ops, replay_ops(tr), device="cpu", allow_trace_code=False)
    streams = op_streams(tr, plan)
    rf_of = dict(zip(tr.ops["id"].astype(int), tr.ops["rf_id"].astype(int)))
    expected = {}
    for st in plan.steps:  # the majority stream of the launches under the step's op (ties: lowest)
        votes = Counter(
            truth.stream_by_rf[rf_of[i]] for i in descendants(tr.ops, [st.op_id]) if rf_of[i] in truth.stream_by_rf
        )
        if votes:
            expected[st.index] = votes.most_common(1)[0][0]
    assert len(expected) > 10
    assert streams == expected


def test_timeline_and_breakdowns_show_the_device_side(mlp_gpu):
    from engine.analysis.selftime import gpu_idle, time_by
    from engine.figures.timeline import lane_table, prepare

    *_, truth, tr = mlp_gpu
    lanes = lane_table(tr.events)
    gpu_lanes = [str(x) for x in lanes["lane"] if str(x).startswith("GPU")]
    assert len(gpu_lanes) >= 2  # two compute streams at least
    idle = gpu_idle(tr.events)
    assert idle["events"].sum() == truth.gpu_events
    assert (idle["busy_us"] <= idle["span_us"] + 1e-9).all()
    k = time_by(tr.events, "kernel")
    assert k["count"].sum() == truth.kernels
    ev = prepare(tr.events)
    assert set(ev["lane"].astype(str)) >= set(gpu_lanes)


def test_simulator_sees_launch_sync_and_event_wait_edges(mlp_gpu):
    from engine.simulate import EdgeKind, build_graph, simulate

    *_, truth, tr = mlp_gpu
    g = build_graph(tr.events)
    counts = g.edge_counts()
    assert counts[EdgeKind.LAUNCH.value] == truth.gpu_events
    ev = tr.events
    waits = ev[ev["name"].astype(str) == "cudaStreamWaitEvent"]["ts_us"].to_numpy()
    gpu = ev[ev["cat"].astype(str).isin(["kernel", "gpu_memcpy", "gpu_memset"])]
    on0 = set(gpu[gpu["stream"].astype(int) == truth.streams[0]]["correlation"].astype(int))
    launches = ev[(ev["cat"].astype(str) == "cuda_runtime") & ev["correlation"].isin(list(on0))]["ts_us"].to_numpy()
    followed = int(sum((launches > w).any() for w in waits))  # a wait orders only later work
    assert len(waits) == truth.stream_waits and followed >= 1
    assert counts[EdgeKind.EVENT_WAIT.value] == followed
    assert counts[EdgeKind.SYNC.value] >= 1
    res = simulate(tr).to_json()
    assert not res["cpu_only"] and res["tasks"] == g.n_tasks
    # with no what-if edit the prediction replays the measured step
    assert res["predicted_iteration_ms"] == pytest.approx(res["measured_iteration_ms"], rel=1e-6)
    assert math.isfinite(res["predicted_iteration_ms"])


def test_two_generated_runs_diff_by_their_kernels(tmp_path):
    from engine.compare import compare_traces

    ((et, kin, _),) = write_gpu_run(SAMPLES / "mlp", tmp_path / "a")
    ((et2, kin2, _),) = write_gpu_run(SAMPLES / "mlp", tmp_path / "b", streams=(3, 4))
    a, b = load(et, kin, use_cache=False), load(et2, kin2, use_cache=False)
    data = compare_traces(a, b, labels=("a", "b")).to_json()
    assert data["kind"] == "traces"
    # the same host run on both sides: equal step times; kernels moved streams but kept their names
    assert data["e2e"]["a_ms"] == pytest.approx(data["e2e"]["b_ms"]) and data["e2e"]["error"] == pytest.approx(0.0)
    by_cat = {r["cat"]: r for r in data["by_category"]}
    assert by_cat["kernel"]["count_a"] == by_cat["kernel"]["count_b"] > 0
    assert by_cat["kernel"]["dur_us_a"] == pytest.approx(by_cat["kernel"]["dur_us_b"])
