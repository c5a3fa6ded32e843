"""Reading one rank of a trace store: its events (some columns, or a time window) as pandas.

Why not the DuckDB views (engine.trace.store.sql): a per-rank analysis or a rank's timeline
needs one rank's files only; reading them directly (`<store>/events/rank=<r>/src=*/part.parquet`)
touches nothing of the other ranks, and strings come back as categoricals (Parquet's
dictionaries), as the loader builds them. The result equals the loader's `events` rows of that
rank column for column (`ev` with the source's offset added, `rank`), in file order.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from engine.errors import TraceError

_DICT = ("cat", "name", "pid", "tid")


def is_store(path) -> bool:
    """Whether `path` is a trace store folder (a built entry: its manifest names a store version)."""
    m = Path(path) / "manifest.json"
    if not m.is_file():
        return False
    try:
        return "store_version" in json.loads(m.read_text())
    except (OSError, ValueError):
        return False


def manifest(store) -> dict:
    """The store's manifest.json; TraceError when it is missing or unreadable."""
    p = Path(store) / "manifest.json"
    try:
        return json.loads(p.read_text())
    except (OSError, ValueError) as exc:
        raise TraceError(f"not a trace store (manifest.json unreadable: {exc})", p) from None


def ranks(store) -> list[int]:
    """The ranks the store holds, ascending (from its `events/rank=<r>` folders)."""
    d = Path(store) / "events"
    out = []
    for p in d.glob("rank=*") if d.is_dir() else ():
        try:
            out.append(int(p.name[5:]))
        except ValueError:
            continue
    return sorted(out)


def _parts(store, rank: int) -> list[tuple[int, Path]]:
    d = Path(store) / "events" / f"rank={int(rank)}"
    parts = [(int(p.parent.name[4:]), p) for p in d.glob("src=*/part.parquet")]
    if not parts:
        raise TraceError(f"the trace store holds no rank {rank}", store)
    return sorted(parts)


def rank_events(
    store,
    rank: int,
    columns: list[str] | None = None,
    window: tuple[float, float] | None = None,
    min_dur_us: float = 0.0,
) -> pd.DataFrame:
    """Rank `rank`'s events: `columns` of the events table (all by default, plus `rank`), only
    the rows overlapping `window` (µs, the trace's clock) when given, and of `min_dur_us` or
    longer; file order. A window reads the time columns and then only the kept rows' columns,
    batch by batch (memory: the result, not the rank)."""
    import pyarrow as pa
    import pyarrow.dataset as ds
    import pyarrow.parquet as pq

    offsets = None
    tables = []
    for src, part in _parts(store, rank):
        pf = pq.ParquetFile(part, read_dictionary=[c for c in _DICT if columns is None or c in columns])
        want = columns if columns is not None else pf.schema_arrow.names
        cols = [c for c in want if c in pf.schema_arrow.names]
        if window is not None or min_dur_us > 0:  # row groups wholly after the window are skipped by their statistics
            f = ds.field("dur_us") >= min_dur_us if min_dur_us > 0 else None
            if window is not None:
                lo, hi = window
                w = (ds.field("ts_us") <= hi) & (ds.field("ts_us") + ds.field("dur_us") >= lo)
                f = w if f is None else f & w
            d = ds.dataset(part, format="parquet")
            t = d.to_table(columns=cols, filter=f)
        else:
            t = pf.read(columns=cols)
        if "ev" in cols:
            if offsets is None:
                offsets = {int(s["src"]): int(s.get("ev0", 0)) for s in manifest(store)["sources"]}
            t = t.set_column(cols.index("ev"), "ev", pa.compute.add(t["ev"], offsets.get(src, 0)))
        tables.append(t)
    table = pa.concat_tables(tables, promote_options="permissive") if len(tables) > 1 else tables[0]
    df = table.to_pandas()
    for c in _DICT:  # categoricals, as the loader's (a window read comes back as plain strings)
        if c in df.columns and not isinstance(df[c].dtype, pd.CategoricalDtype):
            df[c] = df[c].astype("category")
    df.insert(min(1, len(df.columns)), "rank", pd.Series(int(rank), index=df.index, dtype="int32"))
    return df


__all__ = ["is_store", "manifest", "rank_events", "ranks"]
