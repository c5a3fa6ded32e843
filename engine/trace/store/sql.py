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

Views: `events`, `flows` (columns in docs/store.md, plus `rank` and `src`) and `sources`
(one row per stored document: src, path, rank, events).
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from engine.errors import TraceError
from engine.trace.store.ingest import TABLES, VIEW_COLUMNS, build

_SETTINGS = (
    "SET python_enable_replacements = false",
    "SET autoinstall_known_extensions = false",
    "SET autoload_known_extensions = false",
    "SET allow_community_extensions = false",
    "SET enable_external_access = false",
    "SET lock_configuration = true",
)


def connect(store: Path):
    """A DuckDB connection with the store's views and no access to anything else."""
    try:
        import duckdb
    except ImportError:
        raise TraceError("SQL needs the duckdb package (pip install duckdb)") from None
    import pyarrow as pa
    import pyarrow.dataset as ds

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
    for stmt in _SETTINGS:
        con.execute(stmt)
    return con


def query(trace_path, sql: str, rank: int | None = None, scheduler: str | None = None, progress=None) -> pd.DataFrame:
    """Run read-only `sql` over the store of `trace_path` (built on first use); a TraceError with
    DuckDB's one-line message for bad SQL or a refused file access. `scheduler`/`progress`: the
    store's per-rank ingestion fan-out (engine.fanout.map_ranks)."""
    import duckdb

    paths = trace_path if isinstance(trace_path, (list, tuple)) else (trace_path,)
    store = build(*paths, rank=rank, scheduler=scheduler, progress=progress)
    con = connect(store)
    try:
        rel = con.execute(sql)
        if rel.description is None:  # a statement without a result (e.g. CREATE TEMP TABLE)
            return pd.DataFrame()
        return rel.df()
    except duckdb.Error as exc:
        msg = " ".join(str(exc).split())[:300]
        raise TraceError(f"SQL error: {msg}") from None
    finally:
        con.close()
