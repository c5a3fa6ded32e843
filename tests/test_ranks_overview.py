"""The rank overview's engine side (issue 22): per-rank summaries from the trace store equal
TimeBreakdown of the loader's events rank by rank; the straggler table; a rank's window read
from the store; the dashboard's --scheduler setting.

Input: a 4-rank fleet of the shared MI300 ResNet trace (3 ProfilerSteps, RCCL collectives;
engine.testing.fleet: per-rank perturbed durations) and the bundled 2-rank CPU ddp capture.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from engine.analysis import ranks as rk
from engine.analysis.breakdown import TimeBreakdown
from engine.errors import TraceError
from engine.settings import DashboardSettings
from engine.trace import load
from engine.trace.store import build, read

ROOT = Path(__file__).resolve().parents[1]
MI300 = "tracelens_mi300_resnet_ckpt/resnet_act_checkpoint.json.gz"
DDP = ROOT / "sample_traces" / "ddp"


@pytest.fixture(scope="module")
def fleet(shared_traces, tmp_path_factory):
    from engine.testing.fleet import make_fleet

    tmp = tmp_path_factory.mktemp("fleet")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MYSTIQUE_CACHE_DIR", str(tmp / "cache"))
        files = make_fleet(shared_traces / MI300, tmp / "ranks", 4)
        store = build(*files, scheduler="serial")
        yield files, store


def _reference(files: list[Path]) -> pd.DataFrame:
    return pd.concat([TimeBreakdown.from_events(load(f).events).table for f in files], ignore_index=True)


@pytest.mark.slow
def test_rank_summaries_equal_time_breakdown_of_the_loaded_ranks(fleet):
    files, store = fleet
    got = rk.summarize(store, scheduler="serial", use_cache=False)
    ref = _reference(files)
    assert sorted(got["rank"].unique()) == [0, 1, 2, 3]
    assert (got.groupby("rank").size() == 3).all() and set(got["step"]) == set(ref["step"])
    assert (got["basis"] == "gpu").all() and (got["communication_ms"] > 0).all()
    pd.testing.assert_frame_equal(
        got.drop(columns=["step_index"]), ref, check_dtype=False, check_exact=False, rtol=1e-12, atol=1e-9
    )
    # the parts add up to the step on every rank and step
    total = got["compute_ms"] + got["exposed_communication_ms"] + got["idle_ms"]
    np.testing.assert_allclose(total, got["step_ms"], rtol=1e-9)
    # no two ranks alike (the fleet's perturbation reaches the summaries)
    assert got.groupby("rank")["compute_ms"].sum().nunique() == 4


@pytest.mark.slow
def test_summaries_are_the_same_on_a_local_dask_cluster(fleet):
    _, store = fleet
    serial = rk.summarize(store, scheduler="serial", use_cache=False)
    local = rk.summarize(store, scheduler="local", use_cache=False)  # one worker process per core
    pd.testing.assert_frame_equal(serial, local)


def test_cpu_ranks_without_gpu_work_match_too(cache_dir):
    if not (DDP / "ddp_rank0_kineto.json.gz").exists():
        pytest.skip("bundled ddp sample missing (make samples)")
    files = sorted(DDP.glob("ddp_rank*_kineto.json.gz"))
    got = rk.summarize(build(*files, scheduler="serial"), scheduler="serial")
    ref = _reference(files)
    assert list(got["basis"].unique()) == ["cpu"] and sorted(got["rank"].unique()) == [0, 1]
    pd.testing.assert_frame_equal(
        got.drop(columns=["step_index"]), ref, check_dtype=False, check_exact=False, rtol=1e-12, atol=1e-9
    )


@pytest.mark.slow
def test_summaries_are_cached_beside_the_store_and_rebuilt_when_stale(fleet):
    _, store = fleet
    first = rk.summarize(store, scheduler="serial")
    path = Path(store) / rk.SUMMARY
    assert path.is_file()
    mtime = path.stat().st_mtime_ns
    again = rk.summarize(store, scheduler="serial")
    assert path.stat().st_mtime_ns == mtime  # read, not recomputed
    pd.testing.assert_frame_equal(first, again, check_dtype=False)
    import pyarrow.parquet as pq

    t = pq.read_table(path)  # another version's (or store's) summary is not used
    pq.write_table(t.replace_schema_metadata({b"mystique_summary": b"r0|other"}), path)
    assert rk.cached(store) is None
    rebuilt = rk.summarize(store, scheduler="serial")
    pd.testing.assert_frame_equal(first, rebuilt, check_dtype=False)
    assert rk.cached(store) is not None
    assert not [p for p in path.parent.iterdir() if p.name.startswith(".")]  # no temporary left


@pytest.mark.slow
def test_straggler_table_is_sorted_with_lateness_against_the_median(fleet):
    _, store = fleet
    t = rk.summarize(store, scheduler="serial")
    lag = rk.stragglers(t)
    assert list(lag["step_ms"]) == sorted(lag["step_ms"], reverse=True)
    for _, row in lag.iterrows():  # vs_median_ms: the mean over steps of step - that step's median over ranks
        mine = t[t["rank"] == row["rank"]].set_index("step_index")["step_ms"]
        med = t.groupby("step_index")["step_ms"].median()
        assert row["vs_median_ms"] == pytest.approx(float((mine - med[mine.index]).mean()), abs=1e-9)
    assert int(lag["slowest_steps"].sum()) == 3  # one slowest rank per step
    assert lag["slower_than_median"].tolist() == (lag["vs_median_pct"] >= rk.SLOW_RANK_MIN_PCT).tolist()
    assert "straggler" not in lag.columns  # one straggler definition: the rank others wait for (Analysis)
    grid = rk.step_grid(t, "idle_ms")
    assert grid.shape == (4, 3) and grid.loc[2, 1] == pytest.approx(
        float(t[(t["rank"] == 2) & (t["step_index"] == 1)]["idle_ms"].iloc[0])
    )


@pytest.mark.slow
def test_a_rank_window_read_from_the_store_equals_the_loaders_rows(fleet):
    files, store = fleet
    ev = load(files[2]).events
    t = rk.rank_steps(store, 2)
    lo = float(t["start_us"].iloc[1])
    hi = lo + float(t["step_ms"].iloc[1]) * 1e3
    got = read.rank_events(store, 2, window=(lo, hi))
    want = ev[(ev["ts_us"] <= hi) & (ev["ts_us"] + ev["dur_us"] >= lo)]
    assert 0 < len(got) < len(ev)
    ev0 = next(s["ev0"] for s in read.manifest(store)["sources"] if s["rank"] == 2)  # `ev` counts across ranks
    assert list(got["ev"] - ev0) == list(want["ev"])
    for c in ("cat", "name", "pid", "tid"):
        assert got[c].astype(str).tolist() == want[c].astype(str).tolist(), c
    np.testing.assert_array_equal(got["ts_us"].to_numpy(), want["ts_us"].to_numpy())
    np.testing.assert_array_equal(got["dur_us"].to_numpy(), want["dur_us"].to_numpy())
    assert (got["rank"] == 2).all()
    with pytest.raises(TraceError, match="no rank 9"):
        read.rank_events(store, 9)


def test_scheduler_setting_is_checked_in_one_line(capsys, monkeypatch):
    assert DashboardSettings(scheduler="tcp://10.0.0.1:8786").scheduler == "tcp://10.0.0.1:8786"
    assert DashboardSettings().scheduler == "local"
    with pytest.raises(TraceError) as e:
        DashboardSettings(scheduler="tcp://nowhere")
    assert "expected serial, local or tcp://HOST:PORT" in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(TraceError):
        rk.summarize("/nonexistent", scheduler="bogus")
    from engine.cli import app as cli_app
    from engine.cli.main import build_parser, main

    monkeypatch.delenv(cli_app.APP_SCHEDULER, raising=False)
    assert main(["app", "--scheduler", "bogus"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "bad --scheduler 'bogus'" in err[0]
    env = cli_app.environment(build_parser().parse_args(["app", "--scheduler", "serial"]))
    assert env[cli_app.APP_SCHEDULER] == "serial" and os.environ.get(cli_app.APP_SCHEDULER) is None
