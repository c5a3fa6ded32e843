"""The Ranks page through Streamlit's AppTest: a job's summaries built by a worker process on the
scheduler setting, then the overview drawn from them alone, and one rank's timeline opened.

Input: the bundled 2-rank CPU ddp capture (its Kineto files: the job builds their store)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from mdtext import shown

pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest

ROOT = Path(__file__).resolve().parents[1]
MAIN = str(ROOT / "app" / "main.py")
DDP = ROOT / "sample_traces" / "ddp"
MI300 = "tracelens_mi300_resnet_ckpt/resnet_act_checkpoint.json.gz"


@pytest.fixture()
def app(tmp_path, monkeypatch, cache_dir):
    if not (DDP / "ddp_rank0_kineto.json.gz").exists():
        pytest.skip("bundled ddp sample missing (make samples)")
    monkeypatch.setenv("MYSTIQUE_UI_DIR", str(tmp_path / "ui"))
    monkeypatch.delenv("MYSTIQUE_APP_SCHEDULER", raising=False)
    at = AppTest.from_file(MAIN, default_timeout=180)
    at.run()
    at.switch_page("../pages/ranks.py")
    at.run()
    _ok(at)
    return at


def _ok(at):
    assert not at.exception, [e.value for e in at.exception]


def _job_box(at):
    return _box(at, "Job:")


def _box(at, label: str):
    return next(t for t in at.text_input if t.label.startswith(label))


def _wait_jobs(kind: str = "rank_summary") -> dict:
    from engine.workspace import Catalog, JobRunner

    cat = Catalog(Path(os.environ["MYSTIQUE_UI_DIR"]) / "workspace")
    jobs = cat.jobs(kind=kind)
    assert jobs, "no job was queued"
    done = JobRunner(cat).wait(jobs[-1]["id"], timeout_s=300)
    assert done["status"].value == "done", done.get("error")
    return done


def test_ranks_page_builds_summaries_in_a_worker_and_draws_the_overview(app, tmp_path):
    import shutil

    from engine.analysis import ranks as rk

    job = tmp_path / "job"
    job.mkdir()
    files = [str(shutil.copy(p, job)) for p in sorted(DDP.glob("ddp_rank*_kineto.json.gz"))]
    _job_box(app).input(";".join(files))
    _box(app, "Fan-out scheduler").input("serial")
    app.run()
    _ok(app)
    assert not app.dataframe  # nothing to show before the summaries exist
    app.button(key="ov_build").click()
    app.run()
    _ok(app)
    done = _wait_jobs()
    assert done["params"]["scheduler"] == "serial" and done["summary"]["ranks"] == 2
    store = done["summary"]["store"]
    app.run()
    _ok(app)
    assert not app.error, [e.value for e in app.error]
    metrics = {m.label: m.value for m in app.metric}
    assert metrics["ranks"] == "2" and metrics["steps per rank"] == "1"
    want = rk.stragglers(rk.cached(store))
    lag = next(d.value for d in app.dataframe if "vs_median_ms" in d.value.columns)
    assert lag["rank"].tolist() == want["rank"].tolist()
    assert lag["step_ms"].tolist() == pytest.approx(want["step_ms"].round(3).tolist())
    assert {c.key for c in app.get("plotly_chart") if c.key} >= {"ov_heat", "ov_bars"} or len(
        app.get("plotly_chart")
    ) >= 2
    # one rank's events are read only when its timeline is opened
    slow = int(want["rank"].iloc[-1])
    app.selectbox(key="ov_rank").set_value(slow)
    app.run()
    assert len(app.get("plotly_chart")) == 2
    app.button(key="ov_open").click()
    app.run()
    _ok(app)
    assert len(app.get("plotly_chart")) == 3
    assert any(
        f"rank {slow} · ProfilerStep#1" in shown(c.value) and "events read from the store" in c.value
        for c in app.caption
    )
    # a warm open (a new session) finds the summaries of the same, unchanged files without a job
    at = AppTest.from_file(MAIN, default_timeout=180)
    at.run()
    at.switch_page("../pages/ranks.py")
    at.session_state["ov_job"] = ";".join(files)
    at.run()
    _ok(at)
    assert {m.label: m.value for m in at.metric}["ranks"] == "2"
    # a file rewritten in place: its summaries are not shown for it any more (a new job is needed)
    os.utime(files[1], ns=(1, 1))
    at.run()
    _ok(at)
    assert not at.metric and at.button(key="ov_build")


def test_a_bad_scheduler_setting_is_one_line_and_blocks_the_build(app, tmp_path):
    _job_box(app).input(str(DDP / "ddp_rank0_kineto.json.gz"))
    _box(app, "Fan-out scheduler").input("tcp://nowhere")
    app.run()
    _ok(app)
    errs = [shown(e.value) for e in app.error]
    assert errs == ["bad --scheduler 'tcp://nowhere': expected serial, local or tcp://HOST:PORT"]
    assert app.button(key="ov_build").disabled


@pytest.mark.slow
def test_a_running_summary_job_shows_progress_and_can_be_cancelled(app, shared_traces, tmp_path):
    from engine.analysis import ranks as rk
    from engine.testing.fleet import make_fleet_store
    from engine.workspace import Catalog

    store = make_fleet_store(shared_traces / MI300, 64, tmp_path / "store", 1)
    _job_box(app).input(str(store))
    _box(app, "Fan-out scheduler").input("serial")
    app.run()
    app.button(key="ov_build").click()
    app.run()
    _ok(app)
    cat = Catalog(Path(os.environ["MYSTIQUE_UI_DIR"]) / "workspace")
    job = cat.jobs(kind="rank_summary")[-1]
    end = time.monotonic() + 120
    while (j := cat.job(job["id"]))["status"].value != "running" or not j["fraction"]:
        assert not j["status"].finished and time.monotonic() < end, j
        time.sleep(0.1)
    app.run()
    _ok(app)
    bars = app.get("progress")
    assert bars and f"job {job['id']} · running · rank task" in bars[0].proto.text
    app.button(key=f"ov_cancel_{job['id']}").click()
    app.run()
    _ok(app)
    assert cat.job(job["id"])["status"].value == "cancelled"
    assert rk.cached(store) is None and not app.metric  # nothing half-built is shown
    assert app.button(key="ov_build")  # and it can be started again
