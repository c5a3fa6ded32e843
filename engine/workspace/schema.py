"""The catalog file's schema: its version, ordered migrations, a health check, and the rebuild.

Why a version (`PRAGMA user_version`) and not "CREATE TABLE IF NOT EXISTS" alone: a catalog
written by a newer mystique may hold tables or meanings this one does not know; writing into it
would drop what the newer one saves (issue 26 item 5), so such a file is opened read-only and
every write is refused naming both versions. Older catalogs are brought forward by the ordered
`MIGRATIONS`, one transaction for all steps.

Why a rebuild: a corrupt, truncated or restructured file must not take every page down with
it. The file (and its -wal/-shm) is moved aside as `catalog.sqlite.bad-<timestamp>`, never
deleted; a new catalog is built from what can still be read from it, table by table, plus the
run folders on disk (`runs/job_<id>/replay.json`: a finished job's result is the truth).
"""

from __future__ import annotations

import contextlib
import enum
import os
import re
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path

from engine import jsonio


class JobStatus(str, enum.Enum):
    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def finished(self) -> bool:
        return self in (JobStatus.DONE, JobStatus.FAILED, JobStatus.CANCELLED)


# Version 0 is a catalog written before versions existed: the same tables as version 1.
SCHEMA_VERSION = 2

# The columns each table must have (reads and writes name them); extra columns are tolerated.
TABLES: dict[str, tuple[str, ...]] = {
    "traces": ("name", "paths", "hash", "kind", "link_rate", "added"),
    "specs": ("trace", "spec", "updated"),
    "settings": ("key", "value"),
    "jobs": (
        "id",
        "kind",
        "trace",
        "target",
        "params",
        "status",
        "fraction",
        "message",
        "pid",
        "created",
        "started",
        "finished",
        "out_dir",
        "result_path",
        "error",
        "summary",
    ),
}

# MIGRATIONS[i] brings a catalog from version i to i + 1 (applied in order, in one transaction).
MIGRATIONS: tuple[str, ...] = (
    # 0 -> 1: the tables (idempotent: a version-0 catalog already has them)
    """
    CREATE TABLE IF NOT EXISTS traces (
        name TEXT PRIMARY KEY, paths TEXT NOT NULL, hash TEXT, kind TEXT, link_rate REAL, added REAL);
    CREATE TABLE IF NOT EXISTS specs (trace TEXT PRIMARY KEY, spec TEXT NOT NULL, updated REAL);
    CREATE TABLE IF NOT EXISTS settings (key TEXT PRIMARY KEY, value TEXT NOT NULL);
    CREATE TABLE IF NOT EXISTS jobs (
        id INTEGER PRIMARY KEY AUTOINCREMENT, kind TEXT NOT NULL, trace TEXT, target TEXT,
        params TEXT NOT NULL, status TEXT NOT NULL, fraction REAL DEFAULT 0, message TEXT DEFAULT '',
        pid INTEGER, created REAL, started REAL, finished REAL, out_dir TEXT, result_path TEXT,
        error TEXT, summary TEXT);
    """,
    # 1 -> 2: the queue's lookups (next queued, running count) by status
    "CREATE INDEX IF NOT EXISTS jobs_status ON jobs (status, id);",
)
assert len(MIGRATIONS) == SCHEMA_VERSION

# sqlite3 messages that mean the file itself is damaged (move it aside), as opposed to a busy,
# read-only or full disk (keep it and say so).
_CORRUPT = ("file is not a database", "malformed", "database corrupt", "file is encrypted")


def is_corrupt(exc: BaseException) -> bool:
    return isinstance(exc, sqlite3.DatabaseError) and any(s in str(exc).lower() for s in _CORRUPT)


class Health(enum.Enum):
    NEW = "new"  # no file (or an empty one)
    OK = "ok"  # our version or older, structure intact
    FUTURE = "future"  # a newer schema than this code knows
    BAD = "bad"  # corrupt, truncated or restructured
    UNREADABLE = "unreadable"  # cannot be opened for a reason other than its content


@dataclass(frozen=True, kw_only=True, slots=True)
class Inspection:
    health: Health
    version: int = 0
    reason: str = ""


def connect_ro(path: Path, *, lenient: bool = False) -> sqlite3.Connection:
    """A read-only connection (see `_connect_ro`)."""
    return _connect_ro(path, lenient=lenient)[0]


def _connect_ro(path: Path, *, lenient: bool = False) -> tuple[sqlite3.Connection, bool]:
    """A read-only connection, and whether it is `immutable` (used only when the folder cannot
    hold the WAL's -shm file: it reads the main file alone, ignoring locks and the WAL).
    `lenient`: damaged schema entries are skipped instead of failing every query (salvage)."""

    def connect(mode: str) -> sqlite3.Connection:
        db = sqlite3.connect(f"{path.resolve().as_uri()}?{mode}", uri=True, timeout=30)
        if lenient:
            db.execute("PRAGMA writable_schema = ON")
        db.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchall()
        return db

    try:
        return connect("mode=ro"), False
    except sqlite3.OperationalError as exc:
        if "unable to open" not in str(exc) and "readonly" not in str(exc).replace("-", ""):
            raise  # locked, busy or damaged: never read around it
        return connect("immutable=1"), True


def inspect(path: Path) -> Inspection:
    """What state the catalog file is in (reads only)."""
    try:
        if not path.exists() or (path.is_file() and path.stat().st_size == 0):
            return Inspection(health=Health.NEW)
        if not path.is_file():  # a folder, or a FIFO that would block the open
            return Inspection(health=Health.UNREADABLE, reason="not a regular file")
    except OSError as exc:
        return Inspection(health=Health.UNREADABLE, reason=_short(exc))
    try:
        conn, immutable = _connect_ro(path)
        with contextlib.closing(conn) as db:
            version = int(db.execute("PRAGMA user_version").fetchone()[0])
            check = [r[0] for r in db.execute("PRAGMA quick_check").fetchall()]
            if check != ["ok"] and immutable:  # the main file without its WAL: not proof of damage
                return Inspection(health=Health.UNREADABLE, version=version, reason=f"damaged? ({check[0]})")
            if check != ["ok"]:
                return Inspection(health=Health.BAD, version=version, reason=f"damaged ({check[0]})")
            if version > SCHEMA_VERSION:
                return Inspection(health=Health.FUTURE, version=version)
            have = {
                t: {r[1] for r in db.execute(f"PRAGMA table_info({t})").fetchall()}
                for t in TABLES
                if db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (t,)).fetchone()
            }
    except sqlite3.DatabaseError as exc:
        if is_corrupt(exc):
            return Inspection(health=Health.BAD, reason=f"damaged ({_short(exc)})")
        return Inspection(health=Health.UNREADABLE, reason=_short(exc))
    if version == 0 and not have:
        return Inspection(health=Health.NEW)  # an empty SQLite file: nothing to keep
    missing = [f"{t}.{c}" for t, cols in TABLES.items() for c in cols if c not in have.get(t, {c})]
    absent = [t for t in TABLES if t not in have]
    if absent or missing:
        what = ", ".join([f"no table {t}" for t in absent] + [f"no column {m}" for m in missing][:4])
        return Inspection(health=Health.BAD, version=version, reason=f"restructured ({what})")
    return Inspection(health=Health.OK, version=version)


def migrate(db: sqlite3.Connection) -> int:
    """Bring the catalog on `db` to SCHEMA_VERSION (one transaction); returns the old version."""
    db.execute("BEGIN IMMEDIATE")
    try:
        old = int(db.execute("PRAGMA user_version").fetchone()[0])
        for step in MIGRATIONS[old:]:
            for stmt in filter(str.strip, step.split(";")):
                db.execute(stmt)
        if old < SCHEMA_VERSION:
            db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        db.execute("COMMIT")
    except BaseException:
        with contextlib.suppress(sqlite3.Error):
            db.execute("ROLLBACK")
        raise
    return old


def move_aside(path: Path) -> Path:
    """Rename the file (with its -wal/-shm, so they stay a pair) to `<name>.bad-<timestamp>`."""
    stamp = time.strftime("%Y%m%dT%H%M%S")
    bad = path.with_name(f"{path.name}.bad-{stamp}")
    n = 1
    while bad.exists():
        n += 1
        bad = path.with_name(f"{path.name}.bad-{stamp}-{n}")
    os.replace(path, bad)
    for suffix in ("-wal", "-shm"):
        side = Path(f"{path}{suffix}")
        if side.exists():
            with contextlib.suppress(OSError):
                os.replace(side, Path(f"{bad}{suffix}"))
    return bad


def salvage(bad: Path, db: sqlite3.Connection) -> dict[str, int]:
    """Copy every row still readable from the moved-aside file into the new catalog `db`
    (columns matched by name, table by table; a table that fails keeps the rows read before).

    Read twice: the file as it is (with its WAL), then a patched temporary copy whose header
    claims only the pages the file still has, read with `writable_schema` so that a table whose
    pages were cut off does not make the whole schema unreadable (a truncated file)."""
    import shutil
    import tempfile

    counts = dict.fromkeys(TABLES, 0)
    with tempfile.TemporaryDirectory(prefix="mystique-salvage-") as tmp:
        copy = Path(tmp) / "copy.sqlite"
        sources = [bad]
        with contextlib.suppress(OSError):
            shutil.copyfile(bad, copy)
            _claim_pages_present(copy)
            sources.append(copy)
        for src in sources:
            try:
                conn = connect_ro(src, lenient=True)
            except sqlite3.Error:
                continue
            with contextlib.closing(conn):
                for table in TABLES:
                    counts[table] += _copy_rows(conn, db, table)
    return counts


def _claim_pages_present(copy: Path) -> None:
    """Patch a copy's header: the page count it holds, rollback-journal mode (no WAL to find)."""
    with open(copy, "r+b") as fh:
        head = bytearray(fh.read(100))
        if len(head) < 100 or not head.startswith(b"SQLite format 3\0"):
            return
        page = int.from_bytes(head[16:18], "big")
        page = 65536 if page == 1 else page
        size = fh.seek(0, os.SEEK_END)
        head[18] = head[19] = 1
        head[28:32] = (size // page).to_bytes(4, "big")
        fh.seek(0)
        fh.write(head)


def _copy_rows(src: sqlite3.Connection, db: sqlite3.Connection, table: str) -> int:
    """Rows of `table` readable from `src` (until the first unreadable one) into `db`."""
    n = 0
    try:
        cur = src.execute(f"SELECT * FROM {table}")
        names = [d[0] for d in cur.description]
        keep = [c for c in names if c in TABLES[table]]
        insert = f"INSERT OR IGNORE INTO {table} ({', '.join(keep)}) VALUES ({', '.join('?' * len(keep))})"
        while (row := cur.fetchone()) is not None:
            rec = dict(zip(names, row))
            if table == "jobs" and not _valid_job(rec):
                continue
            n += db.execute(insert, [rec[c] for c in keep]).rowcount
    except (sqlite3.Error, KeyError, ValueError):
        pass
    return n


def _valid_job(rec: dict) -> bool:
    try:
        JobStatus(rec.get("status"))
        return rec.get("kind") is not None and rec.get("params") is not None
    except ValueError:
        return False


_JOB_DIR = re.compile(r"job_(\d+)$")


def reindex_runs(root: Path, db: sqlite3.Connection) -> int:
    """A job row for every `runs/job_<id>/` folder the catalog lacks: done (with its
    result_path and summary) when it holds a readable replay.json, failed otherwise; the ids
    stay taken so a new job never writes into an old job's folder."""
    runs = root / "runs"
    added = 0
    if not runs.is_dir():
        return 0
    traces = {}  # ET path -> the trace name holding it
    for n, p in db.execute("SELECT name, paths FROM traces").fetchall():
        with contextlib.suppress(ValueError, TypeError):
            traces.update({str(f): n for f in jsonio.loads(p)})
    for d in sorted(runs.iterdir()):
        m = _JOB_DIR.match(d.name)
        if not m or not d.is_dir():
            continue
        job_id, result = int(m[1]), d / "replay.json"
        row = db.execute("SELECT result_path FROM jobs WHERE id = ?", (job_id,)).fetchone()
        if row is not None and row[0]:
            continue
        summary = reindex_summary(result)
        paths: list[str] = summary.pop("paths") if summary is not None else []
        et = paths[0] if paths else None
        if et and et not in traces and Path(et).exists():
            # the trace it replayed comes back too (a kind-less entry: pages reload it from its files)
            name = Path(paths[0]).name
            db.execute("INSERT OR IGNORE INTO traces (name, paths, added) VALUES (?, ?, ?)", (name, _json(paths), 0.0))
            traces[et] = name
        if row is not None:  # a salvaged row that lost its result: the run folder has it
            if summary is not None:
                db.execute(
                    "UPDATE jobs SET status = 'done', result_path = ?, summary = ?, error = NULL WHERE id = ?",
                    (str(result), _json(summary), job_id),
                )
            continue
        when = d.stat().st_mtime
        status, error = (
            ("done", None) if summary is not None else ("failed", "no readable replay.json in its run folder")
        )
        db.execute(
            "INSERT INTO jobs (id, kind, trace, target, params, status, fraction, message, created, finished,"
            " out_dir, result_path, error, summary) VALUES (?, 'replay', ?, '', ?, ?, 1.0, ?, ?, ?, ?, ?, ?, ?)",
            (
                job_id,
                traces.get(et) if et else None,
                _json({"paths": paths}),
                status,
                "recovered from the run folder",
                when,
                when,
                str(d),
                str(result) if summary is not None else None,
                error,
                _json(summary or {}),
            ),
        )
        added += 1
    return added


def _json(v: object) -> str:
    return jsonio.dumps(v, default=str).decode()


def reindex_summary(result: Path) -> dict | None:
    """A job summary from a complete replay.json (None when absent or unreadable); `paths`:
    the trace files it replayed."""
    try:
        doc = jsonio.loads(result.read_bytes())
    except (OSError, ValueError):
        return None
    if not isinstance(doc, dict) or "median_ms" not in doc:
        return None
    summary = {k: doc.get(k) for k in ("median_ms", "coverage", "kineto_path", "device", "world_size")}
    et = (doc.get("paths") or {}).get("et") if isinstance(doc.get("paths"), dict) else None
    return {**summary, "paths": [str(et)] if et else []}


def _short(exc: BaseException) -> str:
    return (str(exc).splitlines() or [type(exc).__name__])[0]
