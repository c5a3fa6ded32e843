"""Start one process per rank with torch.distributed's `env://` rendezvous, and watch them.

Why our own launcher rather than only `torchrun`: the CLI and the dashboard must start a run,
see which rank failed and leave nothing behind. The rendezvous itself is torch's: each child
gets `MASTER_ADDR=127.0.0.1`, `MASTER_PORT` (a free port: bound to 0, read back, released),
`RANK`, `LOCAL_RANK`, `WORLD_SIZE`, `LOCAL_WORLD_SIZE` exactly as `torchrun` sets them, so the
same worker module runs unchanged under `torchrun --nproc-per-node N -m <module> ...`.

Faults: the first rank to exit non-zero (a signal death preferred over the peers that merely
saw their connection drop) is named in the error, every other rank is terminated, then killed,
with its whole process tree (psutil), and the launcher waits for all of them. Each rank's
stderr goes to a file in the run folder so a chatty child never blocks on a full pipe.

A rank that timed out waiting is a victim when another rank stopped progressing (SIGSTOPped,
hung): every rank ticks its slot in a shared progress board (`progress.bin` in the run folder,
one 8-byte counter per rank, bumped at every collective and barrier) and the launcher blames a
stopped rank, else the rank whose counter is behind the one that timed out.

Ranks die with their launcher (issue 26): they run in one process group of their own and each
asks the kernel for SIGKILL when the launcher goes (`die_with_launcher`: PR_SET_PDEATHSIG via
prctl on Linux, plus a parent-pid check for a launcher that died before the call), so neither
SIGTERM nor SIGKILL of the launcher leaves a rank running under pid 1.
"""

from __future__ import annotations

import mmap
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from engine import envvars
from engine.errors import TraceError
from engine.progress import Progress, report

# lines a rank prints when its peer went away: such a rank is a victim, not the cause
_PEER_GONE = ("Connection closed by peer", "Connection reset by peer", "Broken pipe", "ECONNRESET")
# gloo words a wait that ran out of time either way: "Timed out waiting ..." from a collective, or
# "Application timeout caused pair closure" when the pair's own I/O deadline fires first
_TIMED_OUT = ("Timed out", "timed out", "Application timeout")


class RankFailed(TraceError):
    """A rank died, timed out or reported an error; the whole run was brought down."""

    def __init__(self, rank: int, problem: str):
        self.rank = rank
        super().__init__(f"rank {rank} failed: {problem}")


@dataclass(kw_only=True, slots=True)
class RankExit:
    rank: int
    returncode: int | None
    stderr_tail: str = ""
    why: str = ""  # overrides the exit-code description (a stalled rank that did not exit)


LAUNCHER_ENV = "MYSTIQUE_LAUNCHER_PID"
PROGRESS_ENV = "MYSTIQUE_PROGRESS_BOARD"
PROGRESS_NAME = "progress.bin"


def die_with_launcher() -> None:
    """In a rank: be killed when the launcher that started it dies (Linux PR_SET_PDEATHSIG), and
    exit now when it is already gone (it died before this call). No-op outside our launcher."""
    want = envvars.get(LAUNCHER_ENV)
    if not want:
        return
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG = 1
    except (OSError, AttributeError):  # not Linux: the process group and kill_tree remain
        pass
    if str(os.getppid()) != want:
        os._exit(1)


class ProgressBoard:
    """One 8-byte counter per rank in a shared file (module docstring): ranks `tick`, the
    launcher `read`s. Cheap enough for every collective (a memory write, no system call)."""

    def __init__(self, path: str | os.PathLike, world_size: int, create: bool = False):
        self.path, self.world = Path(path), world_size
        if create:
            self.path.write_bytes(bytes(8 * world_size))
        self._fh = open(self.path, "r+b")  # noqa: SIM115 - held open with its mapping until close()
        self._mm = mmap.mmap(self._fh.fileno(), 8 * world_size)
        self._n = 0

    def tick(self, rank: int) -> None:
        self._n += 1
        self._mm[8 * rank : 8 * rank + 8] = self._n.to_bytes(8, "little")

    def read(self) -> list[int]:
        return [int.from_bytes(self._mm[8 * r : 8 * r + 8], "little") for r in range(self.world)]

    def close(self) -> None:
        self._mm.close()
        self._fh.close()

    @classmethod
    def from_env(cls, rank: int, world_size: int) -> ProgressBoard | None:
        path = envvars.get(PROGRESS_ENV)
        if not path:
            return None
        try:
            return cls(path, world_size)
        except (OSError, ValueError):
            return None


@dataclass(kw_only=True, slots=True)
class LaunchResult:
    world_size: int
    wall_s: float
    exits: list[RankExit] = field(default_factory=list)
    run_dir: Path | None = None


def free_port() -> int:
    """A TCP port free right now on localhost (the OS picks it: bind to 0)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def rank_env(rank: int, world_size: int, port: int, base: dict | None = None) -> dict[str, str]:
    """The environment torchrun would give `rank` (single node)."""
    env = dict(os.environ if base is None else base)
    env.update(
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        RANK=str(rank),
        LOCAL_RANK=str(rank),
        WORLD_SIZE=str(world_size),
        LOCAL_WORLD_SIZE=str(world_size),
        GROUP_RANK="0",
    )
    # our package importable in the child even when run from a source checkout
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def _tail(path: Path, n: int = 4000) -> str:
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - n))
            return fh.read().decode("utf-8", "replace")
    except OSError:
        return ""


def _last_error_line(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    for ln in reversed(lines):
        if ln.startswith(("mystique-rank-error:",)):
            return ln.split(":", 1)[1].strip()
    for ln in reversed(lines):
        if "Error" in ln or "error" in ln or "Exception" in ln:
            return ln[:300]
    return lines[-1][:300] if lines else ""


def kill_tree(procs: list[subprocess.Popen], grace_s: float = 3.0) -> None:
    """Terminate each process and its descendants, kill what is left after `grace_s`, reap."""
    import psutil

    victims: list = []
    for p in procs:
        if p.poll() is not None:
            continue
        try:
            parent = psutil.Process(p.pid)
            victims.extend(parent.children(recursive=True))
            victims.append(parent)
        except psutil.NoSuchProcess:
            continue
    for v in victims:
        try:
            v.send_signal(signal.SIGTERM)
        except psutil.NoSuchProcess:
            pass
    _, alive = psutil.wait_procs(victims, timeout=grace_s)
    for v in alive:
        try:
            v.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(alive, timeout=grace_s)
    for p in procs:
        try:
            p.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            pass


def _one_group(procs: list[subprocess.Popen]) -> dict:
    """Popen arguments putting every rank in one process group of their own (Python >= 3.11): a
    terminal's Ctrl-C reaches the launcher only, which then brings every rank down (kill_tree)."""
    if sys.version_info < (3, 11):
        return {}
    return {"process_group": procs[0].pid if procs else 0}


def launch(
    module: str,
    args: list[str],
    *,
    world_size: int,
    run_dir: str | os.PathLike,
    timeout_s: float | None = None,
    progress: Progress | None = None,
    extra_env: dict[str, str] | None = None,
) -> LaunchResult:
    """Run `python -m module *args` as `world_size` ranks; raise `RankFailed` naming the rank
    that failed first. `timeout_s`: wall-clock bound of the whole run (None: unbounded; the
    workers bound each collective themselves)."""
    if world_size < 1:
        raise TraceError(f"world size must be at least 1, not {world_size}")
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    procs: list[subprocess.Popen] = []
    errs: list[Path] = []
    board = ProgressBoard(run_dir / PROGRESS_NAME, world_size, create=True)
    t0 = time.perf_counter()
    try:
        for r in range(world_size):
            env = rank_env(r, world_size, port)
            env.update(extra_env or {})
            env[LAUNCHER_ENV] = str(os.getpid())
            env[PROGRESS_ENV] = str(board.path)
            err = run_dir / f"rank{r}.stderr.txt"
            errs.append(err)
            with open(err, "wb") as fh:
                procs.append(
                    subprocess.Popen(
                        [sys.executable, "-m", module, *args],
                        env=env,
                        stdout=subprocess.DEVNULL,
                        stderr=fh,
                        stdin=subprocess.DEVNULL,
                        **_one_group(procs),
                    )
                )
        report(progress, 0.05, f"started {world_size} ranks (port {port})")
        failed: RankExit | None = None
        while True:
            codes = [p.poll() for p in procs]
            done = sum(c == 0 for c in codes)
            bad = [r for r, c in enumerate(codes) if c not in (None, 0)]
            if bad:
                time.sleep(0.3)  # let peers that saw the connection drop exit too, then choose
                failed = _culprit(procs, errs, bad)
                # a rank that only saw its peer vanish is a victim: give the cause (a rank still
                # tearing down after a timeout, or one killed) a few seconds to show itself
                end = time.perf_counter() + 5.0
                while _is_victim(failed) and time.perf_counter() < end:
                    time.sleep(0.2)
                    failed = _culprit(procs, errs, bad, include_running=True)
                failed = _stalled(procs, board, failed) or failed
                break
            if done == world_size:
                break
            if timeout_s is not None and time.perf_counter() - t0 > timeout_s:
                stuck = [r for r, c in enumerate(codes) if c is None]
                failed = RankExit(rank=stuck[0], returncode=None, stderr_tail=f"no result after {timeout_s:.0f} s")
                failed = _stalled(procs, board, failed) or failed
                break
            report(progress, 0.05 + 0.9 * done / world_size, f"{done}/{world_size} ranks finished")
            time.sleep(0.05)
    finally:
        kill_tree(procs)
        board.close()
    wall = time.perf_counter() - t0
    exits = [RankExit(rank=r, returncode=p.returncode, stderr_tail=_tail(errs[r], 2000)) for r, p in enumerate(procs)]
    if failed is not None:
        rc = failed.returncode
        why = failed.why or (
            f"killed by signal {-rc}"
            if rc is not None and rc < 0
            else (f"exit code {rc}" if rc is not None else "timed out")
        )
        detail = "" if failed.why else _last_error_line(failed.stderr_tail)
        raise RankFailed(failed.rank, f"{why}" + (f": {detail}" if detail else "") + f" (logs in {run_dir})")
    report(progress, 1.0, f"{world_size} ranks finished")
    return LaunchResult(world_size=world_size, wall_s=wall, exits=exits, run_dir=run_dir)


def _stalled(procs, board: ProgressBoard, failed: RankExit) -> RankExit | None:
    """The rank that stopped progressing when `failed` only timed out waiting for it (or saw its
    peer go): a running rank the kernel reports stopped (SIGSTOP, a debugger), else the running
    rank whose progress counter is furthest behind the failed rank's. None when `failed` died of
    its own (killed, or its own error) or nothing is behind it."""
    last = _last_error_line(failed.stderr_tail)
    timed_out = any(w in last for w in _TIMED_OUT)  # gloo may abort (SIGABRT) on it
    died_of_its_own = failed.returncode is not None and (
        failed.returncode < 0 or not any(w in last for w in _PEER_GONE)
    )  # a kill, or its own error
    if died_of_its_own and not timed_out:
        return None
    import psutil

    counts = board.read()
    running = [r for r, p in enumerate(procs) if p.poll() is None and r != failed.rank]
    for r in running:
        try:
            status = psutil.Process(procs[r].pid).status()
        except psutil.Error:
            continue
        if status in (psutil.STATUS_STOPPED, psutil.STATUS_TRACING_STOP):
            return RankExit(
                rank=r,
                returncode=None,
                why=f"stopped (not running) after {counts[r]} collectives; rank {failed.rank} timed out waiting for it",
            )
    behind = [r for r in running if counts[r] < counts[failed.rank]]
    if not behind:
        return None
    r = min(behind, key=lambda k: (counts[k], k))
    return RankExit(
        rank=r,
        returncode=None,
        why=f"made no progress after {counts[r]} collectives while rank {failed.rank} reached "
        f"{counts[failed.rank]} and timed out waiting for it",
    )


def _is_victim(e: RankExit) -> bool:
    """A rank that only saw its peer go: its last error is a dropped connection, whether it then
    exited or aborted (gloo raises SIGABRT on a reset pair: signal 6 with that message)."""
    return any(s in _last_error_line(e.stderr_tail) for s in _PEER_GONE)


def _culprit(procs, errs, bad: list[int], include_running: bool = False) -> RankExit:
    """Of the ranks that exited non-zero (and, with `include_running`, ranks still running that
    already reported an error), the one that caused it: a signal death first (not an abort that
    reports a dropped connection), then a rank that timed out, then a rank whose error is not a
    dropped connection, then the first found."""
    codes = [p.poll() for p in procs]
    bad = sorted(set(bad) | {r for r, c in enumerate(codes) if c not in (None, 0)})
    if include_running:
        bad = sorted(
            set(bad) | {r for r, c in enumerate(codes) if c is None and "mystique-rank-error:" in _tail(errs[r])}
        )
    tails = {r: _tail(errs[r]) for r in bad}
    last = {r: _last_error_line(tails[r]) for r in bad}
    for r in bad:  # a signal death, unless it is gloo's abort on a peer that went first
        if codes[r] is not None and codes[r] < 0 and not any(s in last[r] for s in _PEER_GONE):
            return RankExit(rank=r, returncode=codes[r], stderr_tail=tails[r])
    for r in bad:  # a rank that timed out waiting is the one the others' errors follow from
        if any(w in last[r] for w in _TIMED_OUT):
            return RankExit(rank=r, returncode=codes[r], stderr_tail=tails[r])
    for r in bad:
        if not any(s in last[r] for s in _PEER_GONE):
            return RankExit(rank=r, returncode=codes[r], stderr_tail=tails[r])
    return RankExit(rank=bad[0], returncode=codes[bad[0]], stderr_tail=tails[bad[0]])


def init_from_env(device: str = "cpu", timeout_s: float = 60.0):
    """Inside a rank: `init_process_group` via env:// (gloo on CPU, NCCL on CUDA). Returns
    (rank, world_size). Works under our launcher and under torchrun."""
    import datetime

    import torch
    import torch.distributed as dist

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    backend = "nccl" if device.startswith("cuda") else "gloo"
    if backend == "nccl":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)) % max(torch.cuda.device_count(), 1))
    dist.init_process_group(
        backend=backend,
        init_method="env://",
        timeout=datetime.timedelta(seconds=timeout_s),
        rank=rank,
        world_size=world,
    )
    return rank, world


def rank_error(exc: BaseException) -> None:
    """Print the one line the launcher shows for a failed rank."""
    msg = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    print(f"mystique-rank-error: {type(exc).__name__}: {msg}", file=sys.stderr, flush=True)
