"""Round 4 of the hostile runs (issue 31): one test per numbered item beyond the SQL sandbox,
the Markdown and the terminal (tests/test_sql_sandbox.py, test_app_markdown.py,
test_cli_control_chars.py). Each drives the CLI in a fresh process where there is one (exit 2,
one line naming the file, no traceback; nothing lost, bytes compared) and the API otherwise.
"""

from __future__ import annotations

import gzip
import hashlib
import json
from pathlib import Path

import pytest
from clirun import DDP, cli, one_line_error
from conftest import SAMPLES

from engine.errors import TraceError

MLP = SAMPLES / "mlp"


def _sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


# 12 -------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_12_duplicate_top_level_keys_are_refused_by_loader_and_store(tmp_path, cache_dir):
    """Two `traceEvents` arrays: `info` read the last, the store the first. Both refuse now, and
    so for any top-level key written twice (also through a JSON escape in the key)."""
    from engine.trace import load
    from engine.trace.store import build

    ev = '{"ph": "X", "cat": "cpu_op", "name": "%s", "ts": 1, "dur": 2, "pid": 1, "tid": 1}'
    docs = {
        "two_arrays.json": '{{"traceEvents": [{}], "traceEvents": [{}, {}]}}'.format(ev % "a", ev % "b", ev % "b"),
        "escaped_key.json": '{{"traceEvents": [{}], "trace\\u0045vents": [{}]}}'.format(ev % "a", ev % "b"),
        "two_ranks.json": '{"distributedInfo": {"rank": 0}, "traceEvents": [%s], "distributedInfo": {"rank": 3}}'
        % (ev % "a"),
    }
    for name, text in docs.items():
        p = tmp_path / name
        p.write_text(text)
        before = _sha(p)
        with pytest.raises(TraceError, match="appears twice"):
            load(p, use_cache=False)
        with pytest.raises(TraceError, match="appears twice"):
            build(p, use_cache=False)
        for cmd in (("info", p), ("sql", p, "SELECT count(*) FROM events")):
            one_line_error(cli(*cmd, cache=cache_dir), name, "appears twice")
        assert _sha(p) == before
    ok = tmp_path / "ok.json"  # a key repeated inside events is nobody's business
    ok.write_text('{"traceEvents": [%s], "x": {"a": 1, "a": 2}}' % (ev % "a"))
    assert len(load(ok, use_cache=False).events) == 1


# 13 -------------------------------------------------------------------------------------------
def test_13_store_refuses_two_files_declaring_the_same_rank(tmp_path, cache_dir):
    """Two Kineto files that both declare rank 0 were merged into one rank; replay refuses two
    such ETs, and now the store refuses them too, naming both files."""
    import shutil

    job = tmp_path / "job"
    job.mkdir()
    a = Path(shutil.copy(DDP / "ddp_rank0_kineto.json.gz", job / "a_kineto.json.gz"))
    b = Path(shutil.copy(DDP / "ddp_rank0_kineto.json.gz", job / "b_kineto.json.gz"))
    before = {p: _sha(p) for p in (a, b)}
    msg = one_line_error(cli("sql", job, "SELECT count(*) FROM events", cache=cache_dir), "declares rank 0")
    assert str(a) in msg and str(b) in msg, msg
    assert {p: _sha(p) for p in (a, b)} == before
    store = cache_dir / "store"
    assert not list(store.glob("*/manifest.json")) and not [d for d in store.iterdir() if d.name.startswith(".")]
    ok = cli("sql", DDP, "SELECT count(DISTINCT rank) AS n FROM events", "--json", cache=cache_dir)
    assert ok.returncode == 0 and json.loads(ok.stdout) == [{"n": 2}], ok.stderr  # distinct ranks still store


# 14 -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("where", ["cap", "cap/sub", "."])
def test_14_replay_out_inside_its_own_inputs_is_refused(tmp_path, cache_dir, where, monkeypatch):
    """`replay cap --out cap` wrote the replay's trace into the capture, which then failed `info`
    and doubled in `sql`. An --out that holds the inputs or lies inside them is refused before
    anything runs, and the capture is byte for byte what it was."""
    import shutil

    cap = tmp_path / "cap"
    shutil.copytree(MLP, cap)
    before = {p.name: _sha(p) for p in cap.iterdir()}
    r = cli("replay", cap, "--out", tmp_path / where, "--iters", "1", "--warmup", "0", "--no-profile", cache=cache_dir)
    one_line_error(r, str(cap), "--out")
    assert {p.name: _sha(p) for p in cap.iterdir()} == before


# 16 -------------------------------------------------------------------------------------------
def test_16_simulate_never_reports_a_negative_measured_step(tmp_path, cache_dir):
    """ProfilerStep spans whose end is before their start: `simulate` said "measured -63.432 ms,
    error -199.87 %". Now there is no measured step, and a warning says why."""
    doc = json.loads(gzip.decompress((MLP / "mlp_kineto.json.gz").read_bytes()))
    steps = [e for e in doc["traceEvents"] if str(e.get("name", "")).startswith("ProfilerStep#")]
    assert steps
    for e in steps:
        e["dur"] = -e["dur"]
    p = tmp_path / "backwards.json"
    p.write_text(json.dumps(doc))
    r = cli("simulate", p, "--json", cache=cache_dir)
    assert r.returncode == 0, r.stderr[-2000:]
    out = json.loads(r.stdout)
    assert out["measured_iteration_ms"] is None and out["error_pct"] is None, out
    assert any("run backwards" in w for w in out["warnings"]), out["warnings"]
    human = cli("simulate", p, cache=cache_dir)
    assert "measured -" not in human.stdout and "run backwards" in human.stdout + human.stderr


# 17 -------------------------------------------------------------------------------------------
def test_17_staging_of_a_killed_build_is_swept_at_the_next(tmp_path, cache_dir):
    """A store build SIGKILLed mid-way left `.<key>-xxxx` in the store root for good. The next
    build sweeps it (its lock died with it); a running build's folder (lock held) stays."""
    import fcntl
    import os
    import signal
    import subprocess
    import sys
    import time

    from conftest import ROOT

    flag = tmp_path / "started"
    code = (
        "import time, pathlib\n"
        "from engine.trace.store import ingest\n"
        f"def slow(job):\n    pathlib.Path({str(flag)!r}).write_text('x'); time.sleep(120)\n"
        "ingest._ingest_file = slow\n"
        f"ingest.build({str(MLP / 'mlp_kineto.json.gz')!r}, scheduler='serial')\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MYSTIQUE_CACHE_DIR": str(cache_dir)}
    p = subprocess.Popen([sys.executable, "-c", code], env=env, cwd=ROOT)
    try:
        end = time.monotonic() + 60
        while not flag.exists():
            assert p.poll() is None and time.monotonic() < end, "the build never started"
            time.sleep(0.1)
    finally:
        p.send_signal(signal.SIGKILL)
        p.wait()
    store = cache_dir / "store"
    left = [d.name for d in store.iterdir() if d.name.startswith(".")]
    assert len(left) == 1, left
    live = store / ".0123456789abcdef-live"  # another build, running now: its lock is held
    live.mkdir()
    fd = os.open(live / ".building", os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        r = cli("sql", MLP / "mlp_kineto.json.gz", "SELECT count(*) AS n FROM events", "--json", cache=cache_dir)
        assert r.returncode == 0 and json.loads(r.stdout)[0]["n"] > 0, r.stderr
        assert sorted(d.name for d in store.iterdir() if d.name.startswith(".")) == [live.name]
    finally:
        os.close(fd)


# 15 -------------------------------------------------------------------------------------------
def test_15_ranks_page_keeps_a_loaded_traces_paths_as_a_list(tmp_path, monkeypatch, cache_dir):
    """A loaded trace whose folder holds ';' opened the Ranks page as two wrong paths (the list
    was joined on ';' and split again). Its paths now travel as a list: the job builds."""
    import os
    import shutil

    pytest.importorskip("streamlit")
    from streamlit.testing.v1 import AppTest

    from engine.workspace import Catalog, JobRunner

    monkeypatch.setenv("MYSTIQUE_UI_DIR", str(tmp_path / "ui"))
    monkeypatch.delenv("MYSTIQUE_APP_SCHEDULER", raising=False)
    job = tmp_path / "run;42"
    job.mkdir()
    files = [str(shutil.copy(p, job)) for p in sorted(DDP.glob("ddp_rank*_kineto.json.gz"))]
    at = AppTest.from_file(str(Path(__file__).resolve().parents[1] / "app" / "main.py"), default_timeout=180)
    at.run()
    at.switch_page("../pages/traces.py")
    at.run()
    at.text_area(key="server_paths").input("\n".join(files))
    at.text_input(key="path_name").input("job")
    at.button(key="load_path").click()
    at.run()
    assert at.session_state["current"] == "job", [e.value for e in at.error]
    at.switch_page("../pages/ranks.py")
    at.run()
    next(t for t in at.text_input if t.label.startswith("Fan-out scheduler")).input("serial")
    at.run()
    assert not at.exception and not at.error, [e.value for e in [*at.exception, *at.error]]
    at.button(key="ov_build").click()
    at.run()
    cat = Catalog(Path(os.environ["MYSTIQUE_UI_DIR"]) / "workspace")
    (j,) = cat.jobs(kind="rank_summary")
    assert j["params"]["paths"] == files
    done = JobRunner(cat).wait(j["id"], timeout_s=300)
    assert done["status"].value == "done" and done["summary"]["ranks"] == 2, done.get("error")


# 4 --------------------------------------------------------------------------------------------
def test_4_trace_names_are_unique_per_workspace_across_processes(tmp_path):
    """Two dashboards on one workspace each loaded a file named k.json: the second silently
    replaced the first's trace. Now the catalog gives the second `k.json (2)`; the same files
    under the same name are the same trace (no duplicate)."""
    from clirun import python

    from engine.workspace import Catalog

    ws = tmp_path / "ws"
    a = Catalog(ws)
    assert a.add_trace("k.json", {"paths": ["/a/k.json"], "hash": "A"}) == "k.json"
    code = (
        "from engine.workspace import Catalog\n"
        f"c = Catalog(__import__('pathlib').Path({str(ws)!r}))\n"
        "print(c.add_trace('k.json', {'paths': ['/b/k.json'], 'hash': 'B'}))\n"
        "print(c.add_trace('k.json', {'paths': ['/c/k.json'], 'hash': 'C'}))\n"
    )
    r = python(code)
    assert r.returncode == 0 and r.stdout.split("\n")[:2] == ["k.json (2)", "k.json (3)"], r.stderr
    assert a.add_trace("k.json", {"paths": ["/a/k.json"], "hash": "A2"}) == "k.json"  # reloaded in place
    got = {n: (e["paths"], e["hash"]) for n, e in a.traces().items()}
    assert got == {
        "k.json": (["/a/k.json"], "A2"),
        "k.json (2)": (["/b/k.json"], "B"),
        "k.json (3)": (["/c/k.json"], "C"),
    }


# 9 --------------------------------------------------------------------------------------------
def test_9_catalog_moved_away_under_a_running_dashboard_is_recreated(tmp_path, monkeypatch, cache_dir):
    """Moving catalog.sqlite away while the dashboard ran put a traceback on the Traces page. It
    is recreated, the page works, and a warning says what happened; the moved file is intact."""
    pytest.importorskip("streamlit")
    from mdtext import shown
    from streamlit.testing.v1 import AppTest

    monkeypatch.setenv("MYSTIQUE_UI_DIR", str(tmp_path / "ui"))
    at = AppTest.from_file(str(Path(__file__).resolve().parents[1] / "app" / "main.py"), default_timeout=180)
    at.run()
    at.switch_page("../pages/traces.py")
    at.run()
    assert not at.exception
    cat = tmp_path / "ui" / "workspace" / "catalog.sqlite"
    moved = tmp_path / "moved.sqlite"
    cat.rename(moved)
    before = _sha(moved)
    seen = []
    for _ in range(2):
        at.run()
        assert not at.exception, [e.value for e in at.exception]
        seen += [shown(w.value) for w in [*at.warning, *at.error]]
    assert any(str(cat) in w and "recreated it" in w for w in seen), seen
    assert cat.is_file() and _sha(moved) == before
    at.text_area(key="server_paths").input(str(MLP / "mlp_kineto.json.gz"))
    at.text_input(key="path_name").input("again")
    at.button(key="load_path").click()
    at.run()
    assert not at.exception and "again" in at.session_state["traces"]
    from engine.workspace import Catalog

    assert "again" in Catalog(cat.parent).traces()


def test_4_two_dashboards_loading_the_same_file_name_keep_both(tmp_path, monkeypatch, cache_dir):
    """The user's path: two dashboard sessions on one workspace each load a different k.json.gz
    under its default name (the file name). Both traces stay in the workspace."""
    import shutil

    pytest.importorskip("streamlit")
    from streamlit.testing.v1 import AppTest

    from engine.workspace import Catalog

    monkeypatch.setenv("MYSTIQUE_UI_DIR", str(tmp_path / "ui"))
    files = []
    for sub, src in (("a", MLP / "mlp_kineto.json.gz"), ("b", SAMPLES / "cnn" / "cnn_kineto.json.gz")):
        (tmp_path / sub).mkdir()
        files.append(str(shutil.copy(src, tmp_path / sub / "k.json.gz")))
    sessions = []
    for _ in files:  # both open before either loads: each sees a workspace without k.json.gz
        at = AppTest.from_file(str(Path(__file__).resolve().parents[1] / "app" / "main.py"), default_timeout=180)
        at.run()
        at.switch_page("../pages/traces.py")
        at.run()
        sessions.append(at)
    for at, f in zip(sessions, files, strict=True):
        at.text_area(key="server_paths").input(f)
        at.button(key="load_path").click()
        at.run()
        assert not at.exception and not at.error, [e.value for e in [*at.exception, *at.error]]
    got = {n: e["paths"] for n, e in Catalog(tmp_path / "ui" / "workspace").traces().items() if n.startswith("k.json")}
    assert got == {"k.json.gz": [files[0]], "k.json.gz (2)": [files[1]]}, got
    assert "k.json.gz (2)" in sessions[1].session_state["traces"]


# 8 and 11 -------------------------------------------------------------------------------------
def test_8_tls_scheduler_without_tls_settings_is_one_line(cache_dir):
    """`--scheduler tls://...` ended in a TypeError traceback from Dask's TLS layer."""
    r = cli("sql", DDP, "SELECT 1", "--scheduler", "tls://127.0.0.1:8786", cache=cache_dir, timeout=60)
    one_line_error(r, "tls://127.0.0.1:8786", "TLS settings")


@pytest.mark.slow
def test_11_a_listener_that_does_not_speak_dask_is_refused_in_seconds(cache_dir, monkeypatch):
    """Something listens at the address (a plain TCP server that accepts and says nothing): the
    client's start-up hung past 120 s. Its whole start-up, handshake included, has one deadline,
    MYSTIQUE_DASK_CONNECT_S here (2 s instead of the default 10: the message and the wall time
    show the knob is the one obeyed)."""
    import socket
    import threading
    import time

    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(16)
    held: list[socket.socket] = []
    stop = threading.Event()

    def serve() -> None:
        srv.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(srv.accept()[0])
            except OSError:
                continue

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    addr = f"tcp://127.0.0.1:{srv.getsockname()[1]}"
    monkeypatch.setenv("MYSTIQUE_DASK_CONNECT_S", "2")
    try:
        t0 = time.monotonic()
        r = cli("sql", DDP, "SELECT 1", "--scheduler", addr, cache=cache_dir, timeout=110)
        wall = time.monotonic() - t0
    finally:
        stop.set()
        t.join()
        for c in held:
            c.close()
        srv.close()
    one_line_error(r, addr, "no Dask handshake within 2 s", "MYSTIQUE_DASK_CONNECT_S")
    assert 2 <= wall < 45, wall  # it waited the deadline asked for, not the default's 10 s
    assert held, "the client never connected: the test did not test the handshake"


@pytest.mark.parametrize("value", ["0", "601", "1.5", "soon"])
@pytest.mark.slow
def test_11_a_bad_connect_deadline_is_refused_not_clamped(cache_dir, monkeypatch, value):
    """MYSTIQUE_DASK_CONNECT_S outside whole seconds 1-600 is one line naming it, before any
    connection is tried (the address is a refused port: a clamp would report that instead)."""
    monkeypatch.setenv("MYSTIQUE_DASK_CONNECT_S", value)
    r = cli("sql", DDP, "SELECT 1", "--scheduler", "tcp://127.0.0.1:1", cache=cache_dir, timeout=60)
    one_line_error(r, "MYSTIQUE_DASK_CONNECT_S must be whole seconds from 1 to 600", repr(value))


# 5 --------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_5_replay_bounds_ops_whose_outputs_come_from_scalars_or_shapes(tmp_path, cache_dir):
    """`arange(end=N)`, `eye(n)` and `outer(a, b)` recorded with 16-element outputs allocated what
    their arguments say (1.93 GB against a bound of 509 MB, then an OOM kill). Their outputs are
    now computed on the meta device first: each is skipped with its own reason and the sizes in
    its detail, and the rest of the MLP replays as before."""
    import sys

    sys.path.insert(0, str(Path(__file__).parent))
    from crafted_et import OUTSIZED_MIB, _Builder, outsized_factories

    b = _Builder()
    ids = outsized_factories(b)
    et = tmp_path / "big_et.json.gz"
    et.write_bytes(gzip.compress(json.dumps(b.doc).encode()))
    out = tmp_path / "out"
    r = cli("replay", et, "--out", out, "--iters", "1", "--warmup", "0", "--no-profile", "--json", cache=cache_dir)
    assert r.returncode == 0, r.stderr[-2000:]
    doc = json.loads((out / "replay.json").read_text())
    skipped = {s["op_id"]: s for s in doc["skipped_ops"]}
    for i, mib in zip(ids, OUTSIZED_MIB, strict=True):
        assert skipped[i]["reason"] == "allocates more than the trace records (outputs computed on the meta device)"
        assert f"{mib:,.1f} MiB" in skipped[i]["detail"], skipped[i]
    assert set(skipped) == set(ids), skipped  # nothing else in the MLP is refused
