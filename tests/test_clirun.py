"""The tests' CLI runner (tests/clirun.py): a process forked from the pre-imported parent
(tests/cliserver.py) answers exactly as a fresh interpreter does, and the calls that need a fresh
one get it."""

from __future__ import annotations

import json
import os
import subprocess

import pytest
from clirun import _SERVERS, MLP_ET, cli, helper_pids, startup_env
from conftest import ROOT, SAMPLES

forking = pytest.mark.skipif(
    os.environ.get("MYSTIQUE_TEST_FRESH_CLI") == "1", reason="MYSTIQUE_TEST_FRESH_CLI=1: every CLI call runs fresh"
)

# a summary, a prediction (its own timings left out), two refusals
TIMINGS = {"seconds", "sim_s", "build_s", "tasks_per_s", "tasks_per_s_schedule"}


def _untimed(out: str) -> object:
    """stdout, with a JSON document's measured durations of the simulator itself left out."""
    if not out.startswith("{"):
        return out

    def strip(x):
        if isinstance(x, dict):
            return {k: strip(v) for k, v in x.items() if k not in TIMINGS}
        return [strip(v) for v in x] if isinstance(x, list) else x

    return strip(json.loads(out))


COMMANDS = (
    ("info", str(MLP_ET)),
    ("simulate", str(SAMPLES / "mlp"), "--json"),
    ("info", "/nonexistent/trace.json"),
    ("simulate", str(SAMPLES / "mlp"), "--device", "Z80"),
)


@forking
@pytest.mark.parametrize("args", COMMANDS, ids=lambda a: " ".join(a)[:40])
@pytest.mark.slow
def test_forked_and_fresh_cli_answer_alike(args, tmp_path):
    forked = cli(*args, cache=tmp_path / "a")
    assert any(s.ready for s in _SERVERS.values()), "the forking parent did not start"
    fresh = cli(*args, cache=tmp_path / "b", fresh=True)
    assert forked.returncode == fresh.returncode and forked.stderr == fresh.stderr, (forked.stderr, fresh.stderr)
    assert _untimed(forked.stdout) == _untimed(fresh.stdout)


def test_forked_cli_keeps_its_exit_code_folder_and_environment(tmp_path, monkeypatch):
    """The request's working folder and MYSTIQUE_* variables reach the child; a refusal is exit 2
    with one line and no traceback (as a fresh process gives it)."""
    monkeypatch.setenv("MYSTIQUE_CACHE_DIR", str(tmp_path / "mine"))
    (tmp_path / "rel.json").write_text("{not json")
    r = cli("info", "rel.json", cache=None, cwd=tmp_path)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "rel.json" in r.stderr and "Traceback" not in r.stderr
    ok = cli("info", "--json", MLP_ET, cache=None)
    assert ok.returncode == 0 and json.loads(ok.stdout)["nodes"] == 289  # hand-counted: the sample ET's node list
    assert (tmp_path / "mine").is_dir()  # the parse cache the child was told to use


@forking
@pytest.mark.slow
def test_each_startup_environment_has_its_own_parent(tmp_path, monkeypatch):
    """A variable that a fresh interpreter reads before the CLI runs (OMP_NUM_THREADS: when torch
    loads) gets a parent started with it; the project's own and pytest's variables do not."""
    base = {"PATH": "/bin", "OMP_NUM_THREADS": "2", "MYSTIQUE_CACHE_DIR": "/a"}
    assert startup_env({**base, "MYSTIQUE_CACHE_DIR": "/b", "PYTEST_CURRENT_TEST": "t"}) == startup_env(base)
    assert startup_env({**base, "OMP_NUM_THREADS": "1"}) != startup_env(base)
    gone = dict(base)
    del gone["PATH"]
    assert startup_env(gone) != startup_env(base)
    cli("info", MLP_ET, cache=tmp_path / "a")
    import clirun

    n = len(_SERVERS)
    monkeypatch.setattr(clirun, "MAX_SERVERS", n + 1)
    monkeypatch.setenv("OMP_NUM_THREADS", "3")  # not Dask's 1 (a cluster earlier in this process sets it)
    r = cli("info", MLP_ET, cache=tmp_path / "b")
    assert r.returncode == 0 and len(_SERVERS) == n + 1
    import psutil

    # the new parent itself started (and loaded torch's OpenMP) with the variable
    new = _SERVERS[startup_env({**os.environ, "PYTHONPATH": str(ROOT)})]
    assert psutil.Process(new.proc.pid).environ().get("OMP_NUM_THREADS") == "3"


@pytest.mark.slow
def test_a_timeout_kills_the_forked_process(tmp_path):
    """As `subprocess.run` does: TimeoutExpired, and the process is gone (no child left)."""
    import psutil

    big = ROOT / "sample_traces" / "transformer"
    cli("info", MLP_ET, cache=tmp_path / "c")  # the forking parent is up before the snapshot
    before = {c.pid for c in psutil.Process().children(recursive=True)}
    with pytest.raises(subprocess.TimeoutExpired):
        cli("replay", big, "--iters", "100000", "--out", tmp_path / "o", cache=tmp_path / "c", timeout=3)
    ignore = before | helper_pids()
    for _ in range(50):
        left = [c for c in psutil.Process().children(recursive=True) if c.pid not in ignore]
        if not left:
            break
        psutil.wait_procs(left, timeout=0.2)
    assert not left, [c.cmdline() for c in left]


@pytest.mark.slow
def test_a_parent_that_cannot_start_the_call_leaves_it_to_a_fresh_process(tmp_path):
    """A parent whose socket is gone answers None (nothing ran) and serves no more; `cli` then
    runs the call fresh."""
    import clirun

    srv = clirun._Server({**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        assert srv.ready
        os.unlink(srv.path)
        cmd = ["python", "-m", "engine.cli.main", "info", str(MLP_ET)]
        assert srv.run(cmd, dict(os.environ), 30, ROOT) is None and not srv.ready
    finally:
        srv.close()
    assert srv.proc.poll() is not None  # closing its stdin stopped it
