"""The tests' CLI runner (tests/clirun.py): a process forked from the pre-imported parent
(tests/cliserver.py) answers exactly as a fresh interpreter does, and the calls that need a fresh
one get it."""

from __future__ import annotations

import json
import subprocess

import pytest
from clirun import MLP_ET, _same_startup, _server, cli, helper_pids
from conftest import ROOT, SAMPLES

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


@pytest.mark.parametrize("args", COMMANDS, ids=lambda a: " ".join(a)[:40])
def test_forked_and_fresh_cli_answer_alike(args, tmp_path):
    forked = cli(*args, cache=tmp_path / "a")
    assert _server() is not None, "the forking parent did not start"
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


def test_an_environment_the_parent_did_not_start_with_runs_fresh():
    base = {"PATH": "/bin", "OMP_NUM_THREADS": "2", "MYSTIQUE_CACHE_DIR": "/a"}
    assert _same_startup({**base, "MYSTIQUE_CACHE_DIR": "/b", "PYTEST_CURRENT_TEST": "t"}, base)
    assert not _same_startup({**base, "OMP_NUM_THREADS": "1"}, base)  # read when torch loads
    assert not _same_startup({**base, "PYTHONPATH": "/x"}, base)
    gone = dict(base)
    del gone["PATH"]
    assert not _same_startup(gone, base)


def test_a_timeout_kills_the_forked_process(tmp_path):
    """As `subprocess.run` does: TimeoutExpired, and the process is gone (no child left)."""
    import psutil

    big = ROOT / "sample_traces" / "transformer"
    with pytest.raises(subprocess.TimeoutExpired):
        cli("replay", big, "--iters", "100000", "--out", tmp_path / "o", cache=tmp_path / "c", timeout=3)
    ignore = helper_pids()
    for _ in range(50):
        left = [c for c in psutil.Process().children(recursive=True) if c.pid not in ignore]
        if not left:
            break
        psutil.wait_procs(left, timeout=0.2)
    assert not left, [c.cmdline() for c in left]
