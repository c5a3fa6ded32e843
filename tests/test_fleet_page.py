"""The Fleet page through Streamlit's AppTest: a planted fleet signed by a worker process, the
suite drawn from its table (map, class mix, members), the suite written, a job opened in Explore."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

pytest.importorskip("streamlit")
pytest.importorskip("sklearn")
from streamlit.testing.v1 import AppTest

from engine.testing.fleet import planted_fleet

ROOT = Path(__file__).resolve().parents[1]
MAIN = str(ROOT / "app" / "main.py")


def _ok(at):
    assert not at.exception, [e.value for e in at.exception]


def _sign(tmp_path, monkeypatch):
    """The Fleet page, empty, then its form submitted with the planted jobs under tmp_path/jobs."""
    monkeypatch.setenv("MYSTIQUE_UI_DIR", str(tmp_path / "ui"))
    monkeypatch.setenv("MYSTIQUE_APP_SCHEDULER", "serial")
    at = AppTest.from_file(MAIN, default_timeout=180)
    at.run()
    at.switch_page("../pages/fleet.py")
    at.run()
    _ok(at)
    assert any("Sign a fleet" in i.value for i in at.info)
    at.text_area(key="fleet_paths").set_value(str(tmp_path / "jobs"))
    at.button[0].click()  # the form's submit button
    at.run()
    _ok(at)
    return at


@pytest.mark.slow
def test_fleet_page_signs_picks_writes_and_opens(tmp_path, monkeypatch, cache_dir):
    from engine.workspace import Catalog, JobRunner

    jobs = planted_fleet(tmp_path / "jobs", 15)
    at = _sign(tmp_path, monkeypatch)
    cat = Catalog(Path(os.environ["MYSTIQUE_UI_DIR"]) / "workspace")
    (job,) = cat.jobs(kind="fleet_ingest")
    done = JobRunner(cat).wait(job["id"], timeout_s=300)
    assert done["status"].value == "done", done.get("error")
    at.run()
    _ok(at)
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["jobs"] == str(len(jobs))
    assert float(metrics["suite L1 to the fleet"]) < float(metrics["random picks (median)"])
    members = at.dataframe[0].value  # the suite table (the first on the page)
    assert len(members) == 5 and abs(members["weight"].sum() - 1) < 1e-9
    at.button(key="fleet_write").click()
    at.run()
    _ok(at)
    man = json.loads((Path(done["summary"]["fleet"]) / "suite_5" / "manifest.json").read_text())
    assert [m["job"] for m in man["members"]] == members["job"].tolist()
    at.selectbox(key="fleet_job").set_value(members["job"].iat[0])
    at.button(key="fleet_open").click()
    at.run()
    _ok(at)
    assert at.session_state["current"] == members["job"].iat[0].split("/")[-1]


@pytest.mark.slow
def test_a_running_signing_shows_its_progress_and_can_be_cancelled(tmp_path, monkeypatch, cache_dir):
    """The page's job row (app/widgets.py `job_rows`, shared with Replay and Ranks): while the
    worker signs the fleet, a progress bar names the job and its status, and Cancel stops it."""
    import time

    from engine.workspace import Catalog

    planted_fleet(tmp_path / "jobs", 80, steps=30)
    at = _sign(tmp_path, monkeypatch)
    cat = Catalog(Path(os.environ["MYSTIQUE_UI_DIR"]) / "workspace")
    (job,) = cat.jobs(kind="fleet_ingest")
    end = time.monotonic() + 120
    while (j := cat.job(job["id"]))["status"].value != "running" or not j["fraction"]:
        assert not j["status"].finished and time.monotonic() < end, j
        time.sleep(0.05)
    at.run()
    _ok(at)
    bars = at.get("progress")
    assert bars and f"job {job['id']} · running · " in bars[0].proto.text, [b.proto.text for b in bars]
    at.button(key=f"fleet_cancel_{job['id']}").click()
    at.run()
    _ok(at)
    assert cat.job(job["id"])["status"].value == "cancelled"
    assert not at.get("progress") and not at.metric  # nothing half-signed is shown
    # the cancel's caption names the job and what happened, not "job 1 cancelled:" with no reason
    assert [c.value for c in at.caption if c.value.startswith("job ")] == [f"job {job['id']} cancelled"]
