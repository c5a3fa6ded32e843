"""One block of Kineto `traceEvents` items, decoded into typed Structs, as Arrow tables.

Why not the loader's parser here: decoding every item into dicts (every key of `args`, lists of
input shapes...) and then walking them event by event cost 2.5x the decode alone (issue 22). Here
msgspec decodes each item straight into a `Struct` that has only the fields the store keeps
(untracked by the GC), skipping the rest of the text without building objects, and each column
is one list comprehension over the block, converted to Arrow without pandas.

Same tables as `engine.trace.kineto.parse_kineto`, value for value (tests/test_store.py checks
every shared and sample trace): the Structs accept only the types the loader reads the common
way (strings for `ph`/`cat`/`name`, int or str pids, numbers for `ts`/`dur`, ints for the id
args); a block with anything else (an item that is no object, a null, a string timestamp...)
fails validation and goes through the loader's own parser instead (`ingest`), so the rules for
odd values live in one place.
"""

from __future__ import annotations

from operator import attrgetter
from typing import Any

import msgspec
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from engine.trace.kineto import _GPU_CATS, _NA, _as_int, _int_column, _time_warnings
from engine.trace.steps import iterations
from engine.trace.vocab import LEGACY_CATS, STEP_PREFIX, modern_cat


class _Missing:
    """The default of `args.device`: absent (the loader then reads the pid), unlike JSON null."""

    __slots__ = ()


MISSING: Any = _Missing()


class Args(msgspec.Struct, gc=False):
    """The `args` keys the store keeps; every other key is skipped unread."""

    device: Any = MISSING
    stream: int | str = _NA
    correlation: int | str = _NA
    external_id: int | str = msgspec.field(default=_NA, name="External id")
    external_id_lc: int | str = msgspec.field(default=_NA, name="external id")  # legacy runtime calls
    rf_id: int | str = msgspec.field(default=_NA, name="Record function id")
    seq_num: int | str = msgspec.field(default=_NA, name="Sequence number")
    fwd_tid: int | str = msgspec.field(default=_NA, name="Fwd thread id")
    name: Any = None  # "M" metadata: a process or thread name
    # collective metadata (c10d args; kept where the store schema has the columns)
    pg: Any = msgspec.field(default=None, name="Process Group Name")
    pg_alt: Any = msgspec.field(default=None, name="pg_name")
    coll_name: Any = msgspec.field(default="", name="Collective name")
    coll_seq: int | str = msgspec.field(default=_NA, name="seq")
    comms_id: int | str = msgspec.field(default=_NA, name="comms_id")


class Item(msgspec.Struct, gc=False):
    """One `traceEvents` item, the fields the store reads."""

    ph: str = ""
    cat: str = ""
    name: str = ""
    pid: int | str = ""
    tid: int | str = ""
    ts: float = 0.0
    dur: float | None = 0.0
    id: Any = None
    args: Args | None = None


DECODER = msgspec.json.Decoder(list[Item])
_NO_ARGS = Args()
_INT_ARGS = ("stream", "correlation", "external_id", "rf_id", "seq_num", "fwd_tid")
_GET_INTS = attrgetter(*_INT_ARGS)
_STR = pa.string()
_F64 = pa.float64()
_INT = pa.int64()


def _ints(raw: list[int]) -> pa.Array:
    """int64 with nulls where the loader has NA (`_nullable`'s semantics: beyond int64 is NA)."""
    try:
        arr = np.fromiter(raw, np.int64, len(raw))
    except (TypeError, ValueError, OverflowError):
        arr = np.asarray([v if _NA < v < (1 << 63) else _NA for v in raw], np.int64)
    mask = arr == _NA
    return pa.array(arr, _INT, mask=mask) if mask.any() else pa.array(arr, _INT)


def _strs(values: list) -> pa.Array:
    """Strings as the loader's `str(v)`: int pids/tids become their decimal text (Arrow's cast
    writes the same digits as `str(int)`, ~40x faster than calling it per value)."""
    try:
        arr = pa.array(values)  # all str, or all int (the usual cases); mixed raises
    except (pa.ArrowTypeError, pa.ArrowInvalid, OverflowError):
        return pa.array([v if type(v) is str else str(v) for v in values], _STR)
    return arr if arr.type == _STR else arr.cast(_STR)


def _collectives(args: list[Args]) -> dict[str, pa.Array]:
    """pg_name, coll_name, coll_seq, comms_id as the loader reads them: only for events with a
    process group ("Process Group Name", else "pg_name"); "" and null elsewhere."""
    n = len(args)
    hit = [i for i, a in enumerate(args) if a.pg is not None or a.pg_alt is not None]
    if not hit:
        empty = pa.array([""] * n, _STR)
        return {"pg_name": empty, "coll_name": empty, "coll_seq": pa.nulls(n, _INT), "comms_id": pa.nulls(n, _INT)}
    pg, coll = [""] * n, [""] * n
    seq: list[int | str] = [_NA] * n
    comms: list[int | str] = [_NA] * n
    for i in hit:
        a = args[i]
        v = a.pg if a.pg is not None else a.pg_alt
        pg[i] = v if type(v) is str else str(v)
        coll[i] = a.coll_name if type(a.coll_name) is str else str(a.coll_name)
        seq[i], comms[i] = a.coll_seq, a.comms_id
    return {
        "pg_name": pa.array(pg, _STR),
        "coll_name": pa.array(coll, _STR),
        "coll_seq": pa.array(_int_column(seq), _INT),
        "comms_id": pa.array(_int_column(comms), _INT),
    }


def tables(items: list[Item], path: str, rank: int, ev0: int, schemas: dict) -> tuple[pa.Table, pa.Table, dict]:
    """(events, flows, block meta) of one block, `ev` numbered from `ev0`; meta as parse_kineto's."""
    xs = [e for e in items if e.ph == "X"]
    cat = [e.cat for e in xs]
    name = [e.name for e in xs]
    if not LEGACY_CATS.keys().isdisjoint(cat):  # the 2020-21 profiler's names
        cat = [modern_cat(c, n) for c, n in zip(cat, name, strict=True)]
    pid = [e.pid for e in xs]
    args = [_NO_ARGS if e.args is None else e.args for e in xs]
    for a in args:
        if a.external_id_lc != _NA and a.external_id == _NA:
            a.external_id = a.external_id_lc
    ts = np.array([e.ts for e in xs], np.float64)
    dur = np.array([e.dur or 0.0 for e in xs], np.float64)
    gpu = _GPU_CATS
    dev = [
        (_as_int(p if a.device is MISSING else a.device) if c in gpu else _NA)
        for a, p, c in zip(args, pid, cat, strict=True)
    ]
    cols = {
        "cat": pa.array(cat, _STR),
        "name": pa.array(name, _STR),
        "pid": _strs(pid),
        "tid": _strs([e.tid for e in xs]),
        "ts_us": pa.array(ts, _F64),
        "dur_us": pa.array(dur, _F64),
        "device": _ints(dev),
        "ev": pa.array(np.arange(ev0, ev0 + len(xs), dtype=np.int64), _INT),
    }
    got = list(map(_GET_INTS, args))  # one tuple per event: ~3x faster than a pass per column
    try:
        block = np.array(got) if got else np.zeros((0, len(_INT_ARGS)), np.int64)
    except (OverflowError, ValueError):
        block = np.zeros(0, object)
    for j, key in enumerate(_INT_ARGS):
        if block.dtype == np.int64:  # every value an int64 (the usual case)
            col = block[:, j]
            mask = col == _NA
            cols[key] = pa.array(col, _INT, mask=mask) if mask.any() else pa.array(col, _INT)
        else:  # text ("0x0" streams on ROCm) or ids beyond int64: the loader's own conversion
            cols[key] = pa.array(_int_column([t[j] for t in got]), _INT)
    del got, block
    if "pg_name" in schemas["events"].names:
        cols.update(_collectives(args))
    iters: list[dict] = []
    if xs:  # the prefix on Arrow is a cheap superset; the step model (engine/trace/steps.py) decides
        hits = pc.starts_with(cols["name"], STEP_PREFIX)
        if pc.any(hits).as_py():
            at = np.flatnonzero(hits.to_numpy(zero_copy_only=False))
            cand = {"name": [name[i] for i in at], "cat": [cat[i] for i in at], "ts_us": ts[at], "dur_us": dur[at]}
            iters = iterations(pd.DataFrame(cand), rank=rank)
    ev_schema = schemas["events"]
    events = pa.Table.from_arrays([cols[f.name] for f in ev_schema], schema=ev_schema)
    fs = [e for e in items if e.ph in ("s", "f", "t")]
    ids = np.asarray([_as_int(e.id) for e in fs], np.int64)
    fcols = {
        "id": pa.array(np.where(ids == _NA, -1, ids), _INT),
        "cat": pa.array([e.cat for e in fs], _STR),
        "ph": pa.array([e.ph for e in fs], _STR),
        "ts_us": pa.array(np.array([e.ts for e in fs], np.float64), _F64),
        "pid": _strs([e.pid for e in fs]),
        "tid": _strs([e.tid for e in fs]),
    }
    flows = pa.Table.from_arrays([fcols[f.name] for f in schemas["flows"]], schema=schemas["flows"])
    pnames: dict[str, str] = {}
    tnames: dict[str, str] = {}
    for e in items:
        if e.ph != "M" or e.args is None or e.args.name is None:
            continue
        if e.name == "process_name":
            pnames[str(e.pid)] = str(e.args.name)
        elif e.name == "thread_name":
            tnames[f"{e.pid}/{e.tid}"] = str(e.args.name)
    meta = {
        "events": len(items),
        "process_names": pnames,
        "thread_names": tnames,
        "iterations": iters,
        "warnings": _time_warnings(path, ts, dur),
    }
    return events, flows, meta
