"""A trace over the whole-table budget, opened through its trace store (issue 31, item 21).

Why: `load()` decodes the JSON into whole pandas tables, about 8 bytes of memory per byte of
JSON (engine.trace.loader.LOAD_BYTES_PER_JSON_BYTE: a 950 MB trace peaked at 7.2 GB), while the
store reads columns and time windows from Parquet in bounded memory. `mystique info`, the
Traces page and Explore (timeline, Analysis, SQL) call `open_trace`: within the budget it is
`load()`; over it, the store is built (streamed, ~270 MiB at any size) and a `StoreTrace` is
returned, whose methods read only what a view needs:

- `extent(rank)`, `first_view_rows(rank)`: the rank's origin and span, the rows its first
  timeline view is chosen from;
- `window(rank, lo_us, hi_us)`: the rows overlapping a window (timeline columns), at most
  `WINDOW_MAX_ROWS` (the shortest left out beyond that, and said so);
- `names(rank)`, `named(rank, names)`, `event(ev)`: what a name search reads, one row by id;
- summaries (engine.trace.store.summary) and analysis tables (engine.analysis.store_tables).

The whole-table budget: `MYSTIQUE_WHOLE_TABLE_MAX_BYTES` (default 2 GiB, issue 22's memory
target), never more than the loader's own budget (MYSTIQUE_LOAD_MAX_BYTES, else the memory
available). The estimate needs no decoding: a file's size, a gzip's ISIZE trailer.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from engine import envvars
from engine.errors import TraceError
from engine.trace import safe_io

ENV = "MYSTIQUE_WHOLE_TABLE_MAX_BYTES"
DEFAULT_BUDGET_BYTES = 2 << 30
WINDOW_MAX_ROWS = 500_000
"""Rows one timeline window reads at most (about 60 bytes each in Arrow)."""
TIMELINE_COLUMNS = ["ev", "cat", "name", "pid", "tid", "ts_us", "dur_us", "stream", "correlation"]
SEARCH_MAX_HITS = 50_000
QUERY_MEMORY_BYTES = 256 << 20
"""DuckDB's memory limit for these reads (streaming aggregates, a window's durations): without it
DuckDB keeps Parquet pages cached up to a quarter of the memory available."""


def json_bytes(path: Path) -> int:
    """The JSON bytes behind one file, without decoding it: its size, or a gzip's ISIZE trailer
    (the size modulo 4 GiB: taken to the smallest value at least twice the compressed size when
    the file could hide a wrap; a trailer over the gzip ratio limit is no trailer: the size)."""
    try:
        size = path.stat().st_size
        with open(path, "rb") as fh:
            if fh.read(2) != b"\x1f\x8b" or size < 18:
                return size
            fh.seek(-4, os.SEEK_END)
            isize = int.from_bytes(fh.read(4), "little")
    except OSError as exc:
        raise TraceError(f"cannot read: {exc.strerror or exc}", path) from None
    ratio = safe_io.max_gzip_ratio()
    if isize > size * ratio:  # no real trailer (a truncated file): the loader reports it
        return size
    if size * ratio >= 1 << 32:  # could be over 4 GiB decompressed
        while isize < 2 * size:
            isize += 1 << 32
    return isize


def budget_bytes() -> int:
    """The whole-table budget (module docstring)."""
    from engine.trace.loader import load_budget_bytes

    mine = envvars.get_int(ENV, 0, 0) if (envvars.get(ENV) or "").strip() else DEFAULT_BUDGET_BYTES
    loader = load_budget_bytes()
    return mine if loader is None else min(mine, loader)


def files_of(paths) -> list[Path]:
    files: list[Path] = []
    for p in paths:
        files.extend(safe_io.list_files(p))
    return files


def over_budget(paths, budget: int | None = None) -> str | None:
    """Why the files behind `paths` would not fit whole tables in `budget` (default
    `budget_bytes()`), in one phrase; None when they fit."""
    from engine.trace.loader import LOAD_BYTES_PER_JSON_BYTE

    files = files_of(paths)
    total = sum(json_bytes(f) for f in files)
    need = LOAD_BYTES_PER_JSON_BYTE * total
    budget = budget_bytes() if budget is None else budget
    if need <= budget:
        return None
    h = safe_io._human
    return f"{h(total)} of JSON would take about {h(need)} as whole tables, over the whole-table budget of {h(budget)}"


def open_trace(
    *paths, rank: int | None = None, use_cache: bool = True, progress=None, scheduler: str | None = None
) -> Any:
    """`load(*paths)` when its whole tables fit the budget, else a `StoreTrace` of their store."""
    why = over_budget(paths)
    if why is None:
        from engine.trace import load

        return load(*paths, rank=rank, progress=progress, use_cache=use_cache)
    from engine.trace.store.ingest import build

    store = build(*paths, rank=rank, use_cache=use_cache, scheduler=scheduler, progress=progress)
    return StoreTrace.of(store, why, [os.fspath(p) for p in paths])


def _meta(manifest: dict, why: str, paths: list[str]) -> dict:
    sources = manifest["sources"]
    warnings = [w for s in sources for w in s.get("warnings", [])]
    warnings += [f"{s['path']}: not read ({s['why']}): the store holds Kineto events only" for s in manifest["skipped"]]
    world = next((s["world_size"] for s in sources if s.get("world_size") is not None), None)
    props: list = next((s["device_properties"] for s in sources if s.get("device_properties")), [])
    return {
        "sources": [{**s, "schema": ""} for s in sources],
        "files": paths,
        "kind": "kineto",
        "schema": "",
        "nodes": 0,
        "events": sum(int(s.get("events", 0)) for s in sources),
        "ranks": sorted({int(s["rank"]) for s in sources if s["rows"]["events"]}),
        "world_size": world,
        "warnings": warnings,
        "link": None,
        "iterations": [it for s in sources for it in s.get("iterations", [])],
        "content_hash": f"store:{manifest['content_hash']}",
        "resources": {},
        "process_names": {k: v for s in sources for k, v in (s.get("process_names") or {}).items()},
        "thread_names": {k: v for s in sources for k, v in (s.get("thread_names") or {}).items()},
        "device_properties": props,
        "whole_table": why,
    }


@dataclass(kw_only=True)
class StoreTrace:
    """A Kineto trace read through its store (module docstring). `ops`/`tensors` are empty (the
    store holds no ET); `events`/`flows` are refused: a view that needs whole tables says so."""

    store: Path
    meta: dict[str, Any]
    _extent: dict = field(default_factory=dict, repr=False)

    @classmethod
    def of(cls, store: Path, why: str, paths: list[str]) -> StoreTrace:
        from engine.trace.store.read import manifest

        return cls(store=Path(store), meta=_meta(manifest(store), why, paths))

    has_et = False
    ops = pd.DataFrame({"id": pd.Series([], dtype="int64"), "rank": pd.Series([], dtype="int32")})
    tensors = pd.DataFrame()

    @property
    def has_kineto(self) -> bool:
        return bool(self.meta["ranks"])

    @property
    def content_hash(self) -> str:
        return self.meta["content_hash"]

    @property
    def ranks(self) -> list[int]:
        return list(self.meta["ranks"])

    def refusal(self) -> TraceError:
        return TraceError(
            f"{self.meta['whole_table']}: this view needs whole tables; Explore's timeline, Analysis and SQL, "
            "the Ranks page and `mystique info/sql/simulate` read it through the store",
            ", ".join(self.meta["files"]),
        )

    @property
    def events(self) -> pd.DataFrame:
        raise self.refusal()

    @property
    def flows(self) -> pd.DataFrame:
        raise self.refusal()

    def connect(self):
        from engine.trace.store.sql import connect

        return connect(self.store, memory_bytes=QUERY_MEMORY_BYTES)

    def sql(self, query: str, params: list | None = None) -> pd.DataFrame:
        con = self.connect()
        try:
            return con.execute(query, params or []).df()
        finally:
            con.close()

    def extent(self, rank: int) -> tuple[float, float]:
        """(origin, span) of one rank in µs: its first start, and last end minus that."""
        if rank not in self._extent:
            lo, hi = self.sql("SELECT min(ts_us), max(ts_us + dur_us) FROM events WHERE rank = ?", [int(rank)]).iloc[0]
            self._extent[rank] = (0.0, 0.0) if pd.isna(lo) else (float(lo), float(hi) - float(lo))
        return self._extent[rank]

    def first_view_rows(self, rank: int) -> pd.DataFrame:
        """The rows the timeline's first view is chosen from (engine.figures.timeline.default_window):
        the rank's step rows, else its first 5000 events shorter than half its span, after two
        zero-length rows at its extremes (no step name), so the function sees the same span."""
        from engine.trace.steps import STEP_PREFIX

        origin, span = self.extent(rank)
        cols = "SELECT rank, cat, name, ts_us, dur_us FROM events WHERE rank = ?"
        rows = self.sql(f"{cols} AND starts_with(name, ?)", [int(rank), STEP_PREFIX])
        if not len(rows):
            rows = self.sql(f"{cols} AND dur_us < ? ORDER BY ts_us LIMIT 5000", [int(rank), 0.5 * span])
        ext = pd.DataFrame({"rank": rank, "cat": "", "name": "", "ts_us": [origin, origin + span], "dur_us": 0.0})
        return pd.concat([ext, rows], ignore_index=True)

    def window(
        self, rank: int, lo_us: float, hi_us: float, columns: list[str] | None = None
    ) -> tuple[pd.DataFrame, float]:
        """(rows of `rank` overlapping [lo_us, hi_us] (absolute µs), shortest duration left out):
        at most WINDOW_MAX_ROWS rows; beyond that the shortest events are left out (0.0: none)."""
        from engine.trace.store.read import rank_events

        cols = columns or TIMELINE_COLUMNS
        # a margin: the figure filters µs from the origin, whose rounding differs from absolute µs
        # (rows past the window change no sub-row: an event's depth comes from events around it)
        pad = 16 * float(np.spacing(max(abs(lo_us), abs(hi_us), 1.0)))  # a few units in the last place
        lo_us, hi_us = lo_us - pad, hi_us + pad
        where = "WHERE rank = ? AND ts_us <= ? AND ts_us + dur_us >= ?"
        args = [int(rank), float(hi_us), float(lo_us)]
        n = int(self.sql(f"SELECT count(*) FROM events {where}", args).iloc[0, 0])
        min_dur = 0.0
        if n > WINDOW_MAX_ROWS:
            q = 1.0 - WINDOW_MAX_ROWS / n
            min_dur = float(self.sql(f"SELECT quantile_disc(dur_us, {q!r}) FROM events {where}", args).iloc[0, 0])
        ev = rank_events(self.store, rank, cols, window=(lo_us, hi_us), min_dur_us=min_dur)
        return ev, min_dur

    def lane_seeds(self, rank: int) -> pd.DataFrame:
        """One row (cat, pid, tid, stream) per distinct combination on the rank, in order of first
        appearance: laid out ahead of a window's rows, they give its lanes the whole rank's
        order (engine.figures.timeline numbers lanes by first appearance)."""
        if ("lanes", rank) not in self._extent:
            self._extent[("lanes", rank)] = self.sql(
                "SELECT cat, pid, tid, stream FROM events WHERE rank = ? GROUP BY cat, pid, tid, stream "
                "ORDER BY min(ev)",
                [int(rank)],
            )
        return self._extent[("lanes", rank)]

    def names(self, rank: int) -> pd.Series:
        """The distinct event names of the rank."""
        return self.sql("SELECT DISTINCT name FROM events WHERE rank = ?", [int(rank)])["name"].astype(str)

    def named(self, rank: int, names: list[str]) -> pd.DataFrame:
        """name, ts_us, dur_us of the rank's events named one of `names`, in time order; the
        first SEARCH_MAX_HITS."""
        if not names:
            return pd.DataFrame({"name": [], "ts_us": [], "dur_us": []})
        con = self.connect()
        try:
            con.register("_hit", pd.DataFrame({"name": list(names)}))
            return con.execute(
                "SELECT name, ts_us, dur_us FROM events WHERE rank = ? AND name IN (SELECT name FROM _hit) "
                f"ORDER BY ts_us LIMIT {SEARCH_MAX_HITS}",
                [int(rank)],
            ).df()
        finally:
            con.close()

    def event(self, ev: int) -> dict | None:
        """One event row by its id (`ev`), as a dict; None when absent."""
        df = self.sql("SELECT * FROM events WHERE ev = ?", [int(ev)])
        return None if df.empty else df.iloc[0].to_dict()


def is_store_trace(trace: Any) -> bool:
    return isinstance(trace, StoreTrace)


__all__ = [
    "DEFAULT_BUDGET_BYTES",
    "ENV",
    "StoreTrace",
    "budget_bytes",
    "is_store_trace",
    "json_bytes",
    "open_trace",
    "over_budget",
]
