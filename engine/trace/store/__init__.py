"""The trace store: Kineto traces streamed into Parquet per rank, queried with DuckDB (issue 22).

Public API (docs/store.md):
    build(*paths, rank=None, use_cache=True) -> Path        # the store folder, built on first use
    query(trace_path, sql, rank=None) -> pandas.DataFrame   # read-only SQL over the store's views

Imported lazily: `engine.trace.store.stream` (the streaming scanner) needs only numpy and
msgspec, and pyarrow/duckdb load only when a store is built or queried.
"""

from __future__ import annotations

from typing import Any

__all__ = ["TABLES", "build", "query"]


def __getattr__(name: str) -> Any:
    if name in ("TABLES", "build"):
        from engine.trace.store import ingest

        return getattr(ingest, name)
    if name == "query":
        from engine.trace.store.sql import query

        return query
    raise AttributeError(name)
