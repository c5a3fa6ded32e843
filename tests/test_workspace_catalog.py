"""The workspace keeps "nothing is lost" when its catalog or its disk goes bad (issue 26 item 5,
issue 25 §3 "Silent failures").

A real workspace is built once (a loaded trace, a spec, a setting and a finished replay job in
a worker process); each test copies it and damages its catalog.sqlite the way the hostile runs
did: corrupt, truncated, restructured, read-only (an immutable file as root, mode 0444 for
others), a newer schema. The dashboard (AppTest) must open every page, say so once, and lose
nothing saved elsewhere (the run folder, the damaged file itself, the traces' files). The
worker must record a finished job from its run folder when the catalog cannot be written
(`ulimit -f`: Python ignores SIGXFSZ, so the write fails with EFBIG as on a full disk), and
Cancel must end a SIGSTOPped worker so the queue moves on.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import ROOT, SAMPLES
from mdtext import shown

pytest.importorskip("streamlit")
psutil = pytest.importorskip("psutil")

MAIN = str(ROOT / "app" / "main.py")
MLP = SAMPLES / "mlp"
# a Compose spec as the page keeps it (app/compose_bridge.spec_state, one segment)
SPEC = {
    "version": 1,
    "name": "benchmark",
    "trace": "mine",
    "sources": [str(MLP / "mlp_et.json.gz")],
    "segments": [{"selection": {"ids": [5, 6]}, "source": 0, "repeat": 1, "label": "segment 1: 2 ops"}],
    "device": "cpu",
    "dtype": None,
    "batch_scale": 1.0,
    "warmup": 1,
    "iters": 5,
    "sharding": None,
}
PAGES = ("traces", "explore", "compose", "replay", "compare", "whatif")


def _sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def _params(iters: int = 1) -> dict:
    return {
        "paths": [str(MLP / "mlp_et.json.gz")],
        "op_ids": None,
        "rank": None,
        "config": {"device": "cpu", "warmup": 0, "iters": iters},
    }


@pytest.fixture(scope="module")
def saved_ws(tmp_path_factory) -> Path:
    """A workspace holding a trace, a spec, a setting and one finished replay (run by a worker)."""
    if not (MLP / "mlp_et.json.gz").exists():
        pytest.skip("bundled mlp sample missing (make samples)")

    base = tmp_path_factory.mktemp("saved")
    ws = base / "workspace"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MYSTIQUE_CACHE_DIR", str(base / "cache"))  # replay.json names the ET it was given
        _fill(ws)
    return ws


def _fill(ws: Path) -> None:
    from engine.workspace import Catalog, JobRunner

    cat = Catalog(ws)
    paths = [str(MLP / "mlp_et.json.gz"), str(MLP / "mlp_kineto.json.gz")]
    cat.put_trace("mine", {"paths": paths, "hash": "h", "kind": "execution_trace+kineto", "link_rate": 1.0})
    cat.put_spec("mine", SPEC)
    cat.put_settings({"replay_iters": 3, "session.current": "mine"})
    done = JobRunner(cat).wait(JobRunner(cat).submit("replay", _params(), trace="mine", target="whole trace"), 300)
    assert done["status"].value == "done", done.get("error")
    assert not list(ws.glob("catalog.sqlite-*"))  # closed cleanly: the file alone holds it all


@pytest.fixture()
def ws(saved_ws, tmp_path, monkeypatch, cache_dir) -> Path:
    """A private copy of the saved workspace, where the dashboard looks (MYSTIQUE_UI_DIR)."""
    ui = tmp_path / "ui"
    shutil.copytree(saved_ws, ui / "workspace")
    monkeypatch.setenv("MYSTIQUE_UI_DIR", str(ui))
    monkeypatch.delenv("MYSTIQUE_WORKSPACE", raising=False)
    return ui / "workspace"


def _result(ws: Path) -> Path:
    return ws / "runs" / "job_1" / "replay.json"


def _open_every_page(ws: Path) -> tuple[object, list[str]]:
    """A new session on the workspace, then every page; the catalog messages shown, all runs."""
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(MAIN, default_timeout=180)
    seen: list[str] = []

    def run(page: str | None) -> None:
        if page:
            at.switch_page(f"../pages/{page}.py")
        at.run()
        assert not at.exception, (page, [e.value for e in at.exception])
        seen.extend(shown(m.value) for m in [*at.error, *at.warning] if "catalog.sqlite" in shown(m.value))

    run(None)
    for page in PAGES:
        run(page)
    return at, seen


def _recovered(ws: Path, seen: list[str], at, damaged: bytes, reason: str) -> None:
    """One message naming the file, why, and where the damaged file went; the damaged bytes,
    the run folder and the finished run are all still there."""
    from engine.workspace import Catalog

    assert len(seen) == 1, seen
    msg = seen[0]
    assert "\n" not in msg and str(ws / "catalog.sqlite") in msg and reason in msg and "moved it aside" in msg, msg
    bad = [b for b in ws.glob("catalog.sqlite.bad-*") if not b.name.endswith(("-wal", "-shm"))]
    assert [b.name for b in bad] == [msg.split("aside to ")[1].split()[0]]
    assert bad[0].read_bytes() == damaged  # moved, never rewritten or deleted
    jobs = Catalog(ws).jobs(kind="replay")
    assert [(j["id"], j["status"].value, j["result_path"]) for j in jobs] == [(1, "done", str(_result(ws)))]
    assert jobs[0]["summary"]["median_ms"] > 0
    assert at.session_state["traces"], "the session has a trace to show"


@pytest.mark.slow
def test_corrupt_catalog_is_moved_aside_and_rebuilt_from_run_folders(ws):
    before = _result(ws).read_bytes()
    cat = ws / "catalog.sqlite"
    raw = bytearray(cat.read_bytes())
    raw[:100] = b"\xde\xad\xbe\xef" * 25  # the SQLite header is gone
    cat.write_bytes(bytes(raw))
    at, seen = _open_every_page(ws)
    _recovered(ws, seen, at, bytes(raw), "file is not a database")
    assert _result(ws).read_bytes() == before
    # the trace the run replayed comes back from the run folder
    assert any(e["paths"] == [str(MLP / "mlp_et.json.gz")] for e in at.session_state["traces"].values())


@pytest.mark.slow
def test_truncated_catalog_keeps_what_is_readable(ws):
    before = _result(ws).read_bytes()
    cat = ws / "catalog.sqlite"
    raw = cat.read_bytes()
    page = int.from_bytes(raw[16:18], "big")
    assert len(raw) >= 6 * page  # several pages, so the cut loses some of them
    cut = raw[: len(raw) // 2 // page * page]
    cat.write_bytes(cut)
    at, seen = _open_every_page(ws)
    _recovered(ws, seen, at, cut, "damaged")
    assert _result(ws).read_bytes() == before
    # the pages still there keep their rows: the trace and its spec come back
    assert "mine" in at.session_state["traces"]
    assert at.session_state["specs"]["mine"]["segments"] == SPEC["segments"]


@pytest.mark.slow
def test_restructured_catalog_salvages_rows_by_column_name(ws):
    cat = ws / "catalog.sqlite"
    with contextlib.closing(sqlite3.connect(cat)) as db:
        db.execute("ALTER TABLE jobs RENAME COLUMN result_path TO result")
        db.commit()
        db.execute("PRAGMA journal_mode=DELETE")
    damaged = cat.read_bytes()
    at, seen = _open_every_page(ws)
    _recovered(ws, seen, at, damaged, "restructured (no column jobs.result_path)")
    assert "mine" in at.session_state["traces"]  # salvaged rows: the trace, its spec, the settings
    assert at.session_state["specs"]["mine"]["segments"] == SPEC["segments"]


@pytest.fixture(params=["file", "folder"])
def read_only(ws, request):
    """catalog.sqlite (or its whole folder) made unwritable for this process: immutable as root
    (permission bits do not stop root), mode 0444 / 0555 otherwise."""
    cat = ws / "catalog.sqlite"
    target = cat if request.param == "file" else ws
    if os.geteuid() == 0:
        r = subprocess.run(["chattr", "+i", str(target)], capture_output=True, text=True)
        if r.returncode:
            pytest.skip(f"cannot make {target} immutable here: {r.stderr.strip()}")
    else:
        target.chmod(0o444 if target == cat else 0o555)
    yield cat
    if os.geteuid() == 0:
        subprocess.run(["chattr", "-i", str(target)], check=True)
    else:
        target.chmod(0o644 if target == cat else 0o755)


@pytest.mark.slow
def test_read_only_catalog_opens_read_only_and_refuses_saves_with_one_line(ws, read_only):
    before = _sha(read_only)
    at, seen = _open_every_page(ws)
    assert len(seen) == 1, seen
    assert seen[0].startswith(f"{read_only}: read-only") and "nothing new is saved" in seen[0], seen[0]
    assert "mine" in at.session_state["traces"] and at.session_state["specs"]["mine"]
    # a save (a sticky setting changes, a trace is loaded) is refused with the same line, not again
    at.switch_page("../pages/traces.py")
    at.run()
    at.text_area(key="server_paths").input(str(SAMPLES / "cnn" / "cnn_et.json.gz"))
    at.text_input(key="path_name").input("cnn")
    at.button(key="load_path").click()
    at.run()
    assert not at.exception and "cnn" in at.session_state["traces"]
    assert not [m for m in [*at.error, *at.warning] if "catalog.sqlite" in shown(m.value)]
    from engine.workspace import Catalog, CatalogError

    with pytest.raises(CatalogError, match="read-only"):
        Catalog(ws).put_spec("mine", {})
    assert _sha(read_only) == before and not list(ws.glob("catalog.sqlite.bad-*"))


def test_future_schema_is_read_only_and_refusals_name_both_versions(ws):
    from engine.workspace import Catalog, CatalogError
    from engine.workspace.schema import SCHEMA_VERSION

    cat = ws / "catalog.sqlite"
    with contextlib.closing(sqlite3.connect(cat)) as db:
        db.execute("ALTER TABLE traces ADD COLUMN owner TEXT")  # what a newer version might add
        db.execute("PRAGMA user_version = 99")
        db.commit()
    before = _sha(cat)
    at, seen = _open_every_page(ws)
    assert len(seen) == 1, seen
    assert f"schema version 99 is newer than this mystique-studio's {SCHEMA_VERSION}" in seen[0], seen[0]
    assert "mine" in at.session_state["traces"]  # its rows are read
    with pytest.raises(CatalogError, match=f"99 is newer than .* {SCHEMA_VERSION}: opened read-only"):
        Catalog(ws).put_trace("other", {"paths": ["x"]})
    with pytest.raises(CatalogError, match="99 is newer"):
        Catalog(ws).add_job("replay", _params())
    assert _sha(cat) == before


def test_older_catalog_is_migrated_in_order_keeping_its_rows(tmp_path):
    from engine.workspace import Catalog
    from engine.workspace.schema import MIGRATIONS, SCHEMA_VERSION

    ws = tmp_path / "ws"
    ws.mkdir()
    with contextlib.closing(sqlite3.connect(ws / "catalog.sqlite")) as db:
        db.executescript(MIGRATIONS[0])  # the tables as written before versions existed (version 0)
        db.execute("INSERT INTO settings VALUES ('k', '1')")
        db.commit()
    cat = Catalog(ws)
    assert cat.notice is None and cat.read_only is None and cat.settings() == {"k": 1}
    with contextlib.closing(sqlite3.connect(ws / "catalog.sqlite")) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert db.execute("SELECT name FROM sqlite_master WHERE name = 'jobs_status'").fetchone()


def _hold_wal_open(cat_path: Path, grow_kib: int) -> sqlite3.Connection:
    """A reader whose open snapshot keeps the WAL from being reset, after `grow_kib` KiB of
    committed writes: every later commit must extend catalog.sqlite-wal past that size."""
    db = sqlite3.connect(cat_path, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    reader = sqlite3.connect(cat_path, isolation_level=None)
    reader.execute("BEGIN")
    reader.execute("SELECT COUNT(*) FROM jobs").fetchone()
    for i in range(grow_kib // 4):
        db.execute("INSERT OR REPLACE INTO settings VALUES (?, ?)", (f"pad{i}", '"' + "x" * 3000 + '"'))
    db.close()
    return reader


def test_full_disk_save_in_the_app_is_one_error_and_the_session_keeps_it(ws):
    """A save the disk refuses (the WAL cannot grow past the file size limit) is shown once,
    and the trace stays loaded in the session (issue 25 §3: it was swallowed)."""
    import resource

    from streamlit.testing.v1 import AppTest

    from engine.trace import load

    at = AppTest.from_file(MAIN, default_timeout=180)
    at.run()
    at.switch_page("../pages/traces.py")
    at.run()
    cnn = SAMPLES / "cnn" / "cnn_et.json.gz"
    load(cnn)  # parsed (and cached) before the limit: only the catalog write is refused
    reader = _hold_wal_open(ws / "catalog.sqlite", grow_kib=256)
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (128 * 1024, hard))
    try:
        at.text_area(key="server_paths").input(str(cnn))
        at.text_input(key="path_name").input("cnn")
        at.button(key="load_path").click()
        at.run()
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        reader.close()
    assert not at.exception, [e.value for e in at.exception]
    errors = [shown(e.value) for e in at.error if "catalog.sqlite" in shown(e.value)]
    assert len(errors) == 1 and "cannot write" in errors[0] and "not saved" in errors[0], errors
    assert "cnn" in at.session_state["traces"]


@pytest.mark.slow
def test_full_disk_worker_records_its_finished_job_from_the_run_folder(saved_ws, tmp_path, cache_dir):
    """The worker's catalog writes fail (file size limit below the WAL's size, as a full disk
    would), its result fits: the job ends done with its result_path, the failure is one line
    in its log, nothing is left running."""
    from engine.trace import load
    from engine.workspace import Catalog, JobRunner, JobStatus

    ws = tmp_path / "workspace"
    shutil.copytree(saved_ws, ws)
    cat = Catalog(ws)
    load(MLP / "mlp_et.json.gz")  # the parse cache is written here, not by the limited worker
    job_id = cat.add_job("replay", _params(iters=2), trace="mine", target="whole trace")
    cat.update_job(job_id, status=JobStatus.RUNNING, started=time.time())
    reader = _hold_wal_open(cat.path, grow_kib=256)
    wal = Path(f"{cat.path}-wal")
    limit_kib = 128
    assert wal.stat().st_size > limit_kib * 1024
    log = ws / "runs" / f"job_{job_id}.log"
    with open(log, "wb") as err:
        proc = subprocess.Popen(
            ["bash", "-c", f"ulimit -f {limit_kib}; exec {sys.executable} -m engine.workspace.worker {ws} {job_id}"],
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT), "MYSTIQUE_CACHE_DIR": str(cache_dir)},
            stderr=err,
            stdout=subprocess.DEVNULL,
        )
        cat.update_job(job_id, pid=proc.pid)  # what pump records
        rc = proc.wait(timeout=300)
    reader.close()
    lines = [ln for ln in log.read_text().splitlines() if ln.strip()]
    assert "Traceback" not in log.read_text(), log.read_text()[-2000:]
    assert len(lines) == 1 and str(cat.path) in lines[0] and "cannot write" in lines[0], lines
    assert rc == 3  # the worker says its record failed
    result = ws / "runs" / f"job_{job_id}" / "replay.json"
    assert result.exists()
    before = cat.job(job_id)
    assert before["status"] == JobStatus.RUNNING  # nothing it wrote reached the catalog
    done = JobRunner(cat).wait(job_id, timeout_s=30)  # the reaper settles it from the run folder
    assert done["status"] == JobStatus.DONE and done["result_path"] == str(result)
    from engine import jsonio

    assert done["summary"]["median_ms"] == jsonio.loads(result.read_bytes())["median_ms"]
    assert "recorded from its run folder" in done["message"] and "cannot write" in done["message"]
    assert not psutil.pid_exists(proc.pid)


@pytest.mark.slow
def test_cancel_ends_a_stopped_worker_and_the_queue_moves_on(saved_ws, tmp_path):
    from engine.workspace import Catalog, JobRunner, JobStatus

    ws = tmp_path / "workspace"
    shutil.copytree(saved_ws, ws)
    cat = Catalog(ws)
    runner = JobRunner(cat)
    first = runner.submit("replay", _params(iters=50), trace="mine", target="stopped")
    second = runner.submit("replay", _params(), trace="mine", target="next")
    end = time.monotonic() + 60
    while not (cat.job(first) or {}).get("pid") and time.monotonic() < end:
        time.sleep(0.05)
    pid = cat.job(first)["pid"]
    os.kill(pid, signal.SIGSTOP)
    try:
        while psutil.Process(pid).status() != psutil.STATUS_STOPPED:
            time.sleep(0.02)
        t0 = time.monotonic()
        runner.cancel(first)  # TERM, then KILL after the grace period
        took = time.monotonic() - t0
        assert cat.job(first)["status"] == JobStatus.CANCELLED
        assert not psutil.pid_exists(pid)  # killed and reaped: not even a zombie
        assert not [p for p in psutil.process_iter() if _pgid(p.pid) == pid], "a process of its group is left"
        assert took < 10.0
        nxt = runner.wait(second, timeout_s=300)
        assert nxt["status"] == JobStatus.DONE, nxt.get("error")
    finally:
        with contextlib.suppress(OSError):
            os.killpg(pid, signal.SIGKILL)


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except OSError:
        return None


@pytest.mark.slow
def test_profiled_replay_keeps_profiler_chatter_off_stderr(tmp_path, cache_dir):
    """The profiler's USDT/STAGE lines went to the user's stderr on every replay; now the CLI's
    stderr is empty on success (clirun.one_line_error no longer filters them either)."""
    from clirun import cli

    r = cli(
        "replay", MLP / "mlp_et.json.gz", "--out", tmp_path / "out", "--iters", "1", "--warmup", "0", cache=cache_dir
    )
    assert r.returncode == 0, r.stderr[-2000:]
    assert (tmp_path / "out" / "replay_kineto.json.gz").exists()  # it was profiled
    assert r.stderr.strip() == "", r.stderr


def test_chatter_filter_keeps_real_errors_in_order():
    """Lines a library writes to fd 2 in the window: chatter dropped, everything else kept."""
    code = (
        "import os, sys\n"
        "from engine.chatter import drop_chatter\n"
        "with drop_chatter():\n"
        "    os.write(2, b'USDT:2026 x.cpp:52] profiler_start\\nreal error one\\n')\n"
        "    print('python warning', file=sys.stderr)\n"
        "    os.write(2, b'STAGE:2026 x.cpp:1] stage\\nreal error two\\n')\n"
        "print('after', file=sys.stderr)\n"
    )
    r = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert r.returncode == 0, r.stderr
    assert r.stderr.splitlines() == ["real error one", "python warning", "real error two", "after"]
