"""Building a trace store entry: Kineto documents streamed into Parquet, one file per rank.

Why: the store is what analyses, `mystique sql` and (later) the dashboard read column by column
instead of whole pandas tables (issue 22). Each block of events is parsed by the loader's own
Kineto parser (`engine.trace.kineto.parse_kineto`) and appended to a Parquet file as a row
group, so a stored table equals the loader's column for column (tests/test_store.py checks it
on every shared trace) and memory holds one block at a time.

Layout (docs/store.md): `<cache dir>/store/<key>/` with `manifest.json` and, per table,
`<table>/rank=<r>/src=<i>/part.parquet` (Hive partitions: `rank` and `src` are columns of the
query views). The key is the sha256 of the store version, the rank argument, the ranks file
names give and every input file's bytes, like the loader's parse cache; an entry is written to
a temporary sibling and renamed into place, so a reader never sees half an entry.
"""

from __future__ import annotations

import gc
import hashlib
import json
import os
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from engine.errors import TraceError, malformed_as_trace_error
from engine.trace import safe_io
from engine.trace.cache import cache_root
from engine.trace.kineto import parse_kineto
from engine.trace.layout import rank_in_name
from engine.trace.store import rows, stream

STORE_VERSION = "s3"  # s2: `ev` stored per source, offset in the view; s3: collective metadata columns
_STR = pa.string()
_INT = pa.int64()
SCHEMAS = {
    "events": pa.schema(
        [
            ("ev", _INT),
            ("cat", _STR),
            ("name", _STR),
            ("pid", _STR),
            ("tid", _STR),
            ("ts_us", pa.float64()),
            ("dur_us", pa.float64()),
            ("device", _INT),
            ("stream", _INT),
            ("correlation", _INT),
            ("external_id", _INT),
            ("rf_id", _INT),
            ("seq_num", _INT),
            ("fwd_tid", _INT),
            ("pg_name", _STR),
            ("coll_name", _STR),
            ("coll_seq", _INT),
            ("comms_id", _INT),
        ]
    ),
    "flows": pa.schema(
        [("id", _INT), ("cat", _STR), ("ph", _STR), ("ts_us", pa.float64()), ("pid", _STR), ("tid", _STR)]
    ),
}
TABLES = tuple(SCHEMAS)
# The query views' columns: the loader's order (engine.trace.model), `rank`/`src` from the folders
VIEW_COLUMNS = {
    "events": ["ev", "rank", *[f.name for f in SCHEMAS["events"]][1:], "src"],
    "flows": ["rank", *[f.name for f in SCHEMAS["flows"]], "src"],
}


def store_root() -> Path:
    return cache_root() / "store"


def _hash_file(path: Path, limit: int) -> bytes:
    """sha256 of a file's bytes read in 1 MiB steps (bounded memory), size-checked first."""
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise TraceError(f"cannot read: {exc.strerror or exc}", path) from None
    if size > limit:
        raise TraceError(
            f"file too large: {size:,} bytes exceeds the limit of {limit:,} (8x the free disk for the store, "
            "or MYSTIQUE_MAX_BYTES)",
            path,
        )
    h = hashlib.sha256()
    try:
        with open(path, "rb") as fh:
            while chunk := fh.read(1 << 20):
                h.update(chunk)
    except OSError as exc:
        raise TraceError(f"cannot read: {exc.strerror or exc}", path) from None
    return h.digest()


def store_key(files: list[Path], rank: int | None, limit: int) -> str:
    h = hashlib.sha256(f"{STORE_VERSION}|rank={rank}|n={len(files)}".encode())
    h.update(repr([rank_in_name(str(f)) for f in files]).encode())
    for f in files:
        h.update(_hash_file(f, limit))
    return h.hexdigest()


def _documents(f: Path, limit: int):
    """(display path, blocks) of each document behind one file: tarballs through safe_io (in memory)."""
    with open(f, "rb") as fh:
        head = fh.read(262)
    is_tar = f.name.lower().endswith(safe_io._TAR_SUFFIXES) or (len(head) >= 262 and head[257:262] == b"ustar")
    if not is_tar and head[:2] == b"\x1f\x8b":
        is_tar = f.name.lower().endswith((".tgz", ".tar.gz"))
    if is_tar:
        mem = min(limit, safe_io.max_bytes())  # a tarball is expanded in memory: RAM's limit
        for blob in safe_io.expand(f, safe_io.read_raw(f, mem), mem):
            data = blob.data
            yield blob.path, (data[i : i + stream.BLOCK] for i in range(0, len(data), stream.BLOCK))
    else:
        yield os.fspath(f), stream.iter_blocks(f, limit)


def _arrow(df, table: str) -> pa.Table:
    """One parsed block as an Arrow table of the store schema (categoricals as plain strings:
    Parquet dictionary-encodes them per row group)."""
    schema = SCHEMAS[table]
    cols = []
    for field in schema:
        col = df[field.name]
        if hasattr(col, "cat"):
            arr = pa.array(col.cat.codes.to_numpy(), pa.int32())
            dic = pa.array([str(c) for c in col.cat.categories], _STR)
            cols.append(pa.DictionaryArray.from_arrays(arr, dic).cast(_STR))
        else:
            cols.append(pa.array(col, field.type, from_pandas=True))
    return pa.Table.from_arrays(cols, schema=schema)


def _ingest(doc_path: str, blocks, tmp: Path, src: int, ev0: int, fallback: int, rank_fixed: bool) -> dict:
    """Stream one Kineto document into `<table>/rank=?/src=<src>/part.parquet`; its source record."""
    parts = {t: tmp / t / f"src={src}.tmp" for t in TABLES}
    writers = {t: pq.ParquetWriter(parts[t], SCHEMAS[t], compression="zstd") for t in TABLES}
    counts = {"events": 0, "flows": 0}
    items = 0
    km_all: dict = {"process_names": {}, "thread_names": {}, "iterations": [], "warnings": []}
    skeleton: dict = {}
    try:
        for got in stream.scan(blocks, doc_path, rows.DECODER):
            if isinstance(got, dict):
                skeleton = got
                continue
            if got and type(got[0]) is rows.Item:  # the fast path: typed Structs straight to Arrow
                with malformed_as_trace_error("Kineto trace", doc_path):  # as parse_kineto's errors
                    ev_t, fl_t, km = rows.tables(got, doc_path, fallback, ev0 + counts["events"], SCHEMAS)
            else:  # a block with values of unusual types: the loader's own parser decides
                ev, fl, km = parse_kineto({"traceEvents": got}, doc_path, fallback, True)
                ev["ev"] = np.arange(ev0 + counts["events"], ev0 + counts["events"] + len(ev), dtype=np.int64)
                ev_t, fl_t = _arrow(ev, "events"), _arrow(fl, "flows")
            del got
            items += km["events"]
            for t, tab in (("events", ev_t), ("flows", fl_t)):
                if len(tab):
                    writers[t].write_table(tab)
                    counts[t] += len(tab)
            km_all["process_names"].update(km["process_names"])
            km_all["thread_names"].update(km["thread_names"])
            km_all["iterations"].extend(km["iterations"])
            km_all["warnings"].extend(km["warnings"])
    finally:
        for w in writers.values():
            w.close()
    # The skeleton's distributedInfo decides the rank, as in the loader (parse_kineto on it)
    _, _, meta = parse_kineto({**skeleton, "traceEvents": []}, doc_path, fallback, rank_fixed)
    rank = meta["rank"]
    for it in km_all["iterations"]:
        it["rank"] = rank
    for t in TABLES:
        final = tmp / t / f"rank={rank}" / f"src={src}" / "part.parquet"
        final.parent.mkdir(parents=True, exist_ok=True)
        os.replace(parts[t], final)
    props = skeleton.get("deviceProperties")
    return {
        "src": src,
        "path": doc_path,
        "kind": "kineto",
        "rank": rank,
        "rank_in_file": meta["rank_in_file"],
        "world_size": meta["world_size"],
        "events": items,
        "rows": counts,
        "schema_version": skeleton.get("schemaVersion"),
        "device_properties": props if isinstance(props, list) else [],
        "warnings": meta["warnings"] + km_all["warnings"],
        "process_names": km_all["process_names"],
        "thread_names": km_all["thread_names"],
        "iterations": km_all["iterations"],
    }


def build(*paths, rank: int | None = None, use_cache: bool = True, scheduler: str | None = None, progress=None) -> Path:
    """The store folder of the Kineto traces behind `paths` (built when absent); TraceError on bad input.

    One task per input file (a rank file, or a tarball's members) fanned out with
    `engine.fanout.map_ranks` on `scheduler` (serial, local or tcp://HOST:PORT; default
    MYSTIQUE_SCHEDULER, else local): each task streams its documents into a staging folder, and
    this process numbers the sources in input order and renames their parts into place, so the
    store is the same wherever the tasks ran. `ev` is stored per source from 0; the `events`
    view adds each source's offset (engine/trace/store/sql.py)."""
    from engine.fanout import map_ranks, resolve

    if not paths:
        raise TraceError("no trace path given")
    mode = resolve(scheduler)  # a bad address fails before any work
    limit = safe_io.max_stream_bytes(store_root())  # streamed: bounded by disk, not RAM
    files: list[Path] = []
    for p in paths:
        files.extend(safe_io.list_files(p))
    key = store_key(files, rank, limit)
    final = store_root() / key
    if use_cache and (final / "manifest.json").is_file():
        return final
    root = store_root()
    try:
        root.mkdir(parents=True, exist_ok=True)
        sweep_staging(root)
        tmp = Path(tempfile.mkdtemp(prefix=f".{key[:16]}-", dir=root))
        held = _hold(tmp)
    except OSError as exc:
        raise TraceError(f"cannot write the trace store: {exc.strerror or exc}", root) from None
    try:
        for t in TABLES:
            (tmp / t).mkdir()
        jobs = [
            _Job(file=f, stage=tmp / f".job{i}", rank=rank, limit=limit, only_file=len(files) == 1)
            for i, f in enumerate(files)
        ]
        done = map_ranks(_ingest_file, jobs, scheduler=mode, progress=progress)
        sources: list[dict] = []
        skipped: list[dict] = []
        ev0 = 0
        declared: dict[int, str] = {}  # rank -> the first document that declares it
        for job, (recs, skips) in zip(jobs, done, strict=True):
            skipped.extend(skips)
            for rec in recs:
                _check_rank(rec, declared)
                src = len(sources)
                for t in TABLES:
                    part = job.stage / t / f"rank={rec['rank']}" / f"src={rec['src']}" / "part.parquet"
                    dest = tmp / t / f"rank={rec['rank']}" / f"src={src}" / "part.parquet"
                    dest.parent.mkdir(parents=True, exist_ok=True)
                    os.replace(part, dest)
                rec["src"], rec["ev0"] = src, ev0
                sources.append(rec)
                ev0 += rec["rows"]["events"]
            shutil.rmtree(job.stage, ignore_errors=True)
        if not sources:
            raise TraceError("holds no Kineto trace (the store holds Kineto events; ETs are not stored yet)", paths[0])
        manifest = {"store_version": STORE_VERSION, "content_hash": key, "sources": sources, "skipped": skipped}
        (tmp / "manifest.json").write_text(json.dumps(manifest, default=str))
        if final.exists():
            shutil.rmtree(final, ignore_errors=True)
        (tmp / ".building").unlink()  # the entry holds data only; the lock stays held until the rename
        os.replace(tmp, final)
    except OSError as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        raise TraceError(f"cannot write the trace store: {exc.strerror or exc}", root) from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    finally:
        os.close(held)
    return final


_STAGING = re.compile(r"\.[0-9a-f]{16}-")
STAGING_GRACE_S = 600.0
"""A staging folder without its lock file is swept only when older than this (its build may
be between mkdtemp and taking the lock)."""


def _hold(tmp: Path) -> int:
    """Take the staging folder's lock (`.building`, flock): held while this build runs, released
    by the kernel when the process dies, however it dies."""
    import fcntl

    fd = os.open(tmp / ".building", os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    return fd


def sweep_staging(root: Path) -> list[str]:
    """Remove the staging folders of builds that died (SIGKILL, power loss: issue 31), found by
    their lock being free; a live build's lock is held, so its folder stays. Returns the names."""
    import fcntl
    import time

    gone = []
    for d in root.iterdir():
        if not (_STAGING.match(d.name) and d.is_dir() and not d.is_symlink()):
            continue
        try:
            fd = os.open(d / ".building", os.O_RDWR)
        except FileNotFoundError:
            try:
                stale = time.time() - d.stat().st_mtime > STAGING_GRACE_S
            except OSError:
                continue
            if stale:
                shutil.rmtree(d, ignore_errors=True)
                gone.append(d.name)
            continue
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # held: a build is running
            continue
        else:
            shutil.rmtree(d, ignore_errors=True)
            gone.append(d.name)
        finally:
            os.close(fd)
    return gone


def _check_rank(rec: dict, declared: dict[int, str]) -> None:
    """Two documents that declare the same rank (distributedInfo) would be merged into one rank
    of the store: refused, naming both, as replay refuses two such execution traces."""
    if rec.get("rank_in_file") is None:
        return
    r = int(rec["rank"])
    if r in declared:
        raise TraceError(f"declares rank {r}, as does {declared[r]}: each rank needs its own file", rec["path"])
    declared[r] = str(rec["path"])


@dataclass(frozen=True, kw_only=True)
class _Job:
    """One fan-out task: a file streamed into `stage` (a folder under the entry's temporary one)."""

    file: Path
    stage: Path
    rank: int | None
    limit: int
    only_file: bool


def _ingest_file(job: _Job) -> tuple[list[dict], list[dict]]:
    """(source records, skipped documents) of one file, its parts under `job.stage` with sources
    numbered from 0 and `ev` from 0 per source. Module-level so that it pickles to Dask workers."""
    # As in the loader: the cyclic GC would rescan every block's fresh event dicts (none form cycles)
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        for t in TABLES:
            (job.stage / t).mkdir(parents=True, exist_ok=True)
        recs: list[dict] = []
        skipped: list[dict] = []
        for doc_path, blocks in _documents(job.file, job.limit):
            name_rank = rank_in_name(doc_path)
            fallback = name_rank if name_rank is not None else (job.rank if job.rank is not None else 0)
            try:
                rec = _ingest(doc_path, blocks, job.stage, len(recs), 0, fallback, False)
            except stream.NotKineto as exc:
                if job.only_file and doc_path == os.fspath(job.file):  # the one file given is no Kineto trace
                    raise
                skipped.append({"path": doc_path, "why": exc.problem})
                _drop_tmp_parts(job.stage, len(recs))
                continue
            recs.append(rec)
        return recs, skipped
    except OSError as exc:
        raise TraceError(f"cannot write the trace store: {exc.strerror or exc}", job.stage) from None
    finally:
        if gc_was_enabled:
            gc.enable()


def _drop_tmp_parts(tmp: Path, src: int) -> None:
    for t in TABLES:
        (tmp / t / f"src={src}.tmp").unlink(missing_ok=True)
