"""SQLite catalog of a workspace: traces, specs, jobs (replays), settings.

Why SQLite: one file, transactional, safe with several readers and a writer from other
processes (the worker processes update their job row while the dashboard reads it; WAL mode).
Rows hold handles and small JSON (paths, hashes, specs), never trace data: traces are
re-loaded from their files (the engine's parse cache makes that fast).

Why every call goes through `_read`/`_write`: "nothing is lost" (issue 26 item 5). A damaged
file is moved aside and rebuilt (engine.workspace.schema), a read-only or newer-schema file is
read but never written, and a write that fails (full disk) raises one CatalogError line that
the UI shows, instead of a page traceback or a save dropped without a word.
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from engine import envvars, jsonio
from engine.errors import TraceError
from engine.workspace import schema
from engine.workspace.schema import Health, JobStatus


def default_workspace() -> Path:
    """`MYSTIQUE_WORKSPACE` if set, else `.mystique/` in the working directory."""
    return Path(envvars.get("MYSTIQUE_WORKSPACE") or Path.cwd() / ".mystique")


def _dumps(v: Any) -> str:
    return jsonio.dumps(v, default=str).decode()


class CatalogError(TraceError):
    """The catalog cannot be read or written (read-only, a newer schema, a full disk): one line
    naming the file; what the user did stays in the session, nothing on disk is touched."""


class Catalog:
    """The catalog of one workspace folder (created on first use), opened defensively.

    `notice`: one line saying what opening it took (a damaged file moved aside and rebuilt, or
    why it is read-only); the UI shows it once. `read_only`: why writes are refused (None when
    writable); every write then raises CatalogError with that line instead of dropping silently.
    """

    def __init__(self, root: str | os.PathLike | None = None):
        self.root = Path(root) if root is not None else default_workspace()
        self.path = self.root / "catalog.sqlite"
        self.notice: str | None = None
        self.read_only: str | None = None
        self._readable = True
        self._open()

    # opening ----------------------------------------------------------------------------
    def _open(self) -> None:
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            return self._refuse(f"cannot create the workspace folder ({_why(exc)})", readable=False)
        found = schema.inspect(self.path)
        if found.health is Health.BAD:
            return self._rebuild(found.reason)
        if found.health is Health.UNREADABLE:
            return self._refuse(f"cannot open ({found.reason})", readable=False)
        if found.health is Health.FUTURE:
            return self._refuse(
                f"schema version {found.version} is newer than this mystique-studio's {schema.SCHEMA_VERSION}"
            )
        why = self._unwritable()
        if why:
            return self._refuse(why, readable=found.health is not Health.NEW)
        if found.health is Health.OK and found.version == schema.SCHEMA_VERSION:
            return  # no write lock taken just to open: a busy worker does not hold up a page
        try:
            with self._db() as db:
                schema.migrate(db)
        except sqlite3.Error as exc:
            if schema.is_corrupt(exc):
                return self._rebuild(f"damaged ({_why(exc)})")
            return self._refuse(f"cannot write ({_why(exc)})", readable=found.health is not Health.NEW)

    def _refuse(self, why: str, *, readable: bool = True) -> None:
        how = "opened read-only" if readable else "working without it"
        self.read_only = str(CatalogError(f"{why}: {how}, nothing new is saved to it", self.path))
        self.notice = self.read_only
        self._readable = readable

    def _unwritable(self) -> str | None:
        """Why this process cannot write the file or its folder (probed: as root, permission
        bits say nothing, and an immutable or read-only-mounted file refuses anyway)."""
        import tempfile

        try:
            if self.path.exists():
                with open(self.path, "r+b"):
                    pass
            with tempfile.NamedTemporaryFile(dir=self.root, prefix=".catalog-probe-"):
                pass
        except OSError as exc:
            return f"read-only ({_why(exc)})"
        return None

    def _rebuild(self, reason: str) -> None:
        """Move the damaged file aside and build a new catalog from what it still holds and
        from the run folders on disk."""
        try:
            bad = schema.move_aside(self.path)
        except OSError as exc:
            return self._refuse(f"{reason}; cannot move it aside ({_why(exc)})", readable=False)
        self.read_only, self._readable = None, True
        try:
            with self._db() as db:
                schema.migrate(db)
                db.execute("BEGIN IMMEDIATE")
                got = schema.salvage(bad, db)
                found = schema.reindex_runs(self.root, db)
                db.execute("COMMIT")
        except sqlite3.Error as exc:
            return self._refuse(f"{reason}; moved it aside to {bad.name}, cannot rebuild it ({_why(exc)})")
        self.notice = str(
            CatalogError(
                f"{reason}; moved it aside to {bad.name} and rebuilt it "
                f"({got['traces']} traces, {got['specs']} specs, {got['jobs'] + found} jobs recovered, "
                f"{found} of them from run folders)",
                self.path,
            )
        )

    def _db(self, *, ro: bool = False) -> _Closing:
        if ro:
            db = schema.connect_ro(self.path)
            db.isolation_level = None
        else:
            db = sqlite3.connect(self.path, timeout=30, isolation_level=None)
            db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA busy_timeout=30000")
        db.row_factory = sqlite3.Row
        return _Closing(db)

    def _recreate_if_gone(self) -> None:
        """The file was moved or deleted while this catalog was open (a dashboard running, issue
        31): sqlite would open a new empty file without tables, and every read failed. Recreate
        it with the schema and the run folders' jobs, and say so once through `notice`."""
        if self.read_only is not None or self.path.exists():
            return
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            with self._db() as db:
                schema.migrate(db)
                db.execute("BEGIN IMMEDIATE")
                found = schema.reindex_runs(self.root, db)
                db.execute("COMMIT")
        except (OSError, sqlite3.Error) as exc:
            return self._refuse(f"disappeared while open, cannot recreate it ({_why(exc)})", readable=False)
        self.notice = str(
            CatalogError(
                f"disappeared while the dashboard ran (moved or deleted): recreated it, {found} jobs recovered "
                "from run folders; traces and settings saved before are not in it",
                self.path,
            )
        )

    def _read(self, sql: str, args: tuple = (), *, again: bool = True) -> list[sqlite3.Row]:
        """Rows of a query; a file damaged while open is rebuilt once; other errors are one
        CatalogError line."""
        self._recreate_if_gone()
        if not self._readable:
            return []
        try:
            with self._db(ro=self.read_only is not None) as db:
                return db.execute(sql, args).fetchall()
        except sqlite3.Error as exc:
            if again and self.read_only is None and schema.is_corrupt(exc) and self._damaged():
                return self._read(sql, args, again=False)
            raise CatalogError(f"cannot read ({_why(exc)})", self.path) from None

    def _write(self, fn: Callable[[sqlite3.Connection], Any], *, again: bool = True) -> Any:
        """`fn(connection)` in write mode; refused with the one-line reason when read-only, and a
        failed write (full disk, I/O error) is one CatalogError line, never dropped silently."""
        self.check_writable()
        self._recreate_if_gone()
        try:
            with self._db() as db:
                return fn(db)
        except sqlite3.Error as exc:
            if again and schema.is_corrupt(exc) and self._damaged():
                return self._write(fn, again=False)
            raise CatalogError(f"cannot write ({_why(exc)}); not saved", self.path) from None

    def check_writable(self) -> None:
        """CatalogError (the one-line reason) when writes are refused."""
        if self.read_only is not None:
            raise CatalogError(self.read_only.removeprefix(f"{self.path}: "), self.path)

    def _damaged(self) -> bool:
        """The file went bad while open: rebuild it (only if it still inspects as damaged, so
        two processes do not both move a good rebuilt file aside)."""
        found = schema.inspect(self.path)
        if found.health is not Health.BAD:
            return False
        self._rebuild(found.reason)
        return self.read_only is None

    def runs_dir(self) -> Path:
        d = self.root / "runs"
        d.mkdir(parents=True, exist_ok=True)
        return d

    # traces -----------------------------------------------------------------------------
    def put_trace(self, name: str, entry: dict) -> None:
        row = (
            name,
            _dumps(list(entry["paths"])),
            entry.get("hash"),
            entry.get("kind"),
            entry.get("link_rate"),
            time.time(),
        )
        self._write(
            lambda db: db.execute(
                "INSERT OR REPLACE INTO traces (name, paths, hash, kind, link_rate, added) VALUES (?, ?, ?, ?, ?, ?)",
                row,
            )
        )

    def add_trace(self, name: str, entry: dict) -> str:
        """Enter a newly loaded trace as `name`, or `name (2)`, `name (3)`... when another trace
        holds that name (another dashboard or tab on this workspace added it meanwhile): never a
        silent replace (issue 31). The same paths under that name are the same trace, updated in
        place. One write transaction, so two processes cannot both take a name. Returns the name."""
        paths = _dumps(list(entry["paths"]))

        def fn(db: sqlite3.Connection) -> str:
            db.execute("BEGIN IMMEDIATE")
            taken = {r["name"]: r["paths"] for r in db.execute("SELECT name, paths FROM traces")}
            got, i = name, 2
            while got in taken and taken[got] != paths:
                got, i = f"{name} ({i})", i + 1
            db.execute(
                "INSERT OR REPLACE INTO traces (name, paths, hash, kind, link_rate, added) VALUES (?, ?, ?, ?, ?, ?)",
                (got, paths, entry.get("hash"), entry.get("kind"), entry.get("link_rate"), time.time()),
            )
            db.execute("COMMIT")
            return got

        return self._write(fn)

    def traces(self) -> dict[str, dict]:
        return {
            r["name"]: {
                "paths": jsonio.loads(r["paths"]),
                "hash": r["hash"] or "",
                "kind": r["kind"] or "",
                "link_rate": r["link_rate"],
            }
            for r in self._read("SELECT * FROM traces ORDER BY added")
        }

    def rename_trace(self, old: str, new: str) -> None:
        def fn(db: sqlite3.Connection) -> None:
            db.execute("BEGIN IMMEDIATE")
            db.execute("UPDATE traces SET name = ? WHERE name = ?", (new, old))
            db.execute("UPDATE specs SET trace = ? WHERE trace = ?", (new, old))
            db.execute("UPDATE jobs SET trace = ? WHERE trace = ?", (new, old))
            db.execute("COMMIT")

        self._write(fn)

    def remove_trace(self, name: str) -> None:
        self._write(lambda db: db.execute("DELETE FROM traces WHERE name = ?", (name,)))

    # specs and settings -----------------------------------------------------------------
    def put_spec(self, trace: str, spec: dict) -> None:
        row = (trace, _dumps(spec), time.time())
        self._write(lambda db: db.execute("INSERT OR REPLACE INTO specs (trace, spec, updated) VALUES (?, ?, ?)", row))

    def specs(self) -> dict[str, dict]:
        return {r["trace"]: jsonio.loads(r["spec"]) for r in self._read("SELECT * FROM specs")}

    def put_settings(self, values: dict[str, Any]) -> None:
        rows = [(k, _dumps(v)) for k, v in values.items()]
        self._write(lambda db: db.executemany("INSERT OR REPLACE INTO settings (key, value) VALUES (?, ?)", rows))

    def settings(self) -> dict[str, Any]:
        return {r["key"]: jsonio.loads(r["value"]) for r in self._read("SELECT * FROM settings")}

    # jobs -------------------------------------------------------------------------------
    def add_job(self, kind: str, params: dict, *, trace: str | None = None, target: str = "") -> int:
        row = (kind, trace, target, _dumps(params), JobStatus.QUEUED.value, time.time())

        def fn(db: sqlite3.Connection) -> int:
            cur = db.execute(
                "INSERT INTO jobs (kind, trace, target, params, status, created) VALUES (?, ?, ?, ?, ?, ?)", row
            )
            assert cur.lastrowid is not None  # set by a successful INSERT
            return int(cur.lastrowid)

        return int(self._write(fn))

    def update_job(self, job_id: int, **fields: Any) -> None:
        if not fields:
            return
        for k in ("summary", "params"):
            if k in fields and not isinstance(fields[k], str):
                fields[k] = _dumps(fields[k])
        if isinstance(fields.get("status"), JobStatus):
            fields["status"] = fields["status"].value
        unknown = set(fields) - set(schema.TABLES["jobs"])
        assert not unknown, unknown  # column names are spliced into the statement
        cols = ", ".join(f"{k} = ?" for k in fields)
        self._write(lambda db: db.execute(f"UPDATE jobs SET {cols} WHERE id = ?", (*fields.values(), job_id)))

    def claim_next(self, max_running: int) -> int | None:
        """Mark the oldest queued job running if fewer than `max_running` run (one transaction,
        so two pages pumping at once start it once); its id, or None."""

        def fn(db: sqlite3.Connection) -> int | None:
            db.execute("BEGIN IMMEDIATE")
            try:
                running = db.execute("SELECT COUNT(*) FROM jobs WHERE status = ?", (JobStatus.RUNNING.value,))
                row = db.execute(
                    "SELECT id FROM jobs WHERE status = ? ORDER BY id LIMIT 1", (JobStatus.QUEUED.value,)
                ).fetchone()
                if running.fetchone()[0] >= max_running or row is None:
                    return None
                db.execute(
                    "UPDATE jobs SET status = ?, started = ?, message = ? WHERE id = ?",
                    (JobStatus.RUNNING.value, time.time(), "starting worker", int(row[0])),
                )
                return int(row[0])
            finally:
                db.execute("COMMIT")

        return self._write(fn)

    def job(self, job_id: int) -> dict | None:
        rows = self._read("SELECT * FROM jobs WHERE id = ?", (job_id,))
        return _job(rows[0]) if rows else None

    def jobs(self, *, kind: str | None = None) -> list[dict]:
        q = "SELECT * FROM jobs"
        args: tuple[str, ...] = ()
        if kind:
            q, args = q + " WHERE kind = ?", (kind,)
        return [_job(r) for r in self._read(q + " ORDER BY id", args)]

    def next_queued(self) -> dict | None:
        rows = self._read("SELECT * FROM jobs WHERE status = ? ORDER BY id LIMIT 1", (JobStatus.QUEUED.value,))
        return _job(rows[0]) if rows else None


def _job(r: sqlite3.Row) -> dict:
    d = dict(r)
    d["params"] = jsonio.loads(d["params"]) if d.get("params") else {}
    d["summary"] = jsonio.loads(d["summary"]) if d.get("summary") else {}
    d["status"] = JobStatus(d["status"])
    return d


def _why(exc: BaseException) -> str:
    """The first line of an error, without the path the message already names."""
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return (str(exc).splitlines() or [type(exc).__name__])[0]


class _Closing:
    """A connection used as `with`: commits (autocommit mode) and closes on exit."""

    def __init__(self, db: sqlite3.Connection):
        self.db = db

    def __enter__(self) -> sqlite3.Connection:
        return self.db

    def __exit__(self, *exc) -> None:
        self.db.close()
