"""Kineto (Chrome trace JSON) parsing: one pass over `traceEvents` into column lists.

Why one pass with plain lists: the 110k-event ResNet trace must load in well under a second on
a shared 2-core box; per-event pandas work or repeated scans would dominate. Nullable integer
columns are built as int64 arrays plus a mask (`IntegerArray`) instead of lists of None, which
pandas converts slowly.

Handles NVIDIA and AMD/ROCm traces alike (`cat` is the same; runtime names differ: cuda*/hip*),
CPU-only traces, traces without `distributedInfo`, float or int timestamps, and pid/tid given
as text ("Spans", "PyTorch Profiler"). Every event counts in `meta["events"]`; only "X"
(complete) events become rows of `events`, "s"/"f"/"t" become `flows`, and "M" metadata
becomes compact name maps.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from engine.errors import TraceError, malformed_as_trace_error
from engine.trace.columns import fast_cat
from engine.trace.steps import iterations
from engine.trace.vocab import GPU_ACTIVITY_CATS, LEGACY_CATS, modern_cat

_NA = -(1 << 63)
_GPU_CATS = frozenset(GPU_ACTIVITY_CATS)
_FLOW_PH = frozenset(("s", "f", "t"))


def is_kineto(doc) -> bool:
    return isinstance(doc, dict) and "traceEvents" in doc


def is_event_array(doc) -> bool:
    """The Trace Event Format's array form (a top-level JSON list of events, as the 2020-21
    profiler wrote it; Perfetto and chrome://tracing accept it): a list whose first objects are
    trace events (they have a `ph`). An empty list is no trace."""
    if not isinstance(doc, list) or not doc:
        return False
    head = [e for e in doc[:16] if isinstance(e, dict)]
    return bool(head) and all("ph" in e for e in head)


def as_kineto(doc):
    """A Kineto document of either form: the array form becomes `{"traceEvents": doc}`."""
    return {"traceEvents": doc} if is_event_array(doc) else doc


def _nullable(values: list) -> pd.arrays.IntegerArray:
    try:
        arr = np.asarray(values, dtype=np.int64)
    except OverflowError:  # an id beyond int64 is as good as absent
        arr = np.asarray([v if _NA < v < (1 << 63) else _NA for v in values], dtype=np.int64)
    mask = arr == _NA
    arr[mask] = 0
    return pd.arrays.IntegerArray(arr, mask)


def _int_column(raw: list) -> pd.arrays.IntegerArray:
    """Nullable ints of raw arg values: one int64 conversion when every value converts (the usual
    case: ints), else each value as `_as_int` reads it (strings like "Spans", None: absent)."""
    try:
        arr = np.fromiter(raw, np.int64, len(raw))
    except (TypeError, ValueError, OverflowError):
        return _nullable([_as_int(v) for v in raw])
    mask = arr == _NA
    arr[mask] = 0
    return pd.arrays.IntegerArray(arr, mask)


def _as_int(v) -> int:
    """int of an arg value; _NA when absent or not integral (e.g. "Spans")."""
    if v is None:
        return _NA
    if type(v) is int:
        return v
    try:
        return int(v)
    except (TypeError, ValueError, OverflowError):
        return _NA


def parse_kineto(doc: dict, path: str, rank: int, rank_fixed: bool) -> tuple[pd.DataFrame, pd.DataFrame, dict]:
    """(events, flows, meta) of one Kineto document. `rank_fixed`: ignore distributedInfo.rank."""
    with malformed_as_trace_error("Kineto trace", path):
        return _parse(doc, path, rank, rank_fixed)


def file_rank(doc: dict) -> tuple[int | None, int | None]:
    """(rank, world_size) from `distributedInfo`, None where the file does not say."""
    info = doc.get("distributedInfo")
    if not isinstance(info, dict):
        return None, None
    r, w = info.get("rank"), info.get("world_size")
    r = _as_int(r)
    w = _as_int(w)
    return (None if r == _NA else r), (None if w == _NA else w)


MAX_TS_US = 1e17  # ~3,170 years after the Unix epoch: a Kineto clock (us) never reads more
MAX_DUR_US = 1e12  # ~11.6 days for one event


def _rank_warnings(path: str, rank: int | None, world: int | None) -> list[str]:
    """`distributedInfo` that names no process: a negative rank or world size, a rank outside it."""
    out = []
    if rank is not None and rank < 0:
        out.append(f"{path}: distributedInfo.rank is {rank}, a negative rank; ignored")
    if world is not None and world < 1:
        out.append(f"{path}: distributedInfo.world_size is {world}; ignored")
    elif rank is not None and world is not None and rank >= world:
        out.append(f"{path}: distributedInfo.rank {rank} is outside world_size {world}")
    return out


def _time_warnings(path: str, ts: np.ndarray, dur: np.ndarray) -> list[str]:
    """Timestamps no clock produces (NaN, infinite, past `MAX_TS_US`, negative durations or
    past `MAX_DUR_US`): a timeline or a sum over them is meaningless, so the user is told which."""
    out = []
    with np.errstate(invalid="ignore"):
        bad_ts = ~np.isfinite(ts) | (np.abs(ts) > MAX_TS_US)
        bad_dur = ~np.isfinite(dur) | (dur < 0) | (dur > MAX_DUR_US)
    if bad_ts.any():
        out.append(
            f"{path}: {int(bad_ts.sum()):,} event(s) have a timestamp no clock produces "
            f"(e.g. ts {ts[bad_ts][0]:g} us; the bound is {MAX_TS_US:g}); times involving them are meaningless"
        )
    if bad_dur.any():
        out.append(
            f"{path}: {int(bad_dur.sum()):,} event(s) have an impossible duration "
            f"(e.g. dur {dur[bad_dur][0]:g} us; the bound is 0 to {MAX_DUR_US:g}); times involving them are meaningless"
        )
    return out


def _sparse_cat(n: int, at: np.ndarray, values: list[str]) -> pd.Categorical:
    """A categorical of n rows, "" except `values` at rows `at` (no per-row object for the rest)."""
    cats = list(dict.fromkeys(["", *values]))
    index = {c: i for i, c in enumerate(cats)}
    codes = np.zeros(n, np.int32)
    codes[at] = [index[v] for v in values]
    return pd.Categorical.from_codes(codes, categories=cats)


def _sparse_ints(n: int, at: np.ndarray, raw: list) -> pd.arrays.IntegerArray:
    col = _int_column(raw)
    data = np.zeros(n, np.int64)
    mask = np.ones(n, bool)
    data[at] = col._data
    mask[at] = col._mask
    return pd.arrays.IntegerArray(data, mask)


def _collective_columns(n: int, at: list[int], pg: list, coll: list, seq: list, comms: list) -> dict:
    """pg_name / coll_name / coll_seq / comms_id of n events, given only on rows `at`."""
    idx = np.asarray(at, np.int64)
    return {
        "pg_name": _sparse_cat(n, idx, pg),
        "coll_name": _sparse_cat(n, idx, coll),
        "coll_seq": _sparse_ints(n, idx, seq),
        "comms_id": _sparse_ints(n, idx, comms),
    }


def _parse(doc: dict, path: str, rank: int, rank_fixed: bool):
    evs = doc["traceEvents"]
    if not isinstance(evs, list):
        raise TraceError("Kineto 'traceEvents' is not a list", path)
    f_rank, world = file_rank(doc)
    warns = _rank_warnings(path, f_rank, world)
    if f_rank is not None and f_rank < 0:
        f_rank = None  # a negative rank names no process: the file name's or the caller's rank is used
    if world is not None and world < 1:
        world = None
    if f_rank is not None and not rank_fixed:
        rank = f_rank
    cat_l, name_l, pid_l, tid_l, ts_l, dur_l = [], [], [], [], [], []
    dev_l, stream_l, corr_l, ext_l, rf_l, seq_l, fwd_l = [], [], [], [], [], [], []
    # collective metadata (c10d args), kept only for the few events with a process group
    c_at: list[int] = []
    pg_l, coll_l, cseq_l, comms_l = [], [], [], []
    fl_id, fl_cat, fl_ph, fl_ts, fl_pid, fl_tid = [], [], [], [], [], []
    pnames: dict[str, str] = {}
    tnames: dict[str, str] = {}
    strs: dict = {}

    def s(v):
        # Cached for ints only: 1, 1.0 and True are equal dict keys but print differently
        t = type(v)
        if t is int:
            r = strs.get(v)
            if r is None:
                r = strs[v] = str(v)
            return r
        return v if t is str else str(v)

    ai = _as_int
    NA = _NA  # local alias for the hot loop
    for e in evs:
        if type(e) is not dict:
            continue
        ph = e.get("ph")
        if ph == "X":
            args = e.get("args")
            if type(args) is not dict:
                args = {}
            cat = e.get("cat", "")
            cat = cat if type(cat) is str else s(cat)
            name = e.get("name", "")
            name = name if type(name) is str else s(name)
            if cat in LEGACY_CATS:
                cat = modern_cat(cat, name)
            cat_l.append(cat)
            name_l.append(name)
            pid = e.get("pid", "")
            pid_l.append(s(pid))
            tid_l.append(s(e.get("tid", "")))
            ts_l.append(float(e.get("ts", 0.0)))
            dur_l.append(float(e.get("dur", 0.0) or 0.0))
            dev_l.append(ai(args.get("device", pid)) if cat in _GPU_CATS else NA)
            # Raw values, converted per column after the loop (_int_column): cheaper than a type
            # check per value here, and a loop over (key, list) pairs measured ~35% slower.
            get = args.get
            stream_l.append(get("stream", NA))
            corr_l.append(get("correlation", NA))
            ext = get("External id")
            ext_l.append(get("external id", NA) if ext is None else ext)  # lower case: legacy runtime calls
            rf_l.append(get("Record function id", NA))
            seq_l.append(get("Sequence number", NA))
            fwd_l.append(get("Fwd thread id", NA))
            # a collective's process group, name, sequence number and comms id (record_param_comms
            # and NCCL kernels): what matches one collective across ranks (engine/simulate/fleet)
            pg = get("Process Group Name")
            if pg is None:
                pg = get("pg_name")
            if pg is not None:
                c_at.append(len(cat_l) - 1)
                pg_l.append(pg if type(pg) is str else s(pg))
                cn = get("Collective name", "")
                coll_l.append(cn if type(cn) is str else s(cn))
                cseq_l.append(get("seq", NA))
                comms_l.append(get("comms_id", NA))
        elif ph in _FLOW_PH:
            fl_id.append(ai(e.get("id")))
            c = e.get("cat", "")
            fl_cat.append(c if type(c) is str else s(c))
            fl_ph.append(ph)
            fl_ts.append(float(e.get("ts", 0.0)))
            fl_pid.append(s(e.get("pid", "")))
            fl_tid.append(s(e.get("tid", "")))
        elif ph == "M":
            args = e.get("args")
            nm = args.get("name") if type(args) is dict else None
            if nm is None:
                continue
            if e.get("name") == "process_name":
                pnames[s(e.get("pid", ""))] = str(nm)
            elif e.get("name") == "thread_name":
                tnames[f"{s(e.get('pid', ''))}/{s(e.get('tid', ''))}"] = str(nm)
    n = len(cat_l)
    events = pd.DataFrame(
        {
            "ev": np.arange(n, dtype=np.int64),
            "rank": np.full(n, rank, dtype=np.int32),
            "cat": fast_cat(cat_l),
            "name": fast_cat(name_l),
            "pid": fast_cat(pid_l),
            "tid": fast_cat(tid_l),
            "ts_us": np.asarray(ts_l, dtype=np.float64),
            "dur_us": np.asarray(dur_l, dtype=np.float64),
            "device": _nullable(dev_l),
            "stream": _int_column(stream_l),
            "correlation": _int_column(corr_l),
            "external_id": _int_column(ext_l),
            "rf_id": _int_column(rf_l),
            "seq_num": _int_column(seq_l),
            "fwd_tid": _int_column(fwd_l),
            **_collective_columns(n, c_at, pg_l, coll_l, cseq_l, comms_l),
        }
    )
    flow_ids = np.asarray(fl_id, dtype=np.int64)
    flows = pd.DataFrame(
        {
            "rank": np.full(len(fl_id), rank, dtype=np.int32),
            "id": np.where(flow_ids == _NA, -1, flow_ids),
            "cat": fast_cat(fl_cat),
            "ph": fast_cat(fl_ph, ["s", "f", "t"]),
            "ts_us": np.asarray(fl_ts, dtype=np.float64),
            "pid": fast_cat(fl_pid),
            "tid": fast_cat(fl_tid),
        }
    )
    warns.extend(_time_warnings(path, events["ts_us"].to_numpy(), events["dur_us"].to_numpy()))
    props = doc.get("deviceProperties")
    meta = {
        "warnings": warns,
        "events": len(evs),
        "rank": rank,
        "rank_in_file": f_rank,
        "world_size": world,
        "process_names": pnames,
        "thread_names": tnames,
        "device_properties": props if isinstance(props, list) else [],
        "iterations": iterations(events),  # the step model's (engine/trace/steps.py)
        "schema_version": doc.get("schemaVersion"),
    }
    return events, flows, meta
