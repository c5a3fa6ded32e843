"""A crafted trace cannot make replay touch a file outside `--out` (issue 26 item 1).

The ET is the real MLP capture (sample_traces/mlp) with hostile nodes appended under its
profiler step: `aten::from_file(victim, shared=True)` then `aten::fill_` (overwrites the victim
through the shared mapping), `from_file` on a path that does not exist (creates it), `from_file`
on a path relative to the working folder, `aten::save`, `aten::load`, torchvision's and
`image::` file ops, and one node for every registered op whose schema has a path-like string
argument (the same scan as tests/test_replay_policy_scan.py), each pointing at its own target in
a folder outside `--out`. Replay through the CLI in a fresh process, single-process and with
`--mirror-rank` (two ranks), must leave that folder, the working folder and everything else
under the test's temporary folder byte-for-byte and mtime-for-mtime as they were, and list each
hostile node as skipped with the policy's reason. With `--allow-trace-code` the same trace
rewrites the victim and creates the new file: the gate really gates.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from clirun import cli
from conftest import ROOT
from crafted_et import FILLED, craft, snapshot

from engine.replay.reasons import SkipReason

UNSAFE = SkipReason.UNSAFE_OP.value


@pytest.fixture()
def crafted(tmp_path):
    (tmp_path / "cwd").mkdir()
    return craft(tmp_path)


def _run(tmp_path: Path, *args: str, script: str | None = None) -> subprocess.CompletedProcess:
    """`python -m engine.cli.main ARGS` (tests/clirun.py) or `python -I SCRIPT ARGS` (fresh) in a
    process of its own whose working folder is `tmp_path/cwd` (where a relative path in the trace
    would land)."""
    if script:
        env = {**os.environ, "PYTHONPATH": str(ROOT), "MYSTIQUE_CACHE_DIR": str(tmp_path / "cache")}
        cmd = [sys.executable, "-I", script, *args]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=tmp_path / "cwd", env=env)
    else:
        r = cli(*args, cache=tmp_path / "cache", cwd=tmp_path / "cwd", timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "Traceback" not in r.stderr
    return r


def _replay(et: Path, out: Path, tmp_path: Path, *extra: str) -> dict:
    _run(tmp_path, "replay", str(et), "--out", str(out), "--iters", "1", "--warmup", "0", "--no-profile", *extra)
    return json.loads((out / "replay.json").read_text())


def _skips(doc: dict, out: Path) -> list[dict]:
    """Skipped ops of a single-process result, or of every rank of a distributed one."""
    if doc.get("world_size", 1) > 1:
        return [s for p in sorted(out.glob("rank*/replay.json")) for s in json.loads(p.read_text())["skipped_ops"]]
    return doc["skipped_ops"]


def _unchanged(tmp_path: Path, before: dict, *skip: Path) -> None:
    after = snapshot(tmp_path, skip=(tmp_path / "cache", *skip))
    changed = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
    assert not changed, f"created, removed or changed outside --out: {changed}"  # bytes and mtimes


@pytest.mark.parametrize("mirror", [False, True], ids=["single-process", "mirror-rank"])
@pytest.mark.slow
def test_crafted_trace_touches_no_file_outside_out(crafted, tmp_path, mirror):
    out = tmp_path / "out"
    before = snapshot(tmp_path, skip=(out, tmp_path / "cache"))
    extra = ("--world-size", "2", "--mirror-rank", "0") if mirror else ()
    doc = _replay(crafted.et, out, tmp_path, *extra)
    _unchanged(tmp_path, before, out)
    assert crafted.victim.read_bytes() == bytes(range(64)) and not crafted.created.exists()
    assert list((tmp_path / "cwd").iterdir()) == []
    ranks = 2 if mirror else 1
    skipped = [s for s in _skips(doc, out) if s["op_id"] in crafted.hostile]
    assert len(skipped) == ranks * len(crafted.hostile)
    assert {s["reason"] for s in skipped} == {UNSAFE}
    assert all("--allow-trace-code" in s["detail"] for s in skipped)
    assert doc["coverage"]["by_reason"][UNSAFE] == ranks * len(crafted.hostile)
    assert doc["coverage"]["replayed"] > 0  # the rest of the MLP still replays


@pytest.mark.parametrize("mirror", [False, True], ids=["single-process", "mirror-rank"])
@pytest.mark.slow
def test_allow_trace_code_really_runs_the_op(crafted, tmp_path, mirror):
    extra = ("--world-size", "2", "--mirror-rank", "0") if mirror else ()  # the opt-in reaches every rank
    doc = _replay(crafted.et, tmp_path / "out", tmp_path, "--allow-trace-code", *extra)
    # the opt-in is what the gate holds back: from_file + fill_ rewrote the victim, made a file
    assert crafted.victim.read_bytes() == FILLED
    assert crafted.created.read_bytes() == FILLED
    assert (tmp_path / "cwd" / "relative_victim.bin").read_bytes() == FILLED
    assert UNSAFE not in doc["coverage"]["by_reason"]


@pytest.mark.slow
def test_compose_and_its_standalone_script_touch_no_file(crafted, tmp_path):
    """`compose` runs ops in its shape check, and `run_benchmark.py` replays with torch only."""
    spec = tmp_path / "spec.json"
    spec.write_text(
        json.dumps(
            {
                "version": 1,
                "name": "crafted",
                "sources": [str(crafted.et)],
                "segments": [{"selection": {}, "repeat": 1}],
                "device": "cpu",
                "warmup": 0,
                "iters": 1,
            }
        )
    )
    bench = tmp_path / "bench"
    before = snapshot(tmp_path, skip=(bench, tmp_path / "cache"))
    doc = json.loads(_run(tmp_path, "compose", str(spec), "--out", str(bench), "--json", "--script").stdout)
    assert any("--allow-trace-code" in u for u in doc["validation"]["0"]["meta"]["unchecked_ops"])
    res = json.loads(_run(tmp_path, "--iters", "1", "--warmup", "0", script=doc["script"]).stdout.splitlines()[-1])
    _unchanged(tmp_path, before, bench)
    assert res["skipped"]["unsafe op (--allow-trace-code)"] == len(crafted.hostile) and res["ran"] > 0
    _run(tmp_path, "--iters", "1", "--warmup", "0", "--allow-trace-code", script=doc["script"])
    assert crafted.victim.read_bytes() == FILLED  # the script's gate gates too


def test_dashboard_worker_touches_no_file(tmp_path):
    """The Replay page's job (engine.workspace.worker.run_replay) with the page's default config."""
    from engine.workspace.worker import run_replay

    c = craft(tmp_path, relative=False)
    out = tmp_path / "job"
    before = snapshot(tmp_path, skip=(out, tmp_path / "cache"))
    job = {"params": {"paths": [str(c.et)], "op_ids": None, "rank": None, "config": {"warmup": 0, "iters": 1}}}
    summary = run_replay(job, out, lambda f, m: None)["summary"]
    _unchanged(tmp_path, before, out)
    assert summary["coverage"]["by_reason"][UNSAFE] == len(c.hostile)
    job["params"]["config"]["allow_trace_code"] = True  # the page's "Allow trace code" checkbox
    run_replay(job, tmp_path / "job2", lambda f, m: None)
    assert c.victim.read_bytes() == FILLED
