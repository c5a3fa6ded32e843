"""Parquet cache of loaded traces, keyed by the content hash of the inputs.

Why: parsing a 100k-event Kineto trace costs most of a second; the UI reloads the same files
on every page, so a second load reads four Parquet files instead (< 0.2 s).

Layout: `<cache dir>/<key>/{ops,tensors,events,flows}.parquet + meta.json`, where the cache
dir is `$MYSTIQUE_CACHE_DIR` or `~/.cache/mystique` and the key is the sha256 of the loader
version, the load options and every input file's bytes. An entry is written into a temporary
sibling folder and renamed into place, so readers never see half an entry. A corrupt or
unreadable entry is treated as a miss (and replaced); the cache never makes a load fail.

Object columns do not map onto Parquet types directly: shape/strides tuples are stored as
list<int64> columns and turned back into tuples (strides keep None) on read.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd

from engine import envvars
from engine.trace.model import Trace

TABLES = ("ops", "tensors", "events", "flows")
_TUPLE_COLS = {"tensors": ("shape", "strides")}
_OBJECT_COLS = {"ops": ("inputs", "outputs", "attrs")}  # JSON text kept as Python str objects


def cache_root() -> Path:
    env = envvars.get("MYSTIQUE_CACHE_DIR")
    return Path(env) if env else Path.home() / ".cache" / "mystique"


def _to_parquet(df: pd.DataFrame, path: Path, tuple_cols=()) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    df = df.reset_index(drop=True)
    fields = {}
    for c in tuple_cols:
        if c in df.columns:
            fields[c] = pa.array([None if v is None else list(v) for v in df[c]], type=pa.list_(pa.int64()))
    table = pa.Table.from_pandas(df.drop(columns=list(fields)), preserve_index=False)
    for c, arr in fields.items():
        table = table.append_column(c, arr)
    table = table.select(list(df.columns))
    pq.write_table(table, path, compression="zstd" if pa.Codec.is_available("zstd") else "snappy")


def _from_parquet(path: Path, tuple_cols=()) -> pd.DataFrame:
    import pyarrow.parquet as pq

    table = pq.read_table(path)
    plain = [c for c in table.column_names if c not in tuple_cols]
    df = table.select(plain).to_pandas()
    for c in tuple_cols:
        if c in table.column_names:
            col = table.column(c)
            flat = col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
            offsets = flat.offsets.to_numpy()
            values = flat.values.to_numpy(zero_copy_only=False).tolist()
            valid = flat.is_valid().to_numpy(zero_copy_only=False)
            out = [
                tuple(values[a:b]) if ok else None
                for a, b, ok in zip(offsets[:-1].tolist(), offsets[1:].tolist(), valid.tolist())
            ]
            df[c] = pd.Series(out, dtype=object, index=df.index)
    return df[table.column_names]


def load_cached(key: str) -> Trace | None:
    """The cached Trace for `key`, or None when absent or unreadable."""
    d = cache_root() / key
    if not (d / "meta.json").is_file():
        return None
    try:
        import pyarrow.parquet  # noqa: F401 -- without pyarrow the entry is not read (nor deleted)
    except ImportError:
        return None
    try:
        meta = json.loads((d / "meta.json").read_text())
        tables = {t: _from_parquet(d / f"{t}.parquet", _TUPLE_COLS.get(t, ())) for t in TABLES}
        for t, cols in _OBJECT_COLS.items():
            for c in cols:
                if c in tables[t].columns:
                    tables[t][c] = tables[t][c].astype(object)
        if meta.get("content_hash") != key:
            return None
        return Trace(meta=meta, **tables)
    except Exception:  # noqa: BLE001 -- any damage to an entry means "rebuild it"
        shutil.rmtree(d, ignore_errors=True)
        return None


def save_cached(key: str, trace: Trace) -> bool:
    """Write the entry atomically; False (and nothing left behind) when the cache is not writable."""
    from engine.outdir import atomic_folder

    try:
        import pyarrow.parquet  # noqa: F401 -- optional: without pyarrow traces load uncached
    except ImportError:
        return False
    try:
        with atomic_folder(cache_root() / key, prefix=f".{key[:16]}-") as tmp:
            for t in TABLES:
                _to_parquet(getattr(trace, t), tmp / f"{t}.parquet", _TUPLE_COLS.get(t, ()))
            (tmp / "meta.json").write_text(json.dumps(trace.meta, default=_json_default))
        return True
    except (OSError, ValueError, TypeError, NotImplementedError, OverflowError):
        # Unwritable folder, full disk, or a value Parquet cannot hold (odd shapes in a damaged
        # trace): the load itself succeeded, so it is returned uncached.
        return False


def _json_default(o):
    if isinstance(o, np.generic):
        return o.item()
    return str(o)
