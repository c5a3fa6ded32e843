"""Issue 22's fleet: generated rank stores (engine.testing.fleet.make_fleet_store) and the fleet
simulator (engine.simulate.fleet) against the whole-table simulator on the same ranks."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from engine.testing.fleet import make_fleet_store
from engine.trace.store.sql import connect

ROOT = Path(__file__).resolve().parents[1]
DDP0 = ROOT / "sample_traces" / "ddp" / "ddp_rank0_kineto.json.gz"


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("MYSTIQUE_CACHE_DIR", str(tmp_path / "cache"))


def _events(store: Path, sql: str = "SELECT * FROM events ORDER BY ev"):
    con = connect(store)
    try:
        return con.execute(sql).df()
    finally:
        con.close()


def test_fleet_store_copies_each_rank_with_its_own_durations(tmp_path):
    import engine.trace as et

    src = et.load(DDP0).events
    store = make_fleet_store(DDP0, 3, tmp_path / "fleet", seed=7)
    ev = _events(store)
    assert sorted(ev["rank"].unique()) == [0, 1, 2]
    assert ev["ev"].tolist() == list(range(3 * len(src)))  # ev offsets: one row id per event
    per = [ev[ev["rank"] == r].reset_index(drop=True) for r in range(3)]
    for e in per:
        assert len(e) == len(src)
        assert e["name"].tolist() == src["name"].astype(str).tolist()
        pos = src["dur_us"].to_numpy() > 0
        ratio = e["dur_us"].to_numpy()[pos] / src["dur_us"].to_numpy()[pos]
        assert ratio.min() >= 0.95 and ratio.max() <= 1.05
        # the backend's collective op keeps its end (members end together), others their start
        comm = e["name"].str.startswith("gloo:").to_numpy()
        end = (src["ts_us"] + src["dur_us"]).to_numpy()
        assert np.allclose((e["ts_us"] + e["dur_us"]).to_numpy()[comm], end[comm], rtol=0, atol=1e-6)
        assert np.array_equal(e["ts_us"].to_numpy()[~comm], src["ts_us"].to_numpy()[~comm])
    assert not np.array_equal(per[0]["dur_us"], per[1]["dur_us"])
    assert not np.array_equal(per[1]["dur_us"], per[2]["dur_us"])
    # the same seed writes the same fleet
    again = _events(make_fleet_store(DDP0, 3, tmp_path / "again", seed=7))
    assert np.array_equal(again["dur_us"].to_numpy(), ev["dur_us"].to_numpy())


def test_fleet_store_tiles_steps_in_time(tmp_path):
    import engine.trace as et

    src = et.load(DDP0).events
    store = make_fleet_store(DDP0, 2, tmp_path / "fleet", seed=0, tiles=3)
    ev = _events(store, "SELECT * FROM events WHERE rank = 1 ORDER BY ev")
    assert len(ev) == 3 * len(src)
    steps = ev[ev["name"].str.startswith("ProfilerStep#")]
    src_steps = src[src["name"].astype(str).str.startswith("ProfilerStep#")]
    assert len(src_steps) == 1 and len(steps) == 3
    assert steps["name"].nunique() == len(steps)  # renumbered per tile
    assert steps["ts_us"].is_monotonic_increasing
    ext = src["external_id"].dropna()
    assert len(ext) > 0 and ev["external_id"].dropna().nunique() == 3 * ext.nunique()  # ids unique per tile


# ---- the fleet simulator against the whole-table simulator ----

SHARED = ROOT.parent / "shared" / "traces"
CONTROL = SHARED / "hta_trace_diff" / "control.json.gz"
DP = {"version": 1, "edits": [{"kind": "data_parallel", "ranks": 1024, "from_ranks": 8, "alpha_us": 5.0}]}


def _old_per_rank(paths, spec=None):
    """Per-rank mean predicted step (ms) of engine.simulate.simulate on the traces loaded whole."""
    import engine.trace as et
    from engine.analysis.steps import step_spans
    from engine.simulate import simulate

    res = simulate(et.load(*paths), spec)
    return step_spans(res.predicted.events).groupby("rank")["dur_us"].mean().to_numpy() / 1000.0, res


def _tasks_of(path) -> int:
    import engine.trace as et
    from engine.simulate import build_graph

    return build_graph(et.load(path).events).n_tasks


def _fleet(paths, spec=None, scheduler="serial"):
    from engine.simulate.fleet import simulate_fleet
    from engine.trace.store import build

    return simulate_fleet(build(*paths, scheduler="serial"), spec, scheduler=scheduler)


@pytest.mark.parametrize("spec", [None, DP], ids=["unchanged", "dp1024"])
@pytest.mark.parametrize("sample", ["ddp", "dlrm_a2a"])
def test_fleet_equals_whole_table_simulator_on_samples(sample, spec):
    folder = ROOT / "sample_traces" / sample
    old, _ = _old_per_rank([folder], spec)
    fr = _fleet([folder], spec)
    assert fr.ranks.tolist() == [0, 1]
    assert fr.collectives > 0
    assert np.allclose(fr.step_ms, old, rtol=1e-9, atol=0)


def test_fleet_equals_whole_table_simulator_on_a_generated_fleet(tmp_path):
    from engine.testing.fleet import make_fleet

    paths = make_fleet(DDP0, tmp_path / "json", 4)
    old, res = _old_per_rank(paths)
    fr = _fleet(paths)
    assert fr.ranks.tolist() == [0, 1, 2, 3]
    assert np.allclose(fr.step_ms, old, rtol=1e-9, atol=0)
    assert fr.tasks == res.graph.n_tasks
    assert fr.predicted_iteration_ms == pytest.approx(old.max(), rel=1e-12)


@pytest.mark.skipif(not CONTROL.exists(), reason="shared traces absent (../shared/traces)")
@pytest.mark.slow
def test_fleet_equals_whole_table_simulator_on_gpu_collectives(tmp_path):
    """3 perturbed copies of a real 8-rank NCCL rank (hta control: 75k events, 60 NCCL kernels)."""
    from engine.testing.fleet import make_fleet

    paths = make_fleet(CONTROL, tmp_path / "json", 3)
    for spec in (None, DP):
        old, res = _old_per_rank(paths, spec)
        fr = _fleet(paths, spec)
        assert np.allclose(fr.step_ms, old, rtol=1e-9, atol=0)
        assert fr.collectives > 30  # NCCL kernels matched across the ranks
    counts = res.graph.edge_counts()
    # O(members): at most 4 (n - 1) edges per matched collective of n = 3 members (each non-hub
    # member's predecessor, launch and event wait forwarded to the hub, the hub's edge to it),
    # not n (n - 1) x 2
    assert 0 < counts["collective"] <= 4 * 2 * fr.collectives


def test_fleet_dp_1024_never_shortens_the_step(tmp_path):
    store = make_fleet_store(DDP0, 4, tmp_path / "fleet", seed=1, tiles=2)
    from engine.simulate.fleet import simulate_fleet

    base = simulate_fleet(store, None, scheduler="serial")
    dp = simulate_fleet(store, {"version": 1, "edits": [{"kind": "data_parallel", "ranks": 1024}]}, scheduler="serial")
    assert base.ranks.tolist() == dp.ranks.tolist() == [0, 1, 2, 3]
    assert base.collectives == dp.collectives > 0
    assert np.all(dp.step_ms >= base.step_ms)
    assert dp.predicted_iteration_ms > base.predicted_iteration_ms
    assert dp.report["dp"]["from_ranks"] == 4 and dp.report["dp"]["ranks"] == 1024
    assert len(set(np.round(base.step_ms, 6))) == 4  # perturbed: no two ranks alike
    assert base.tasks == 4 * 2 * _tasks_of(DDP0)


@pytest.mark.slow
def test_fleet_same_answer_serially_and_on_a_local_cluster(tmp_path):
    from engine.simulate.fleet import simulate_fleet

    store = make_fleet_store(DDP0, 3, tmp_path / "fleet", seed=3)
    a = simulate_fleet(store, None, scheduler="serial")
    b = simulate_fleet(store, None, scheduler="local")
    assert np.array_equal(a.step_ms, b.step_ms)
    assert np.array_equal(a.wait_ms, b.wait_ms)
    assert a.tasks == b.tasks and a.collectives == b.collectives


def test_fleet_refuses_what_cannot_fit_in_one_line(tmp_path, monkeypatch):
    from engine.errors import TraceError
    from engine.simulate.fleet.api import POINT_BYTES, check_memory
    from engine.simulate.fleet.program import RankJob, build_program

    store = make_fleet_store(DDP0, 2, tmp_path / "fleet", seed=0)
    done = [
        build_program(RankJob(store=store, rank=r, out=tmp_path / f"r{r}.npz", spec=None, config=None, world_size=2))
        for r in (0, 1)
    ]
    points = sum(d["points"] + d["collectives"] for d in done)
    monkeypatch.setenv("MYSTIQUE_SIM_MAX_BYTES", str(points * POINT_BYTES))  # the points fit, the edges do not
    with pytest.raises(TraceError) as exc:
        check_memory(done)
    msg = str(exc.value)
    assert "\n" not in msg and "GiB" in msg and f"{points:,} points" in msg and "over 2 ranks" in msg
    monkeypatch.setenv("MYSTIQUE_SIM_MAX_BYTES", str(1 << 30))
    check_memory(done)  # fits: no error


@pytest.mark.slow
def test_cli_simulates_a_store_folder(tmp_path):
    import json

    from clirun import cli

    store = make_fleet_store(DDP0, 3, tmp_path / "fleet", seed=2)
    run = ["simulate", str(store), "--scheduler", "serial"]
    p = cli(*run, "--json", cache=None, timeout=120)
    assert p.returncode == 0, p.stderr
    data = json.loads(p.stdout)
    assert data["ranks"] == 3 and data["tasks"] == 3 * _tasks_of(DDP0) and data["collectives_matched"] > 0
    assert sorted(data["step_ms"]) == ["0", "1", "2"]
    # traces given with --fleet: the store is built first; --out writes the summary
    out = tmp_path / "out"
    argv = ["simulate", "--fleet", str(ROOT / "sample_traces" / "ddp")]
    p = cli(*argv, "--scheduler", "serial", "--out", str(out), cache=None, timeout=120)
    assert p.returncode == 0, p.stderr
    assert "predicted iteration" in p.stdout and json.loads((out / "simulate.json").read_text())["ranks"] == 2
    bad = cli(*run[:-1], "nowhere", cache=None, timeout=60)
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1


# ---- collective keys: process group, seq, comms_id (engine/trace/kineto.py columns) ----


def test_kineto_collective_columns_from_args(tmp_path):
    import orjson

    from engine.trace.kineto import parse_kineto
    from engine.trace.store import build

    base = {"ph": "X", "cat": "kernel", "pid": 0, "tid": 7, "ts": 1.0, "dur": 2.0}
    doc = {
        "traceEvents": [
            {
                **base,
                "name": "ncclAllReduce",
                "args": {"Process Group Name": "3", "Collective name": "allreduce", "seq": 5},
            },
            {
                **base,
                "name": "ncclAllGather",
                "args": {"pg_name": "7", "Collective name": "_allgather_base", "comms_id": 99},
            },
            {**base, "name": "gemm", "args": {"correlation": 1}},
        ]
    }
    ev, _, _ = parse_kineto(doc, "t.json", 0, False)
    assert ev["pg_name"].astype(str).tolist() == ["3", "7", ""]
    assert ev["coll_name"].astype(str).tolist() == ["allreduce", "_allgather_base", ""]
    assert ev["coll_seq"].tolist()[:1] == [5] and ev["coll_seq"].isna().tolist() == [False, True, True]
    assert ev["comms_id"].isna().tolist() == [True, False, True] and int(ev["comms_id"][1]) == 99
    # the store's streaming parser reads the same values
    (tmp_path / "t.json").write_bytes(orjson.dumps(doc))
    st = _events(build(tmp_path / "t.json", scheduler="serial"))
    assert st["pg_name"].tolist() == ["3", "7", ""]
    assert st["coll_name"].tolist() == ["allreduce", "_allgather_base", ""]
    assert st["coll_seq"].isna().tolist() == [False, True, True] and int(st["coll_seq"][0]) == 5
    assert st["comms_id"].isna().tolist() == [True, False, True] and int(st["comms_id"][1]) == 99


MI300 = SHARED / "tracelens_mi300_resnet_ckpt" / "resnet_act_checkpoint.json.gz"


@pytest.mark.skipif(not MI300.exists(), reason="shared traces absent (../shared/traces)")
def test_kineto_collective_columns_on_a_real_trace():
    import gzip

    import orjson

    import engine.trace as et

    raw = orjson.loads(gzip.decompress(MI300.read_bytes()))["traceEvents"]
    want = [
        e["args"]["Process Group Name"] for e in raw if e.get("ph") == "X" and "Process Group Name" in e.get("args", {})
    ]
    ev = et.load(MI300, use_cache=False).events
    got = ev.loc[ev["pg_name"].astype(str) != "", "pg_name"].astype(str).tolist()
    assert got == want and len(got) == 30
    store = _events(__import__("engine.trace.store", fromlist=["build"]).build(MI300, scheduler="serial"))
    assert (
        store.loc[store["pg_name"] != "", "coll_name"].tolist()
        == ev.loc[ev["pg_name"].astype(str) != "", "coll_name"].astype(str).tolist()
    )


def test_match_groups_by_seq_comms_id_and_process_group():
    from engine.simulate.collectives import match_groups

    # two ranks issue two collectives of one group in opposite time order: seq pairs them
    rank = np.array([0, 0, 1, 1])
    name = np.array(["k", "k", "k", "k"], dtype=object)
    ts = np.array([1.0, 2.0, 1.0, 2.0])
    pg = np.array(["0", "0", "0", "0"], dtype=object)
    m, gs = match_groups(rank, name, ts, 2, pg=pg, seq=np.array([1, 2, 2, 1]))
    assert [sorted(x) for x in np.split(m, gs[1:])] == [[0, 3], [1, 2]]
    # without seq: by occurrence (time order)
    m, gs = match_groups(rank, name, ts, 2, pg=pg)
    assert [sorted(x) for x in np.split(m, gs[1:])] == [[0, 2], [1, 3]]
    # comms_id wins over seq
    m, gs = match_groups(rank, name, ts, 2, pg=pg, seq=np.array([1, 2, 2, 1]), comms=np.array([8, 9, 8, 9]))
    assert [sorted(x) for x in np.split(m, gs[1:])] == [[0, 2], [1, 3]]
    # a group recorded on ranks 0 and 1 of 3 needs those two; a task without a group needs all 3
    rank = np.array([0, 1, 0, 1, 2])
    m, gs = match_groups(
        rank,
        np.array(["a", "a", "b", "b", "b"], dtype=object),
        np.zeros(5),
        3,
        pg=np.array(["A", "A", "", "", ""], dtype=object),
    )
    assert [sorted(x) for x in np.split(m, gs[1:])] == [[0, 1], [2, 3, 4]]
    # a member missing on one rank: no group
    m, gs = match_groups(np.array([0, 1, 0]), np.array(["b", "b", "c"], dtype=object), np.zeros(3), 2)
    assert m.tolist() == [0, 1] and gs.tolist() == [0]


def test_fleet_cancelled_by_its_progress_callback_leaves_no_work_folder(tmp_path, monkeypatch):
    import tempfile

    from engine.simulate.fleet import simulate_fleet

    store = make_fleet_store(DDP0, 3, tmp_path / "fleet", seed=4)
    work_root = tmp_path / "tmp"
    work_root.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(work_root))
    seen: list[str] = []

    class Stop(Exception):
        pass

    def progress(frac: float, msg: str) -> None:
        seen.append(msg)
        if msg.startswith("scheduling"):
            raise Stop  # as Ctrl-C in the CLI's progress bar

    with pytest.raises(Stop):
        simulate_fleet(store, None, scheduler="serial", progress=progress)
    assert any(m.startswith("matching") for m in seen)
    assert list(work_root.iterdir()) == []  # the rank programs were removed
