"""Distributed replay: one process per rank with real gloo collectives, merged results, faults.

Golden values come from the committed 2-rank samples (sample_traces/ddp, dlrm_a2a, dlrm_tbe).
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from conftest import ROOT, SAMPLES

pytestmark = pytest.mark.usefixtures("rank_baselines")  # one baseline measurement per trace (conftest)
FAST = ["--iters", "1", "--warmup", "0"]


def _has_fbgemm() -> bool:
    try:
        import fbgemm_gpu  # noqa: F401
    except ImportError:
        return False
    return True


def _cli(args, capsys):
    from engine.cli.main import main

    code = main(["replay", *args])
    cap = capsys.readouterr()
    return code, cap.out, cap.err


def _workers_gone(before: set[int]) -> bool:
    return {p.pid for p in psutil.Process().children(recursive=True)} <= before


@pytest.mark.slow
def test_two_rank_sample_replays_with_collectives_and_merged_result(tmp_path, capsys, cache_dir):
    """dlrm_tbe (all_to_all + all_reduce + broadcast + FBGEMM) when the dlrm extra is installed,
    else dlrm_a2a: coverage with communication counted, counts/bytes per collective type equal
    the trace's, one Kineto trace per rank that our loader reads as a 2-rank trace."""
    import engine.trace as T
    from engine.replay.commstats import trace_collectives
    from engine.replay.seqcheck import rank_collectives

    name = "dlrm_tbe" if _has_fbgemm() else "dlrm_a2a"
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    code, out, err = _cli([str(SAMPLES / name), *FAST, "--out", str(tmp_path / "o"), "--json"], capsys)
    assert code == 0, err
    doc = json.loads(out)
    assert doc["world_size"] == 2 and [r["rank"] for r in doc["ranks"]] == [0, 1]
    assert doc["spmd"] is None and doc["replay_mode"] == "full"
    cov = doc["coverage"]
    assert "collective (single-process replay)" not in cov["by_reason"]
    assert cov["comm_selected"] > 0 and cov["comm_replayed"] == cov["comm_selected"]
    assert cov["replayed"] / cov["selected"] >= 0.99, cov["by_reason"]
    if name == "dlrm_tbe":
        assert cov["replayed"] == cov["selected"], cov["by_reason"]  # 100 % with the extra
    trace = T.load(*sorted((SAMPLES / name).glob("*_et.json.gz")))
    for r in doc["ranks"]:
        assert r["coverage"]["replayed"] / r["coverage"]["selected"] >= 0.99
        expected = trace_collectives(rank_collectives(trace, r["rank"]))
        assert r["collectives"] == expected, (r["rank"], r["collectives"], expected)
        assert set(expected) == {"all_reduce", "all_to_all", "broadcast"}
        b = r["breakdown"]
        assert b["compute_ms"] > 0 and b["exposed_communication_ms"] >= 0 and b["communication_ms"] > 0
        parts = b["compute_ms"] + b["exposed_communication_ms"] + b["idle_ms"]
        assert parts == pytest.approx(b["step_ms"], rel=5e-3)  # the one TimeBreakdown: parts make the step
    assert doc["median_ms"] == pytest.approx(
        max(r["iteration_ms"][0] for r in doc["ranks"]), rel=1e-6
    )  # iteration = slowest rank
    # each rank process's measured peak (a torch process is over 100 MB): the dashboard shows the
    # process tree's peak, the worker's own plus the ranks' (issue 32: "worker peak RSS" alone)
    assert all(r["peak_rss_bytes"] > 100 * 2**20 for r in doc["ranks"]), [r["peak_rss_bytes"] for r in doc["ranks"]]
    from engine.replay import ReplayResult
    from engine.workspace.worker import tree_peak_rss_mb

    ranks_mb = sum(r["peak_rss_bytes"] for r in doc["ranks"]) / 2**20
    assert tree_peak_rss_mb(ReplayResult.from_json({**doc, "per_op": doc.get("per_op") or []})) > ranks_mb
    # the dashboard's per-rank views read exactly these keys
    from engine.figures import ranks as rfig
    from engine.replay.distributed import capture_rank_medians

    table = rfig.rank_table(doc)
    assert list(table["rank"]) == [0, 1] and (table["compute"] > 0).all() and (table["coverage"] >= 0.99).all()
    assert [t.name for t in rfig.rank_bars(doc).data] == ["compute", "communication", "exposed communication", "idle"]
    medians = capture_rank_medians(sorted((SAMPLES / name).glob("*_et.json.gz")))
    assert set(medians) == {0, 1}
    side = rfig.ranks_side_by_side(rfig.original_rank_ms(trace, medians), doc)
    assert list(side.data[0].y) == [medians[0], medians[1]]
    kin = [r["kineto_path"] for r in doc["ranks"]]
    replayed = T.load(*kin)
    assert replayed.meta["ranks"] == [0, 1]
    assert _workers_gone(before)


@pytest.mark.slow
def test_mirror_rank_runs_one_rank_as_spmd(tmp_path, capsys, cache_dir, monkeypatch):
    monkeypatch.chdir(tmp_path)  # runs without --out default to ./replay_out/<name>: never the checkout
    et = SAMPLES / "ddp" / "ddp_rank0_et.json.gz"
    code, out, err = _cli(
        [str(et), "--mirror-rank", "0", "--world-size", "2", *FAST, "--no-profile", "--out", str(tmp_path), "--json"],
        capsys,
    )
    assert code == 0, err
    doc = json.loads(out)
    assert doc["world_size"] == 2 and doc["spmd"]["mirror_rank"] == 0 and "SPMD" in doc["spmd"]["assumption"]
    assert all(r["recorded_rank"] == 0 for r in doc["ranks"])
    assert doc["coverage"]["replayed"] == doc["coverage"]["selected"]
    per_rank = [r["collectives"]["all_reduce"]["count"] for r in doc["ranks"]]
    assert per_rank[0] == per_rank[1] > 0 and doc["collectives"]["all_reduce"]["count"] == sum(per_rank)
    # a one-rank trace without --mirror-rank cannot start 2 ranks: clear error, exit 2
    code, _, err = _cli([str(et), "--world-size", "2", *FAST], capsys)
    assert code == 2 and "--mirror-rank" in err


def _mismatched(tmp_path: Path) -> Path:
    """ddp rank files where rank 1 lost its last all_reduce (and its gloo child)."""
    d = tmp_path / "bad"
    d.mkdir()
    shutil.copy(SAMPLES / "ddp" / "ddp_rank0_et.json.gz", d / "ddp_rank0_et.json.gz")
    doc = json.loads(gzip.decompress((SAMPLES / "ddp" / "ddp_rank1_et.json.gz").read_bytes()))
    last = max(n["id"] for n in doc["nodes"] if n["name"] == "c10d::allreduce_")
    doc["nodes"] = [n for n in doc["nodes"] if n["id"] != last and n.get("ctrl_deps") != last]
    (d / "ddp_rank1_et.json.gz").write_bytes(gzip.compress(json.dumps(doc).encode()))
    return d


def test_mismatched_rank_files_exit_2_before_launch_naming_rank_and_op(tmp_path, capsys, cache_dir):
    d = _mismatched(tmp_path)
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    t0 = time.perf_counter()
    code, _, err = _cli([str(d), *FAST, "--out", str(tmp_path / "o")], capsys)
    assert code == 2 and "Traceback" not in err
    assert "rank 0" in err and "c10d::allreduce_" in err and "collective mismatch" in err
    assert err.count("\n") == 1  # one line
    assert not (tmp_path / "o" / "logs").exists()  # nothing launched
    assert time.perf_counter() - t0 < 30 and _workers_gone(before)


@pytest.mark.slow
def test_never_matching_collective_times_out_naming_a_rank(tmp_path, capsys, cache_dir):
    d = _mismatched(tmp_path)
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    t0 = time.perf_counter()
    code, _, err = _cli(
        [str(d), *FAST, "--no-check", "--no-profile", "--timeout", "4", "--out", str(tmp_path / "out")], capsys
    )
    wall = time.perf_counter() - t0
    assert code == 1 and "Traceback" not in err
    assert "rank " in err and "failed" in err and ("Timed out" in err or "timeout" in err.lower()), err
    assert wall < 120
    assert _workers_gone(before)


@pytest.mark.slow
def test_killed_rank_brings_the_run_down_and_leaves_nothing(tmp_path):
    out = tmp_path / "o"
    cmd = [sys.executable, "-m", "engine.cli.main", "replay", str(SAMPLES / "ddp"), "--iters", "2000"]
    cmd += ["--warmup", "0", "--no-profile", "--timeout", "10", "--out", str(out)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    victim = None
    deadline = time.time() + 240
    while time.time() < deadline and victim is None and proc.poll() is None:
        time.sleep(0.5)
        if not (out / "rank1").is_dir():
            continue
        for p in psutil.Process(proc.pid).children(recursive=True):
            try:
                if p.environ().get("RANK") == "1" and "dist_worker" in " ".join(p.cmdline()):
                    victim = p
            except psutil.Error:
                continue
    assert victim is not None, "rank 1 never started"
    time.sleep(3)  # mid-run
    tree = [proc.pid] + [p.pid for p in psutil.Process(proc.pid).children(recursive=True)]
    victim.kill()
    try:
        _, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail("the run did not come down within the timeout")
    assert proc.returncode not in (0, None)
    assert "rank 1 failed" in err and "killed by signal 9" in err, err
    time.sleep(0.5)
    alive = [pid for pid in tree if psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE]
    assert not alive, alive


@pytest.mark.slow
def test_embedding_sharded_composition_replays_across_ranks_with_all_to_all(tmp_path, capsys, cache_dir):
    """The DLRM greedy example resharded over 2 ranks: both ranks run, their all_to_all execute."""
    from engine.compose import compose, export, spec_from_dict

    spec = json.loads((ROOT / "examples" / "dlrm_greedy_4ranks.json").read_text())
    spec["sources"] = [str(ROOT / "sample_traces" / "dlrm" / "dlrm_et.json.gz")]
    spec["sharding"]["ranks"] = 2
    export(compose(spec_from_dict(spec)), tmp_path / "bench")
    code, out, err = _cli(
        [str(tmp_path / "bench"), *FAST, "--no-profile", "--out", str(tmp_path / "o"), "--json"], capsys
    )
    assert code == 0, err
    doc = json.loads(out)
    assert doc["world_size"] == 2 and doc["coverage"]["replayed"] == doc["coverage"]["selected"]
    a2a = doc["collectives"]["all_to_all"]
    assert a2a["count"] == doc["coverage"]["comm_selected"] == 4  # forward + backward, per rank


@pytest.mark.slow  # 4 rank processes (~15 s on 2 cores)
def test_tbe_dlrm_sharded_over_four_ranks_replays_with_real_all_to_all(tmp_path, capsys, cache_dir):
    """The FBGEMM-TBE DLRM sample (both recorded ranks' TBE lookups: 4 tables) resharded row-wise
    over 4 ranks at bf16 and batch x2, replayed on 4 processes at once: every op and every
    all_to_all runs (coverage >= 99 % from the distributed replay, not per rank with collectives
    skipped), at the scaled batch and dtype."""
    from engine.compose import compose, export, spec_from_dict

    src = SAMPLES / "dlrm_tbe"
    spec = {
        "version": 1,
        "name": "dlrm_tbe_row4",
        "sources": [str(src / "dlrm_tbe_rank0_et.json.gz"), str(src / "dlrm_tbe_rank1_et.json.gz")],
        "segments": [{"selection": {}, "source": 0}, {"selection": {}, "source": 1}],
        "sharding": {"kind": "embedding", "plan": "row", "ranks": 4},
        "dtype": "bf16",
        "batch_scale": 2,
    }
    bench = compose(spec_from_dict(spec))
    sh = bench.meta["sharding"]
    assert len(sh["tables"]) == 4 and len(sh["tbe"]["ops"]) == 2  # one TBE per recorded rank
    assert sh["batch"] == 2 * 512 and sh["lookups"] == 2 * sh["original_lookups"]
    for r in range(4):
        # row plan: a shard of every table on every rank, as one TBE per recorded lookup (issue 31
        # item 19: no longer an embedding_bag per shard)
        tbe = [n for n in bench.ranks[r] if n["name"] == "fbgemm::split_embedding_codegen_lookup_sgd_function_pt2"]
        assert len(tbe) == 2 and not [n for n in bench.ranks[r] if n["name"] == "aten::embedding_bag"]
        assert all(n["inputs"]["shapes"][8] == [2 * 1024 + 1] and n["outputs"]["shapes"][0][0] == 1024 for n in tbe)
        assert all("BFloat16" in n["inputs"]["types"][1] for n in tbe)
    export(bench, tmp_path / "bench")
    code, out, err = _cli(
        [str(tmp_path / "bench"), *FAST, "--no-profile", "--world-size", "4", "--out", str(tmp_path / "o"), "--json"],
        capsys,
    )
    assert code == 0, err
    doc = json.loads(out)
    cov = doc["coverage"]
    assert doc["world_size"] == 4 and [r["rank"] for r in doc["ranks"]] == [0, 1, 2, 3]
    assert cov["replayed"] / cov["selected"] >= 0.99, cov["by_reason"]
    assert cov["comm_replayed"] == cov["comm_selected"] == 8  # forward + backward all_to_all per rank
    assert doc["collectives"]["all_to_all"]["count"] == 8
    for r in doc["ranks"]:
        assert r["coverage"]["replayed"] / r["coverage"]["selected"] >= 0.99, r["coverage"]["by_reason"]


def test_one_rank_of_a_multi_rank_job_replayed_alone_hints_mirror_rank(tmp_path, capsys, cache_dir):
    """Issue 21 item 7: rank 0's ET of the 2-rank DDP sample, replayed alone, skips its
    collectives; the run says the trace records a 2-rank job and offers --mirror-rank (stderr,
    --json, replay.json warnings). A one-rank trace (mlp) gets no hint."""
    et0 = ROOT / "sample_traces" / "ddp" / "ddp_rank0_et.json.gz"
    code, out, err = _cli([str(et0), *FAST, "--no-profile", "--out", str(tmp_path / "o"), "--json"], capsys)
    assert code == 0, err
    hint = json.loads(out)["hint"]
    assert hint["world_size"] == 2 and hint["rank"] == 0 and hint["skipped"] > 0
    assert hint["command"].endswith("--mirror-rank 0 --world-size 2")
    assert [ln for ln in err.splitlines() if ln.startswith("hint:") and "2-rank job" in ln and "--mirror-rank 0" in ln]
    saved = json.loads((tmp_path / "o" / "replay.json").read_text())
    assert any("--mirror-rank 0 --world-size 2" in w for w in saved["warnings"])
    mlp = ROOT / "sample_traces" / "mlp" / "mlp_et.json.gz"
    code, out, err = _cli([str(mlp), *FAST, "--no-profile", "--out", str(tmp_path / "m"), "--json"], capsys)
    assert code == 0 and "hint" not in json.loads(out) and "hint:" not in err
