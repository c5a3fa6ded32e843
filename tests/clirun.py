"""Running the CLI or Python in a fresh process, as a user would, and judging its error.

Shared by the fault tests (tests/test_faults_*.py, one test per numbered item of issue 16): a
fresh process has its own rlimits and peak RSS, and its stderr is what a user sees, so "one
line, exit 2, no traceback" is checked there. Each test drives the CLI in a subprocess (exit
code 2, one line on stderr naming the file and the problem, no traceback, the previous result
intact) and the API where there is one. Faults are real where the machine allows: `ulimit -v`
(address space), `ulimit -f` (file size: a "full disk" for the writer, since Python ignores
SIGXFSZ and write() then fails with EFBIG), a FIFO, a SIGKILLed run, a second process holding
the output folder.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

from conftest import ROOT, SAMPLES

MLP_ET = SAMPLES / "mlp" / "mlp_et.json.gz"
CNN = SAMPLES / "cnn"
DDP = SAMPLES / "ddp"


def run_fresh(cmd: list[str], *, cache: Path | None, timeout: float, pre: str = "") -> subprocess.CompletedProcess:
    """`cmd` in a fresh process at the repo root (optionally after shell `pre`, e.g. a ulimit):
    its rlimits and peak RSS are its own; `cache`: a private parse cache."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    if cache is not None:
        env["MYSTIQUE_CACHE_DIR"] = str(cache)
    if pre:
        cmd = ["bash", "-c", f"{pre}; exec {shlex.join(cmd)}"]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT, env=env)


def cli(*args, cache: Path, timeout: float = 180, pre: str = "") -> subprocess.CompletedProcess:
    """`mystique ARGS` in a fresh process."""
    return run_fresh([sys.executable, "-m", "engine.cli.main", *map(str, args)], cache=cache, timeout=timeout, pre=pre)


def python(code: str, *, cache: Path | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    """Python `code` in a fresh process."""
    return run_fresh([sys.executable, "-c", code], cache=cache, timeout=timeout)


def one_line_error(r: subprocess.CompletedProcess, *needles: str) -> str:
    """Exit 2, exactly one stderr line, no traceback, with `needles` (library chatter such as the
    profiler's USDT/STAGE lines counts as a line: users read this stderr)."""
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode == 2, (r.returncode, r.stderr[-2000:])
    assert "Traceback" not in r.stderr, r.stderr[-2000:]
    assert len(lines) == 1, lines
    for n in needles:
        assert n in lines[0], lines[0]
    return lines[0]


def replay_ok(out: Path, cache: Path, trace=MLP_ET) -> bytes:
    r = cli("replay", trace, "--out", out, "--iters", "1", "--warmup", "0", "--no-profile", cache=cache)
    assert r.returncode == 0, r.stderr[-2000:]
    return (out / "replay.json").read_bytes()
