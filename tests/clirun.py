"""Running the CLI or Python in a fresh process, as a user would, and judging its error.

Shared by the fault tests (tests/test_faults_*.py, one test per numbered item of issue 16): a
fresh process has its own rlimits and peak RSS, and its stderr is what a user sees, so "one
line, exit 2, no traceback" is checked there. Each test drives the CLI in a subprocess (exit
code 2, one line on stderr naming the file and the problem, no traceback, the previous result
intact) and the API where there is one. Faults are real where the machine allows: `ulimit -v`
(address space), `ulimit -f` (file size: a "full disk" for the writer, since Python ignores
SIGXFSZ and write() then fails with EFBIG), a FIFO, a SIGKILLed run, a second process holding
the output folder.

`cli` runs the CLI in a process forked from a parent that has already imported torch, pandas and
numpy (tests/cliserver.py: the same exit code, stdout, stderr, folder and environment, ~1.5 CPU-s
less per replay), unless the call needs a fresh interpreter: `pre` (rlimits), `fresh=True` (a
peak RSS measured), or MYSTIQUE_TEST_FRESH_CLI=1 (every call fresh, to check that the two
agree). A parent serves the calls of one startup environment (`startup_env`); another
environment starts another.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

from conftest import ROOT, SAMPLES

MLP_ET = SAMPLES / "mlp" / "mlp_et.json.gz"
CNN = SAMPLES / "cnn"
DDP = SAMPLES / "ddp"


def _env(cache: Path | None) -> dict[str, str]:
    """This process's environment with the repo on PYTHONPATH and, given one, a private parse cache."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    if cache is not None:
        env["MYSTIQUE_CACHE_DIR"] = str(cache)
    return env


def run_fresh(
    cmd: list[str], *, cache: Path | None, timeout: float, pre: str = "", cwd: Path = ROOT
) -> subprocess.CompletedProcess:
    """`cmd` in a fresh process at `cwd` (the repo root; optionally after shell `pre`, e.g. a
    ulimit): its rlimits and peak RSS are its own; `cache`: a private parse cache."""
    env = _env(cache)
    if pre:
        cmd = ["bash", "-c", f"{pre}; exec {shlex.join(cmd)}"]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=cwd, env=env)


def cli(
    *args, cache: Path | None, timeout: float = 180, pre: str = "", fresh: bool = False, cwd: Path = ROOT
) -> subprocess.CompletedProcess:
    """`mystique ARGS` in a process of its own: forked from the pre-imported parent where nothing
    needs a fresh interpreter (module docstring), else fresh. `cache`: a private parse cache
    (None: the session's)."""
    cmd = [sys.executable, "-m", "engine.cli.main", *map(str, args)]
    env = _env(cache)
    server = None if pre or fresh or os.environ.get("MYSTIQUE_TEST_FRESH_CLI") == "1" else _server(env)
    r = server.run(cmd, env, timeout, cwd) if server is not None else None
    return r if r is not None else run_fresh(cmd, cache=cache, timeout=timeout, pre=pre, cwd=cwd)


def startup_env(env: dict[str, str]) -> frozenset:
    """What of `env` a fresh interpreter reads before the CLI runs (Python's own variables,
    OMP_NUM_THREADS when torch loads, ...): all of it but the project's own variables, which the
    engine reads at call time, and pytest's (PYTEST_CURRENT_TEST, set per test). A forking parent
    serves only requests whose startup environment is its own."""
    return frozenset((k, v) for k, v in env.items() if not k.startswith(("MYSTIQUE_", "PYTEST_")))


class _Server:
    """A forking parent of this test process, started with one startup environment."""

    def __init__(self, env: dict[str, str]) -> None:
        self.dir = tempfile.mkdtemp(prefix="mystique-cli-")
        if len(self.dir) > 90:  # a socket's path holds 107 bytes at most
            os.rmdir(self.dir)
            self.dir = tempfile.mkdtemp(prefix="mystique-cli-", dir="/tmp")
        self.path = os.path.join(self.dir, "s")
        self.env = env
        self.proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).with_name("cliserver.py")), self.path],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=ROOT, env=self.env, text=True,
        )  # fmt: skip
        self.ready = self.proc.stdout.readline().strip() == "ready"
        self.cpu_s = 0.0  # the forked processes' CPU time (not in this process's RUSAGE_CHILDREN)
        atexit.register(self.close)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        with contextlib.suppress(OSError):
            os.unlink(self.path)
        with contextlib.suppress(OSError):
            os.rmdir(self.dir)

    def run(self, cmd: list[str], env: dict[str, str], timeout: float, cwd: Path) -> subprocess.CompletedProcess | None:
        """`cmd` forked; None when the parent could not start it (gone, refused): then nothing ran."""
        with (
            tempfile.TemporaryFile() as out,
            tempfile.TemporaryFile() as err,
            socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as s,
        ):
            req = {"argv": [str(ROOT / "engine" / "cli" / "main.py"), *cmd[3:]], "cwd": str(cwd), "env": env}
            try:
                s.connect(self.path)
                socket.send_fds(s, [json.dumps(req).encode()], [out.fileno(), err.fileno()])
                pid = json.loads(s.recv(4096))["pid"]
            except (OSError, ValueError, KeyError):
                self.ready = False  # the later calls run fresh too
                return None
            s.settimeout(timeout)
            try:
                reply = s.recv(4096)
                if not reply:
                    raise RuntimeError(f"the forking parent {self.proc.pid} went away while {pid} ran: {cmd[3:]}")
                done = json.loads(reply)
                rc = done["rc"]
                self.cpu_s += done["cpu_s"]
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                raise subprocess.TimeoutExpired(cmd, timeout, _text(out), _text(err)) from None
            return subprocess.CompletedProcess(cmd, rc, _text(out), _text(err))


def _text(f) -> str:
    """A captured stream as `subprocess.run(text=True)` gives it (locale encoding, universal newlines)."""
    import locale

    f.seek(0)
    data = f.read().decode(locale.getpreferredencoding(False))
    return data.replace("\r\n", "\n").replace("\r", "\n")


_SERVERS: dict[frozenset, _Server] = {}
MAX_SERVERS = 4  # one per startup environment seen (a Dask cluster in the test process sets OMP_NUM_THREADS, ...)


def helper_pids() -> set[int]:
    """Pids of this process's children that are test machinery, not work a test started (the
    forking parents): what a "no child left behind" check leaves out. Their forked CLI processes
    are not in it."""
    return {s.proc.pid for s in _SERVERS.values() if s.proc.poll() is None}


def _server(env: dict[str, str]) -> _Server | None:
    """The forking parent for `env`'s startup environment, started on its first request (None
    where it did not start, has gone, or too many are running: the call then runs fresh)."""
    key = startup_env(env)
    if key not in _SERVERS:
        if len(_SERVERS) >= MAX_SERVERS:
            return None
        _SERVERS[key] = _Server(env)
    s = _SERVERS[key]
    return s if s.ready and s.proc.poll() is None else None


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
