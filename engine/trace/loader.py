"""`load(*paths)`: files, folders and tarballs of ET / Kineto traces -> one linked `Trace`.

Steps: list the input files and read their raw bytes (size-checked, see safe_io) -> content
hash -> Parquet cache hit? -> otherwise decompress/unpack, parse each document by *content*
(ET: top-level `schema` + `nodes`; Kineto: `traceEvents`), assign ranks, concatenate per table,
classify categories, annotate phases/modules (engine.trace.phases), link ET <-> Kineto per rank,
and store in the cache.

Rank of a document: Kineto `distributedInfo.rank`, else a rank in the file name ("rank3",
"rank_3", "rank-3", "..._3.json"), else the `rank` argument, else 0 -- except that a single ET
whose rank nothing declares takes the rank of the Kineto file(s) loaded with it (when they agree),
so the two link.

Extra columns beyond model.py: `ops.src`, `events.src`, `flows.src` (int16): index of the
document in `meta["sources"]`, so per-file summaries can select their rows; `events.op_id`
(Int64): ET node id of the op a host event / launch / GPU event belongs to (<NA> if none).
"""

from __future__ import annotations

import functools
import gc
import hashlib
import os
from pathlib import Path

import numpy as np
import pandas as pd

from engine import envvars, jsonio
from engine.errors import TraceError
from engine.progress import report
from engine.trace import dupkeys, safe_io
from engine.trace.categories import categorize
from engine.trace.et import is_et, parse_et, parse_et_typed
from engine.trace.et_typed import TYPED_DOCS, decode_chakra
from engine.trace.kineto import as_kineto, is_kineto, parse_kineto
from engine.trace.layout import rank_in_name
from engine.trace.model import PHASES, Trace, TraceMeta
from engine.trace.pairing import check_link, check_ranks, et_pid, kineto_pids
from engine.trace.ranks import ranks_of

LOADER_VERSION = "h1-6"  # h1-2: sources carry pid / rank_declared (pairing checks); h1-3: meta["files"]; h1-4: Kineto time/rank warnings; h1-5: collective metadata columns; h1-6: record-function ids all of one value do not link


# the name engine/fleet (and older callers) import; the rule is layout's `rank_in_name`
rank_from_name = rank_in_name


def _decode(blob: safe_io.Blob, typed: bool = True):
    """The document of a blob: a typed document (`et_typed.TYPED_DOCS`) for well-formed chakra ETs
    (fast path), else orjson's dict; a TraceError naming the file when it is neither an ET nor a Kineto trace."""
    data = blob.data[3:] if blob.data[:3] == b"\xef\xbb\xbf" else blob.data  # UTF-8 byte-order mark
    if (dup := dupkeys.duplicate_top_level_key(data)) is not None:  # the store refuses it too
        raise TraceError(dupkeys.message(dup), blob.path)
    if typed:
        doc = decode_chakra(data)
        if doc is not None:
            return doc
    try:
        doc = jsonio.loads(data)
    except jsonio.JSONDecodeError as exc:
        doc = _decode_lenient(data)
        if doc is None:
            raise TraceError(f"not valid JSON ({str(exc).splitlines()[0][:120]})", blob.path) from None
    doc = as_kineto(doc)
    if is_et(doc) or is_kineto(doc):
        return doc
    if isinstance(doc, dict):
        keys = ", ".join(list(map(str, doc))[:8]) or "none"
        raise TraceError(f"not an execution trace or Kineto trace: top-level keys {keys}", blob.path)
    if isinstance(doc, list):
        raise TraceError(
            "not an execution trace or Kineto trace: a top-level JSON list whose items are no trace events (no 'ph')",
            blob.path,
        )
    raise TraceError(f"not an execution trace or Kineto trace: top-level JSON {type(doc).__name__}", blob.path)


def _decode_lenient(data: bytes):
    """Some profilers write NaN/Infinity literals, which orjson (strict JSON) refuses; the
    standard library accepts them. Returns None when that does not help either."""
    if b"NaN" not in data and b"Infinity" not in data:
        return None
    import json

    try:
        return json.loads(data)
    except (ValueError, RecursionError):
        return None


def _concat(frames: list[pd.DataFrame]) -> pd.DataFrame:
    """Concatenate keeping categorical columns categorical (union of categories)."""
    frames = [f for f in frames if f is not None]
    if len(frames) == 1:
        return frames[0]
    out = pd.concat(frames, ignore_index=True)
    for c in frames[0].columns:
        if isinstance(frames[0][c].dtype, pd.CategoricalDtype):
            out[c] = pd.api.types.union_categoricals([f[c] for f in frames], ignore_order=True)
    return out


def _empty_tables():
    """Typed empty tables (fresh copies: callers add columns to them)."""
    return tuple(t.copy() for t in _empty_template())


@functools.lru_cache(maxsize=1)
def _empty_template():
    ops, tensors = parse_et({"schema": "1.0.1", "nodes": []}, "", 0, [])
    events, flows, _ = parse_kineto({"traceEvents": []}, "", 0, False)
    return ops, tensors, events, flows


def _finish_ops(ops: pd.DataFrame) -> pd.DataFrame:
    ops["category"] = categorize(ops["name"])
    try:
        from engine.trace.phases import annotate_phases
    except ImportError:
        ops["phase"] = pd.Categorical(["other"] * len(ops), categories=list(PHASES))
        ops["module"] = pd.Categorical([""] * len(ops))
    else:
        phase, module = annotate_phases(ops)
        ops["phase"] = phase.values if len(ops) else pd.Categorical([], categories=list(PHASES))
        ops["module"] = module.values if len(ops) else pd.Categorical([])
    for c in ("k_ts_us", "k_dur_us", "gpu_dur_us"):
        ops[c] = np.full(len(ops), np.nan)
    order = [
        "id",
        "rank",
        "name",
        "parent",
        "depth",
        "tid",
        "fw_tid",
        "fw_parent",
        "rf_id",
        "seq_id",
        "scope",
        "schema",
        "category",
        "inputs",
        "outputs",
        "attrs",
        "n_children",
        "phase",
        "module",
        "k_ts_us",
        "k_dur_us",
        "gpu_dur_us",
        "src",
    ]
    return ops[order]


def _phase_rules_version() -> str:
    """Cached tables carry phase/module columns, so a change of those rules must miss the cache."""
    try:
        from engine.trace.phases import RULES_VERSION
    except ImportError:
        return "none"
    return str(RULES_VERSION)


def content_key(digests: list[bytes], rank, name_ranks: list[int | None] | None = None) -> str:
    """Cache key: loader and phase-rule versions, the rank argument, the ranks the file names
    give (an ET without a rank of its own takes its name's: the same bytes saved as rank_0 and as
    rank_1 are two ranks) and each file's sha256."""
    h = hashlib.sha256()
    h.update(f"{LOADER_VERSION}|phases={_phase_rules_version()}|rank={rank}|n={len(digests)}".encode())
    if name_ranks and any(r is not None for r in name_ranks):
        h.update(f"|names={name_ranks}".encode())
    for d in digests:
        h.update(d)
    return h.hexdigest()


def load(*paths, rank: int | None = None, progress=None, use_cache: bool = True) -> Trace:
    """Load and link ET / Kineto traces (see module docstring); bad input raises TraceError."""
    if not paths:
        raise TraceError("no trace path given")
    if len(paths) == 1 and isinstance(paths[0], (list, tuple)):
        paths = tuple(paths[0])
    report(progress, 0.0, "reading files")
    limit = safe_io.max_bytes()
    files: list[Path] = []
    for p in paths:
        files.extend(safe_io.list_files(p))
    raws = [(f, safe_io.read_raw(f, limit)) for f in files]
    digests = [hashlib.sha256(raw).digest() for _, raw in raws]  # hashed once: cache key and sources
    key = content_key(digests, rank, [rank_in_name(str(f)) for f, _ in raws])
    if use_cache:
        from engine.trace.cache import load_cached

        hit = load_cached(key)
        if hit is not None:
            _rebase_paths(hit.meta, [os.fspath(f) for f in files])
            report(progress, 1.0, "loaded from cache")
            return hit
    # Parsing allocates millions of small containers and none of them form cycles; the cyclic
    # GC would rescan them repeatedly (2-3x the parse time), so it is paused while building.
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        trace = _build(raws, digests, rank, limit, key, progress)
    finally:
        if gc_was_enabled:
            gc.enable()
    if use_cache:
        from engine.trace.cache import save_cached

        report(progress, 0.95, "writing cache")
        save_cached(key, trace)
    report(progress, 1.0, "done")
    return trace


def _rebase_paths(meta: TraceMeta, files: list[str]) -> None:
    """A cache hit names the files given now, not those of the load that filled the cache.

    Why: the cache is keyed by content, so the same bytes under another path (a copy, another
    checkout, a re-captured folder) hit the first load's entry; its `sources[*].path` then named
    the other file, and replay.json's provenance (`paths.et`) pointed at it.
    """
    old = meta.get("files") or []
    if len(old) != len(files):
        return
    moves = [(o, n) for o, n in zip(old, files) if o != n]
    if not moves:
        return
    for src in meta.get("sources", []):
        for o, n in moves:
            path = src.get("path", "")
            if path == o or path.startswith(o + "!"):  # a file, or a member of a tar file
                src["path"] = n + path[len(o) :]
                break
    warnings = meta.get("warnings") or []
    for i, w in enumerate(warnings):
        for o, n in moves:
            w = w.replace(o, n)
        warnings[i] = w
    meta["files"] = list(files)


def _adopt_kineto_rank(undeclared_et, ops_l, ten_l, sources) -> None:
    """One ET whose rank nothing declares + Kineto files of one rank: the ET takes that rank.

    Why: an ET file carries no rank, so `resnet_et.json` + `trace_rank3.json` (rank 3 in its
    distributedInfo) must still pair up for linking.
    """
    k_ranks = {s["rank"] for s in sources if s["kind"] == "kineto"}
    if len(undeclared_et) != 1 or undeclared_et[0] is None or len(k_ranks) != 1:
        return
    (r,) = k_ranks
    i, src = undeclared_et[0]
    ops_l[i]["rank"] = np.full(len(ops_l[i]), r, dtype=np.int32)
    ten_l[i]["rank"] = np.full(len(ten_l[i]), r, dtype=np.int32)
    sources[src]["rank"] = r


# Peak memory of a whole-table load per byte of decompressed JSON (measured on tiled real GPU
# traces: 476 MB -> 3.75 GB, 950 MB -> 7.4 GB peak RSS, issue 22).
LOAD_BYTES_PER_JSON_BYTE = 8


def load_budget_bytes() -> int | None:
    """The memory a whole-table load may take: MYSTIQUE_LOAD_MAX_BYTES, else the memory available
    now (None when nothing tells)."""
    from engine.sysinfo import available_memory_bytes

    env = (envvars.get("MYSTIQUE_LOAD_MAX_BYTES") or "").strip()
    return envvars.get_int("MYSTIQUE_LOAD_MAX_BYTES", 0, 0) if env else available_memory_bytes()


def check_load_memory(json_bytes: int, path) -> None:
    """Refuse, before decoding, a load whose whole tables would not fit in memory: a multi-GB
    trace goes through the trace store instead (bounded memory). MYSTIQUE_LOAD_MAX_BYTES
    overrides the budget (default: the memory available now)."""
    budget = load_budget_bytes()
    need = LOAD_BYTES_PER_JSON_BYTE * json_bytes
    if budget is not None and need > budget:
        raise TraceError(
            f"too big to load whole: {safe_io._human(json_bytes)} of JSON needs about {safe_io._human(need)} of "
            f"memory, {safe_io._human(budget)} available; the trace store reads it in bounded memory "
            "(mystique info, sql and simulate, the Traces, Explore and Ranks pages)",
            path,
        )


def _build(raws, digests, rank_arg, limit, key, progress) -> Trace:
    warn: list[str] = []
    sources: list[dict] = []
    ops_l, ten_l, ev_l, fl_l = [], [], [], []
    undeclared_et: list = []
    iterations: list[dict] = []
    resources: dict[str, str] = {}
    world = None
    meta_k: dict = {"process_names": {}, "thread_names": {}, "device_properties": []}
    n_files = len(raws)
    json_total = 0
    for fi, ((f, raw), digest) in enumerate(zip(raws, digests)):
        report(progress, 0.05 + 0.6 * fi / n_files, f"parsing {f.name}")
        for blob in safe_io.expand(f, raw, limit, sha256=digest.hex()):
            resources.update(blob.resources)
            json_total += len(blob.data)
            check_load_memory(json_total, blob.path)
            doc = _decode(blob)
            src = len(sources)
            name_rank = rank_in_name(blob.path)
            fallback = name_rank if name_rank is not None else (rank_arg if rank_arg is not None else 0)
            parsed = parse_et_typed(doc, blob.path, fallback, warn) if isinstance(doc, TYPED_DOCS) else None
            if parsed is None and isinstance(doc, TYPED_DOCS):  # a value the typed path leaves to orjson
                doc = _decode(blob, typed=False)
            if parsed is not None or is_et(doc):
                ops, ten = parsed or parse_et(doc, blob.path, fallback, warn)
                ops["src"] = np.full(len(ops), src, dtype=np.int16)
                ops_l.append(ops)
                ten_l.append(ten)
                schema, n_nodes = (
                    (doc.schema, len(doc.nodes)) if parsed else (str(doc.get("schema", "")), len(doc["nodes"]))
                )
                sources.append(
                    {
                        "path": blob.path,
                        "kind": "execution_trace",
                        "schema": schema,
                        "nodes": n_nodes,
                        "rank": fallback,
                        "rank_in_file": None,
                        "world_size": None,
                        "sha256": blob.sha256,
                        "pid": et_pid(blob.data),
                        "rank_declared": name_rank if name_rank is not None else rank_arg,
                    }
                )
                undeclared_et.append((len(ops_l) - 1, src) if name_rank is None and rank_arg is None else None)
            else:
                ev, fl, km = parse_kineto(doc, blob.path, fallback, False)
                ev["src"] = np.full(len(ev), src, dtype=np.int16)
                fl["src"] = np.full(len(fl), src, dtype=np.int16)
                ev_l.append(ev)
                fl_l.append(fl)
                iterations.extend(km["iterations"])
                warn.extend(km["warnings"])
                world = world if world is not None else km["world_size"]
                meta_k["process_names"].update(km["process_names"])
                meta_k["thread_names"].update(km["thread_names"])
                if km["device_properties"] and not meta_k["device_properties"]:
                    meta_k["device_properties"] = km["device_properties"]
                sources.append(
                    {
                        "path": blob.path,
                        "kind": "kineto",
                        "schema": "",
                        "events": km["events"],
                        "rank": km["rank"],
                        "rank_in_file": km["rank_in_file"],
                        "world_size": km["world_size"],
                        "sha256": blob.sha256,
                        "pids": kineto_pids(ev),
                    }
                )
            del doc
    _adopt_kineto_rank(undeclared_et, ops_l, ten_l, sources)
    report(progress, 0.7, "building tables")
    if not ops_l or not ev_l:  # typed empty tables for the side that was not loaded
        e_ops, e_ten, e_ev, e_fl = _empty_tables()
        for t in (e_ops, e_ev, e_fl):
            t["src"] = np.zeros(0, np.int16)
        ops_l, ten_l = ops_l or [e_ops], ten_l or [e_ten]
        ev_l, fl_l = ev_l or [e_ev], fl_l or [e_fl]
    ops = _finish_ops(_concat(ops_l))
    tensors = _concat(ten_l)
    events = _concat(ev_l)
    flows = _concat(fl_l)
    if len(ev_l) > 1:
        events["ev"] = np.arange(len(events), dtype=np.int64)
    et_ranks = [s["rank"] for s in sources if s["kind"] == "execution_trace"]
    if len(et_ranks) != len(set(et_ranks)):
        warn.append("several execution traces share a rank; node ids may collide")
    report(progress, 0.8, "linking ET and Kineto")
    link_info = None
    op_id = np.full(len(events), -1, dtype=np.int64)
    if len(ops) and len(events):
        from engine.trace.link import link

        check_ranks(sources, ops, events)  # an ET paired with another rank's Kineto trace
        link_info, op_id = link(ops, events, warn)
        check_link(sources, link_info)
    events["op_id"] = pd.arrays.IntegerArray(np.where(op_id >= 0, op_id, 0), op_id < 0)
    kinds = sorted({s["kind"] for s in sources})
    ranks = ranks_of(ops, events)
    schemas = [s["schema"] for s in sources if s["kind"] == "execution_trace"]
    meta: TraceMeta = {
        "sources": sources,
        "files": [os.fspath(f) for f, _ in raws],  # as given to load(): a cache hit rebases paths on them
        "kind": "+".join(kinds),
        "schema": schemas[0] if schemas else "",
        "nodes": sum(s.get("nodes", 0) for s in sources),
        "events": sum(s.get("events", 0) for s in sources),
        "ranks": ranks,
        "world_size": world,
        "warnings": warn,
        "link": link_info,
        "iterations": iterations,
        "content_hash": key,
        "resources": resources,
        **meta_k,
    }
    if len(set(schemas)) > 1:
        meta["schemas"] = sorted(set(schemas))
    return Trace(ops=ops, tensors=tensors, events=events, flows=flows, meta=meta)
