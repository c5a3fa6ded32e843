"""Replay jobs in worker processes: queued in the catalog, one running per workspace at a time.

Why worker processes (not a thread of the Streamlit server): the page never blocks, a job
survives the page going away (or the browser reloading), Cancel can kill it, and the replay's
RSS and CPU are its own process's, not the server's. The worker (`python -m
engine.workspace.worker ROOT JOB_ID`) writes progress into its job row; the page polls it.

Job kinds go through `engine.workspace.worker.JOB_KINDS` (a registry): a distributed replay
(world size, mode) is one more entry whose params the Replay page adds.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from engine.workspace.catalog import Catalog, JobStatus


def _alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        import psutil

        p = psutil.Process(pid)
        return p.status() != psutil.STATUS_ZOMBIE
    except Exception:  # noqa: BLE001 - NoSuchProcess, AccessDenied, psutil missing
        try:
            os.kill(pid, 0)
            return True
        except OSError:
            return False


CANCEL_GRACE_S = 3.0


def stop_group(pid: int, grace_s: float) -> None:
    """TERM -> KILL the process group led by `pid` (a worker and whatever it started)."""
    for sig in (signal.SIGCONT, signal.SIGTERM):
        try:
            os.killpg(pid, sig)
        except OSError:
            return  # no such group: already gone
    end = time.monotonic() + grace_s
    while _alive(pid) and time.monotonic() < end:
        _reap_child(pid)
        time.sleep(0.05)
    try:
        os.killpg(pid, signal.SIGKILL)  # the leader may be gone while its children still run
    except OSError:
        pass
    end = time.monotonic() + 5.0
    while _alive(pid) and time.monotonic() < end:
        time.sleep(0.05)
    _reap_child(pid)


def _reap_child(pid: int) -> None:
    """Collect the worker's exit status when this process started it (no zombie left)."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except OSError:
        pass


def _last_line(log: Path) -> str:
    """The worker's last stderr line (its one-line error), '' when it wrote none."""
    try:
        with open(log, "rb") as fh:
            fh.seek(max(0, fh.seek(0, os.SEEK_END) - 4096))
            lines = [ln for ln in fh.read().decode(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    return lines[-1].strip()[:500] if lines else ""


class JobRunner:
    """Submit, start, cancel and watch jobs of one workspace."""

    def __init__(self, catalog: Catalog, *, max_running: int = 1):
        self.catalog = catalog
        self.max_running = max_running

    def submit(self, kind: str, params: dict, *, trace: str | None = None, target: str = "") -> int:
        job_id = self.catalog.add_job(kind, params, trace=trace, target=target)
        self.pump()
        return job_id

    def reap(self) -> None:
        """Settle running jobs whose worker is gone: done when its run folder holds a complete
        result (the worker could not record it, e.g. on a full disk: the result on disk is the
        truth), failed otherwise with the last line the worker wrote."""
        if self.catalog.read_only is not None:
            return
        for j in self.catalog.jobs():
            if j["status"] == JobStatus.RUNNING and j["pid"] and not _alive(j["pid"]):
                fresh = self.catalog.job(j["id"])
                if fresh and fresh["status"] == JobStatus.RUNNING:
                    self.catalog.update_job(j["id"], **self._outcome(fresh))

    def _outcome(self, job: dict) -> dict:
        from engine.workspace.schema import reindex_summary

        out = self.catalog.root / "runs" / f"job_{job['id']}"
        last = _last_line(self.catalog.root / "runs" / f"job_{job['id']}.log")
        summary = reindex_summary(out / "replay.json")
        if summary is not None:
            summary.pop("paths", None)
            note = f"done (recorded from its run folder: {last})" if last else "done (recorded from its run folder)"
            return {
                "status": JobStatus.DONE,
                "fraction": 1.0,
                "message": note[:200],
                "finished": time.time(),
                "out_dir": str(out),
                "result_path": str(out / "replay.json"),
                "summary": {**(job.get("summary") or {}), **summary},
            }
        return {"status": JobStatus.FAILED, "error": last or "worker process exited", "finished": time.time()}

    def pump(self) -> int | None:
        """Start the oldest queued job if fewer than `max_running` run; returns its id."""
        if self.catalog.read_only is not None:
            return None  # nothing can be recorded: a started job would be lost
        self.reap()
        job_id = self.catalog.claim_next(self.max_running)
        if job_id is None:
            return None
        with open(self.catalog.runs_dir() / f"job_{job_id}.log", "ab") as log:  # the child keeps its own copy
            proc = subprocess.Popen(
                [sys.executable, "-m", "engine.workspace.worker", str(self.catalog.root), str(job_id)],
                cwd=str(Path(__file__).resolve().parents[2]),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=log,
                start_new_session=True,  # survives the page and the server's signals; Cancel kills its group
            )
        # Collect the worker's exit status the moment it exits: nothing else waits on it (the page
        # only polls the catalog), so every finished replay left a defunct child in the server
        # until the next job started (issue 32). A daemon thread per worker: it only sleeps in wait().
        threading.Thread(target=proc.wait, name=f"reap-job-{job_id}", daemon=True).start()
        self.catalog.update_job(job_id, pid=proc.pid)
        return job_id

    def cancel(self, job_id: int, *, grace_s: float = CANCEL_GRACE_S) -> None:
        """Stop a job: a running worker's process group gets SIGCONT (a stopped worker would
        hold SIGTERM pending forever), SIGTERM, and SIGKILL after `grace_s`, so the queue moves
        on; then the job is marked cancelled and the next one starts."""
        self.catalog.check_writable()  # a cancel that cannot be recorded would not stop the job
        j = self.catalog.job(job_id)
        if j is None or j["status"].finished:
            return
        if j["status"] == JobStatus.RUNNING and j["pid"]:
            stop_group(int(j["pid"]), grace_s)
        self.catalog.update_job(job_id, status=JobStatus.CANCELLED, finished=time.time(), message="cancelled")
        self.pump()

    def wait(self, job_id: int, timeout_s: float = 600.0, poll_s: float = 0.2) -> dict:
        """Block until the job finishes (tests and the CLI; pages poll instead)."""
        end = time.monotonic() + timeout_s
        while True:
            j = self.catalog.job(job_id)
            if j is None or j["status"].finished:
                return j or {}
            if time.monotonic() > end:
                raise TimeoutError(f"job {job_id} still {j['status'].value} after {timeout_s:.0f} s")
            self.reap()
            time.sleep(poll_s)
