"""The Replay page's "Allow trace code" checkbox: off by default, and what it sends its worker.

The page replays a crafted trace (tests/crafted_et.py: `aten::from_file` + `fill_` on a file
outside the workspace) through its real job worker: with the default the file is untouched and
the ops are listed under the policy's reason; ticking the box is the only way the op runs.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

pytest.importorskip("streamlit")
from crafted_et import FILLED, craft, snapshot
from streamlit.testing.v1 import AppTest

from engine.replay.reasons import SkipReason

ROOT = Path(__file__).resolve().parents[1]


def _ok(at) -> None:
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]


def _run_job(at, n: int) -> dict:
    from engine.workspace import Catalog, JobRunner

    at.button(key="run_replay").click()
    at.run()
    _ok(at)
    cat = Catalog(Path(os.environ["MYSTIQUE_UI_DIR"]) / "workspace")
    jobs = cat.jobs(kind="replay")
    assert len(jobs) == n
    done = JobRunner(cat).wait(jobs[-1]["id"], timeout_s=300)
    assert done["status"].value == "done", done.get("error")
    return done


@pytest.mark.slow
def test_replay_page_gate_is_off_by_default(tmp_path, monkeypatch, cache_dir):
    c = craft(tmp_path, relative=False)
    monkeypatch.setenv("MYSTIQUE_UI_DIR", str(tmp_path / "ui"))
    at = AppTest.from_file(str(ROOT / "app" / "main.py"), default_timeout=180)
    at.run()
    _ok(at)
    at.text_area(key="server_paths").input(str(c.et))
    at.text_input(key="path_name").input("crafted")
    at.button(key="load_path").click()
    at.run()
    _ok(at)
    at.switch_page("../pages/replay.py")
    at.run()
    _ok(at)
    at.selectbox(key="replay_trace").set_value("crafted")
    at.number_input(key="replay_iters").set_value(1)
    at.number_input(key="replay_warmup").set_value(0)
    at.run()
    assert at.checkbox(key="replay_allow_trace_code").value is False
    before = snapshot(tmp_path, skip=(tmp_path / "ui", tmp_path / "cache"))
    done = _run_job(at, 1)
    assert done["params"]["config"]["allow_trace_code"] is False
    by_reason = done["summary"]["coverage"]["by_reason"]
    assert by_reason[SkipReason.UNSAFE_OP.value] == len(c.hostile)
    assert snapshot(tmp_path, skip=(tmp_path / "ui", tmp_path / "cache")) == before
    at.checkbox(key="replay_allow_trace_code").check()
    at.run()
    done = _run_job(at, 2)
    assert done["params"]["config"]["allow_trace_code"] is True
    assert c.victim.read_bytes() == FILLED  # the box is the gate
