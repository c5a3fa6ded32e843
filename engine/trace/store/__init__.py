"""The trace store: Kineto traces streamed into Parquet per rank, queried with DuckDB (issue 22).

Public API:
    build(*paths, rank=None, use_cache=True) -> Path   # the store folder (docs/store.md)
    query(trace_path, sql, rank=None) -> pandas.DataFrame   # read-only SQL over the store's views
"""

from engine.trace.store.build import TABLES, build
from engine.trace.store.sql import query

__all__ = ["TABLES", "build", "query"]
