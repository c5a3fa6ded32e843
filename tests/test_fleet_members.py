"""A suite's picks composed into benchmarks and replayed as a suite (engine/fleet/members.py,
engine/fleet/replay.py; issue 35).

Fleet of 3 jobs: the mlp sample's Kineto file alone (Kineto-only: its ET is synthesized), the
cnn sample (its real ET beside it) and a synthetic GPU-only job (no shapes: cannot be
composed). Ground truth: the mlp sample's real ET, the same run, replays the same number of
operators in its step as the member synthesized from the Kineto file alone; each member's
replay.json holds the step time the suite weighs."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
from clirun import cli
from conftest import SAMPLES

pytest.importorskip("sklearn")


def _fleet(tmp_path: Path) -> Path:
    from engine.fleet.jobs import discover, signatures
    from engine.testing.fleet import planted_fleet

    jobs = tmp_path / "jobs"
    jobs.mkdir()
    shutil.copy(SAMPLES / "mlp" / "mlp_kineto.json.gz", jobs / "mlp_only.json.gz")  # no ET beside it
    (jobs / "cnn").mkdir()
    for f in (SAMPLES / "cnn").iterdir():
        shutil.copy(f, jobs / "cnn" / f.name)
    (gpu,) = planted_fleet(tmp_path / "planted", 1)
    shutil.copy(gpu[0], jobs / "gpu_only.json")
    rows = signatures(
        discover([jobs / "mlp_only.json.gz", jobs / "cnn" / "cnn_kineto.json.gz", jobs / "gpu_only.json"]),
        scheduler="serial",
    )
    assert all("skipped" not in r for r in rows)
    fleet = tmp_path / "fleet"
    fleet.mkdir()
    pd.DataFrame(rows).to_parquet(fleet / "signatures.parquet", index=False)
    return fleet


def _real_step_ops() -> int:
    import engine.trace as T
    from engine.graph import select, selection_from_dict

    t = T.load(SAMPLES / "mlp" / "mlp_et.json.gz")
    return len(select(t, selection_from_dict({"module": "ProfilerStep#1"})).replay_ids)


@pytest.mark.slow
def test_suite_composes_members_and_replays_them(tmp_path, cache_dir):
    fleet = _fleet(tmp_path)
    suite = tmp_path / "suite"
    r = cli("fleet", "suite", str(fleet), "--budget", "3", "--out", str(suite), "--json", cache=cache_dir)
    assert r.returncode == 0, r.stderr
    man = json.loads((suite / "manifest.json").read_text())
    assert man["kind"] == "mystique-suite" and set(man["fleet_signature"]) >= {"gemm", "idle", "host_overhead"}
    by = {m["job"]: m for m in man["members"]}
    assert set(by) == {"mlp_only", "cnn_kineto", "gpu_only"}
    assert abs(sum(m["weight"] for m in man["members"]) - 1) < 1e-9
    gpu = by["gpu_only"]
    assert gpu["benchmark"] is None and "without shapes" in gpu["refused"] and "\n" not in gpu["refused"]
    mlp, cnn = by["mlp_only"], by["cnn_kineto"]
    for m in (mlp, cnn):
        assert (suite / m["benchmark"] / "COMPLETE.json").is_file()
        assert m["step"] == "ProfilerStep#1" and m["ranks_kept"] == [0]
    (p_mlp,) = mlp["provenance"]["ranks"]
    assert p_mlp["source"].endswith("mlp_only.json.gz") and "synthesized" in p_mlp
    (p_cnn,) = cnn["provenance"]["ranks"]
    assert p_cnn["source"].endswith("cnn_et.json.gz") and "synthesized" not in p_cnn  # the real ET beside it
    assert p_mlp["replay_ops"] == _real_step_ops()  # the synthesized step runs what the real ET runs

    r = cli(
        "replay",
        str(suite),
        "--out",
        str(tmp_path / "rep"),
        "--warmup",
        "0",
        "--iters",
        "2",
        "--no-profile",
        "--json",
        cache=cache_dir,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)
    rows = {m["job"]: m for m in res["members"]}
    assert "without shapes" in rows["gpu_only"]["refused"]
    total = 0.0
    for job in ("mlp_only", "cnn_kineto"):
        m = rows[job]
        assert m["coverage"]["rate"] >= 0.99 and m["meets_target"], m["coverage"]
        written = json.loads(Path(m["replay_json"]).read_text())
        assert m["median_ms"] == pytest.approx(written["median_ms"])
        total += by[job]["weight"] * written["median_ms"]
    assert res["weighted_step_ms"] == pytest.approx(total)
    assert res["weight_replayed"] == pytest.approx(1 - gpu["weight"])
    assert res["replayed"] == 2 and res["refused"] == 1 and not res["all_meet_target"]


@pytest.mark.slow
def test_member_ranks_are_trimmed_with_reasons(tmp_path, cache_dir):
    """The ddp sample (2 recorded ranks): both kept when they fit; one when the CPU cap or the
    launcher's memory check (its per-rank estimate) allows one; refused when none fits."""
    from engine.compose.marker import rank_files
    from engine.fleet.members import compose_member

    row = {"job": "ddp", "path": str(SAMPLES / "ddp"), "world_size": 8}
    m = compose_member(row, 1.0, tmp_path / "both", max_ranks=2, available_bytes=1 << 50)
    assert m.ranks_kept == [0, 1] and len(rank_files(tmp_path / "both")) == 2
    assert m.trims == ["recorded world size 8: the job's files hold 2 rank(s) (0, 1), so only those are composed"]
    m = compose_member(row, 1.0, tmp_path / "cpu", max_ranks=1)
    assert m.ranks_kept == [0] and len(rank_files(tmp_path / "cpu")) == 1
    assert any(t.startswith("cpu:") and "2 ranks trimmed to 1" in t for t in m.trims)

    import engine.trace as T
    from engine.replay import ReplayConfig
    from engine.replay.budget import world_budget

    files = [str(f) for _, f in sorted(rank_files(tmp_path / "both").items())]
    per = max(world_budget(T.load(*files), files, {0: 0, 1: 1}, ReplayConfig(profile=False)).per_rank_bytes.values())
    m = compose_member(row, 1.0, tmp_path / "mem", max_ranks=2, available_bytes=int(per * 1.5))
    assert m.ranks_kept == [0] and len(rank_files(tmp_path / "mem")) == 1
    assert any(t.startswith("memory:") and "1 fit" in t for t in m.trims)
    m = compose_member(row, 1.0, tmp_path / "none", max_ranks=2, available_bytes=per // 2)
    assert m.benchmark is None and "not even one rank fits" in m.refused


@pytest.mark.slow
def test_replay_refuses_a_suite_that_was_not_composed(tmp_path, cache_dir):
    fleet = _fleet(tmp_path)
    suite = tmp_path / "suite"
    r = cli("fleet", "suite", str(fleet), "--budget", "2", "--out", str(suite), "--no-compose", cache=cache_dir)
    assert r.returncode == 0, r.stderr
    r = cli("replay", str(suite), "--out", str(tmp_path / "rep"), cache=cache_dir)
    assert r.returncode == 2 and "were not composed" in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
