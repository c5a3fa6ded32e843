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
        """Mark running jobs whose worker died without a word as failed."""
        for j in self.catalog.jobs():
            if j["status"] == JobStatus.RUNNING and j["pid"] and not _alive(j["pid"]):
                fresh = self.catalog.job(j["id"])
                if fresh and fresh["status"] == JobStatus.RUNNING:
                    self.catalog.update_job(
                        j["id"], status=JobStatus.FAILED, error="worker process exited", finished=time.time()
                    )

    def pump(self) -> int | None:
        """Start the oldest queued job if fewer than `max_running` run; returns its id."""
        import sqlite3

        self.reap()
        db = sqlite3.connect(self.catalog.path, timeout=30, isolation_level=None)
        try:
            db.execute("BEGIN IMMEDIATE")
            running = db.execute("SELECT COUNT(*) FROM jobs WHERE status = ?", (JobStatus.RUNNING.value,)).fetchone()[0]
            row = db.execute(
                "SELECT id FROM jobs WHERE status = ? ORDER BY id LIMIT 1", (JobStatus.QUEUED.value,)
            ).fetchone()
            if running >= self.max_running or row is None:
                db.execute("COMMIT")
                return None
            job_id = int(row[0])
            db.execute(
                "UPDATE jobs SET status = ?, started = ?, message = ? WHERE id = ?",
                (JobStatus.RUNNING.value, time.time(), "starting worker", job_id),
            )
            db.execute("COMMIT")
        finally:
            db.close()
        with open(self.catalog.runs_dir() / f"job_{job_id}.log", "ab") as log:  # the child keeps its own copy
            proc = subprocess.Popen(
                [sys.executable, "-m", "engine.workspace.worker", str(self.catalog.root), str(job_id)],
                cwd=str(Path(__file__).resolve().parents[2]),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=log,
                start_new_session=True,  # survives the page and the server's signals; Cancel kills its group
            )
        self.catalog.update_job(job_id, pid=proc.pid)
        return job_id

    def cancel(self, job_id: int) -> None:
        j = self.catalog.job(job_id)
        if j is None or j["status"].finished:
            return
        if j["status"] == JobStatus.RUNNING and j["pid"]:
            try:
                os.killpg(j["pid"], signal.SIGTERM)
            except OSError:
                pass
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
