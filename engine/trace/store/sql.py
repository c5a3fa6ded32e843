"""Read-only SQL over a trace store with DuckDB: `query(trace_path, sql) -> DataFrame`.

Why DuckDB: an embedded columnar engine that reads Parquet with projection and filter
pushdown, so a query touches only the columns and row groups it needs (issue 22: Perfetto users
expect SQL). Why the lock-down: DuckDB can read and write arbitrary files (`read_csv('/etc/passwd')`,
`COPY ... TO`, `ATTACH`, `INSTALL`/`LOAD` of extensions, httpfs), and the SQL comes from the user
or a shared notebook. The store's Parquet files are opened as Arrow datasets *before*
`enable_external_access=false` and `lock_configuration=true` are set, so the views read the
store while no statement can name a file, load an extension or undo the settings; Python
replacement scans (a query naming a Python variable) are off as well. A statement may still
create temporary in-memory tables: they vanish with the connection.

What DuckDB still allows after the lock-down, and why each is closed before it (issue 31):
- its `temp_directory` (default `.tmp` in the working folder, possibly a symlink to `/etc`) stays
  readable and writable by any statement, so spilling is off (`temp_directory=''`,
  `max_temp_directory_size=0`): a query that outgrows its memory fails with one line instead;
- `allowed_directories` / `allowed_paths` grant reading *and writing*, so both are set to empty
  lists (the store is read through the Arrow datasets, not through DuckDB's file system);
- `memory_limit` is a quarter of the memory this process may use (engine.sysinfo), `threads`
  the CPUs it may run on.

Bounded queries: `run()` executes the statement on a worker thread while the calling thread
watches a deadline, an optional `cancel()` (the dashboard's session ending) and signals
(Ctrl-C, SIGTERM in the CLI, which only the main thread receives), and calls `con.interrupt()`
on any of them. Rows are fetched in chunks up to `max_rows` (the rest is never materialised).

Views: `events`, `flows` (columns in docs/store.md, plus `rank` and `src`) and `sources`
(one row per stored document: src, path, rank, events).
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from engine.errors import TraceError

if TYPE_CHECKING:  # pandas, pyarrow and the ingest load where a store is built or queried
    import pandas as pd

MAX_ROWS = 10_000
"""Rows the CLI and the dashboard fetch at most (the rest of a result is never materialised)."""
CLI_TIMEOUT_S = 300.0
"""`mystique sql --timeout` default: a query still running then is interrupted."""
UI_TIMEOUT_S = 60.0
"""The dashboard's SQL box deadline: a server thread is held while a query runs."""
MEMORY_SHARE = 0.25
"""DuckDB's memory_limit as a share of the memory this process may use (spilling is off)."""
_MIN_MEMORY = 64 << 20
_DEFAULT_MEMORY = 1 << 30  # when nothing tells what is available


def _memory_limit_bytes() -> int:
    from engine.sysinfo import available_memory_bytes

    avail = available_memory_bytes()
    return max(_MIN_MEMORY, int(avail * MEMORY_SHARE)) if avail else _DEFAULT_MEMORY


def _threads() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not on Linux
        return max(1, os.cpu_count() or 1)


def _sandbox(memory_bytes: int | None = None) -> tuple[str, ...]:
    """The settings that close DuckDB's file, extension and memory routes (module docstring),
    then lock them; order matters: `enable_external_access` and the lock come last."""
    limit = _memory_limit_bytes() if memory_bytes is None else min(memory_bytes, _memory_limit_bytes())
    return (
        "SET temp_directory = ''",
        "SET max_temp_directory_size = '0B'",
        "SET allowed_directories = []",
        "SET allowed_paths = []",
        f"SET memory_limit = '{limit >> 20}MiB'",
        f"SET threads = {_threads()}",
        "SET enable_progress_bar = false",
        *_SETTINGS,
    )


_SETTINGS = (
    "SET python_enable_replacements = false",
    "SET autoinstall_known_extensions = false",
    "SET autoload_known_extensions = false",
    "SET allow_community_extensions = false",
    "SET enable_external_access = false",
    "SET lock_configuration = true",
)


def connect(store: Path, memory_bytes: int | None = None):
    """A DuckDB connection with the store's views and no access to anything else; `memory_bytes`
    lowers its memory limit (the aggregates the views of a big trace run need little)."""
    try:
        import duckdb
    except ImportError:
        raise TraceError("SQL needs the duckdb package (pip install duckdb)") from None
    import pandas as pd
    import pyarrow as pa
    import pyarrow.dataset as ds

    from engine.trace.store.ingest import TABLES, VIEW_COLUMNS

    manifest = json.loads((store / "manifest.json").read_text())
    con = duckdb.connect(":memory:")
    part = ds.partitioning(pa.schema([("rank", pa.int32()), ("src", pa.int16())]), flavor="hive")
    for t in TABLES:
        # in source order (src=10 after src=9): a query without ORDER BY reads rows in file order
        files = [str(p) for p in sorted((store / t).rglob("part.parquet"), key=lambda p: int(p.parent.name[4:]))]
        dset = ds.dataset(files, format="parquet", partitioning=part, partition_base_dir=str(store / t))
        con.register(f"_{t}", dset)
        cols = ", ".join(VIEW_COLUMNS[t])
        if t == "events":  # `ev` is stored per source from 0: add the source's offset (a projection, order kept)
            offsets = ", ".join(str(int(s.get("ev0", 0))) for s in manifest["sources"])
            cols = cols.replace("ev, ", f"ev + [{offsets}][src + 1] AS ev, ", 1)
        con.execute(f"CREATE VIEW {t} AS SELECT {cols} FROM _{t}")
    src = pd.DataFrame(
        {
            "src": [s["src"] for s in manifest["sources"]],
            "path": [s["path"] for s in manifest["sources"]],
            "rank": [s["rank"] for s in manifest["sources"]],
            "events": [s["events"] for s in manifest["sources"]],
        }
    )
    con.register("_sources", src)
    con.execute("CREATE VIEW sources AS SELECT * FROM _sources")
    for stmt in _sandbox(memory_bytes):
        con.execute(stmt)
    return con


@dataclass(frozen=True, slots=True)
class Result:
    """A query's first rows: `frame` holds at most `max_rows` rows; `truncated` when more came."""

    frame: pd.DataFrame
    truncated: bool
    max_rows: int | None


def query(trace_path, sql: str, rank: int | None = None, scheduler: str | None = None, progress=None) -> pd.DataFrame:
    """Run read-only `sql` over the store of `trace_path` (built on first use) and return the whole
    result; a TraceError with DuckDB's one-line message for bad SQL or a refused file access.
    `scheduler`/`progress`: the store's per-rank ingestion fan-out (engine.fanout.map_ranks).
    The CLI and the dashboard use `run()` (bounded rows, a deadline, interruptible)."""
    return run(trace_path, sql, rank=rank, scheduler=scheduler, progress=progress).frame


def run(
    trace_path,
    sql: str,
    *,
    rank: int | None = None,
    scheduler: str | None = None,
    progress=None,
    max_rows: int | None = None,
    timeout_s: float | None = None,
    cancel: Callable[[], bool] | None = None,
) -> Result:
    """`query` with bounds: at most `max_rows` rows are fetched (None: all), and the statement is
    interrupted after `timeout_s` seconds, when `cancel()` turns true, or on KeyboardInterrupt /
    SIGTERM in the calling thread (re-raised once DuckDB has stopped). The store build is not
    under the deadline."""
    paths = trace_path if isinstance(trace_path, (list, tuple)) else (trace_path,)
    from engine.trace.store.ingest import build

    store = build(*paths, rank=rank, scheduler=scheduler, progress=progress)
    con = connect(store)
    try:
        return _bounded(con, sql, max_rows, timeout_s, cancel)
    finally:
        con.close()


def _fetch(con, sql: str, max_rows: int | None) -> Result:
    import pandas as pd

    rel = con.execute(sql)
    if rel.description is None:  # a statement without a result (e.g. CREATE TEMP TABLE)
        return Result(pd.DataFrame(), False, max_rows)
    if max_rows is None:
        return Result(rel.df(), False, None)
    parts, n = [], 0
    while n <= max_rows:  # one more row than shown tells whether the result goes on
        chunk = rel.fetch_df_chunk(1)
        if not len(chunk):
            break
        parts.append(chunk)
        n += len(chunk)
    df = pd.concat(parts, ignore_index=True) if len(parts) > 1 else (parts[0] if parts else rel.fetch_df_chunk(1))
    return Result(df.iloc[:max_rows].reset_index(drop=True) if n > max_rows else df, n > max_rows, max_rows)


def _bounded(con, sql: str, max_rows: int | None, timeout_s: float | None, cancel: Callable[[], bool] | None) -> Result:
    import duckdb

    box: dict = {}
    done = threading.Event()

    def work() -> None:
        try:
            box["result"] = _fetch(con, sql, max_rows)
        except BaseException as exc:  # noqa: BLE001  # handed to the calling thread, re-raised there
            box["error"] = exc
        finally:
            done.set()

    # an Event, not Thread.join: a signal handler raising inside join() marks a running thread
    # as stopped (CPython 3.11's bpo-45274 handling), and the process then aborts at exit
    worker = threading.Thread(target=work, name="mystique-sql", daemon=True)
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    why = None
    worker.start()
    # DuckDB's interrupt stops the query running at that moment only: one sent while the worker
    # is still binding or between two chunks is lost (seen: Ctrl-C under load, the query then ran
    # on). So the interrupt is sent again every 0.1 s until the worker is done.
    try:
        while not done.wait(0.1):
            if why is None and deadline is not None and time.monotonic() > deadline:
                why = f"the query ran past its {timeout_s:g} s deadline and was interrupted"
            elif why is None and cancel is not None and cancel():
                why = "the query was cancelled (its session ended)"
            if why is not None:
                con.interrupt()
    except BaseException:  # Ctrl-C or SIGTERM (engine.cli.main.Terminated): stop DuckDB, then go
        stop = time.monotonic() + 10
        con.interrupt()
        while not done.wait(0.1) and time.monotonic() < stop:
            con.interrupt()
        raise
    if why is not None and "result" not in box:
        raise TraceError(f"SQL error: {why}")
    exc = box.get("error")
    if isinstance(exc, duckdb.OutOfMemoryException):
        limit = con.execute("SELECT current_setting('memory_limit')").fetchone()[0]
        raise TraceError(
            f"SQL error: the query needs more than its memory limit ({limit}, {MEMORY_SHARE:.0%} of the memory "
            "available; spilling to disk is off): filter, project or aggregate more"
        ) from None
    if isinstance(exc, duckdb.Error):
        msg = " ".join(str(exc).split())[:300]
        raise TraceError(f"SQL error: {msg}") from None
    if exc is not None:
        raise exc
    return box["result"]
