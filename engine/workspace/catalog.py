"""SQLite catalog of a workspace: traces, specs, jobs (replays), settings.

Why SQLite: one file, transactional, safe with several readers and a writer from other
processes (the worker processes update their job row while the dashboard reads it; WAL mode).
Rows hold handles and small JSON (paths, hashes, specs), never trace data: traces are
re-loaded from their files (the engine's parse cache makes that fast).
"""

from __future__ import annotations

import enum
import os
import sqlite3
import time
from pathlib import Path
from typing import Any

from engine import jsonio

SCHEMA = """
CREATE TABLE IF NOT EXISTS traces (
    name TEXT PRIMARY KEY, paths TEXT NOT NULL, hash TEXT, kind TEXT, link_rate REAL, added REAL);
CREATE TABLE IF NOT EXISTS specs (trace TEXT PRIMARY KEY, spec TEXT NOT NULL, updated REAL);
CREATE TABLE IF NOT EXISTS settings (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS jobs (
    id INTEGER PRIMARY KEY AUTOINCREMENT, kind TEXT NOT NULL, trace TEXT, target TEXT,
    params TEXT NOT NULL, status TEXT NOT NULL, fraction REAL DEFAULT 0, message TEXT DEFAULT '',
    pid INTEGER, created REAL, started REAL, finished REAL, out_dir TEXT, result_path TEXT,
    error TEXT, summary TEXT);
"""


class JobStatus(str, enum.Enum):
    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def finished(self) -> bool:
        return self in (JobStatus.DONE, JobStatus.FAILED, JobStatus.CANCELLED)


def default_workspace() -> Path:
    """`MYSTIQUE_WORKSPACE` if set, else `.mystique/` in the working directory."""
    return Path(os.environ.get("MYSTIQUE_WORKSPACE") or Path.cwd() / ".mystique")


def _dumps(v: Any) -> str:
    return jsonio.dumps(v, default=str).decode()


class Catalog:
    """The catalog of one workspace folder (created on first use)."""

    def __init__(self, root: str | os.PathLike | None = None):
        self.root = Path(root) if root is not None else default_workspace()
        self.root.mkdir(parents=True, exist_ok=True)
        self.path = self.root / "catalog.sqlite"
        with self._db() as db:
            db.executescript(SCHEMA)

    def _db(self) -> _Closing:
        db = sqlite3.connect(self.path, timeout=30, isolation_level=None)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA busy_timeout=30000")
        db.row_factory = sqlite3.Row
        return _Closing(db)

    def runs_dir(self) -> Path:
        d = self.root / "runs"
        d.mkdir(parents=True, exist_ok=True)
        return d

    # traces -----------------------------------------------------------------------------
    def put_trace(self, name: str, entry: dict) -> None:
        with self._db() as db:
            db.execute(
                "INSERT OR REPLACE INTO traces VALUES (?, ?, ?, ?, ?, ?)",
                (
                    name,
                    _dumps(list(entry["paths"])),
                    entry.get("hash"),
                    entry.get("kind"),
                    entry.get("link_rate"),
                    time.time(),
                ),
            )

    def traces(self) -> dict[str, dict]:
        with self._db() as db:
            rows = db.execute("SELECT * FROM traces ORDER BY added").fetchall()
        return {
            r["name"]: {
                "paths": jsonio.loads(r["paths"]),
                "hash": r["hash"],
                "kind": r["kind"],
                "link_rate": r["link_rate"],
            }
            for r in rows
        }

    def rename_trace(self, old: str, new: str) -> None:
        with self._db() as db:
            db.execute("UPDATE traces SET name = ? WHERE name = ?", (new, old))
            db.execute("UPDATE specs SET trace = ? WHERE trace = ?", (new, old))
            db.execute("UPDATE jobs SET trace = ? WHERE trace = ?", (new, old))

    def remove_trace(self, name: str) -> None:
        with self._db() as db:
            db.execute("DELETE FROM traces WHERE name = ?", (name,))

    # specs and settings -----------------------------------------------------------------
    def put_spec(self, trace: str, spec: dict) -> None:
        with self._db() as db:
            db.execute("INSERT OR REPLACE INTO specs VALUES (?, ?, ?)", (trace, _dumps(spec), time.time()))

    def specs(self) -> dict[str, dict]:
        with self._db() as db:
            return {r["trace"]: jsonio.loads(r["spec"]) for r in db.execute("SELECT * FROM specs").fetchall()}

    def put_settings(self, values: dict[str, Any]) -> None:
        with self._db() as db:
            db.executemany("INSERT OR REPLACE INTO settings VALUES (?, ?)", [(k, _dumps(v)) for k, v in values.items()])

    def settings(self) -> dict[str, Any]:
        with self._db() as db:
            return {r["key"]: jsonio.loads(r["value"]) for r in db.execute("SELECT * FROM settings").fetchall()}

    # jobs -------------------------------------------------------------------------------
    def add_job(self, kind: str, params: dict, *, trace: str | None = None, target: str = "") -> int:
        with self._db() as db:
            cur = db.execute(
                "INSERT INTO jobs (kind, trace, target, params, status, created) VALUES (?, ?, ?, ?, ?, ?)",
                (kind, trace, target, _dumps(params), JobStatus.QUEUED.value, time.time()),
            )
            assert cur.lastrowid is not None  # set by a successful INSERT
            return int(cur.lastrowid)

    def update_job(self, job_id: int, **fields: Any) -> None:
        if not fields:
            return
        for k in ("summary", "params"):
            if k in fields and not isinstance(fields[k], str):
                fields[k] = _dumps(fields[k])
        if isinstance(fields.get("status"), JobStatus):
            fields["status"] = fields["status"].value
        cols = ", ".join(f"{k} = ?" for k in fields)
        with self._db() as db:
            db.execute(f"UPDATE jobs SET {cols} WHERE id = ?", (*fields.values(), job_id))

    def job(self, job_id: int) -> dict | None:
        with self._db() as db:
            r = db.execute("SELECT * FROM jobs WHERE id = ?", (job_id,)).fetchone()
        return _job(r) if r else None

    def jobs(self, *, kind: str | None = None) -> list[dict]:
        q = "SELECT * FROM jobs"
        args: tuple[str, ...] = ()
        if kind:
            q, args = q + " WHERE kind = ?", (kind,)
        with self._db() as db:
            return [_job(r) for r in db.execute(q + " ORDER BY id", args).fetchall()]

    def next_queued(self) -> dict | None:
        with self._db() as db:
            r = db.execute(
                "SELECT * FROM jobs WHERE status = ? ORDER BY id LIMIT 1", (JobStatus.QUEUED.value,)
            ).fetchone()
        return _job(r) if r else None


def _job(r: sqlite3.Row) -> dict:
    d = dict(r)
    d["params"] = jsonio.loads(d["params"]) if d.get("params") else {}
    d["summary"] = jsonio.loads(d["summary"]) if d.get("summary") else {}
    d["status"] = JobStatus(d["status"])
    return d


class _Closing:
    """A connection used as `with`: commits (autocommit mode) and closes on exit."""

    def __init__(self, db: sqlite3.Connection):
        self.db = db

    def __enter__(self) -> sqlite3.Connection:
        return self.db

    def __exit__(self, *exc) -> None:
        self.db.close()
