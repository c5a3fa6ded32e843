"""The Ranks page's helpers: which store a job's paths stand for, its rank summaries (built in a
worker process), and the cached tables and figures the page draws.

Why this shape: a 256-rank job's events never enter the server. The summaries are built once by
a `rank_summary` job (engine.workspace.worker: store build + engine.analysis.ranks.summarize,
fanned out on the dashboard's scheduler setting) and cached beside the store; a page run then
reads that small Parquet file (cached here on its path and mtime), and a rank's events are read
from the store only when the user opens that rank's timeline.
"""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd
import streamlit as st

from app import workspace
from engine.analysis import ranks as rk
from engine.trace.store import read

KIND = "rank_summary"


def split_paths(text: str) -> list[str]:
    """The paths typed in the job box (separated by ';' or new lines), user-expanded."""
    return [os.path.expanduser(p.strip()) for p in text.replace("\n", ";").split(";") if p.strip()]


def job_paths(text: str, listed: list[str]) -> list[str]:
    """The job's paths: `listed` (a loaded trace's paths, kept as a list) while the box still shows
    them, else what was typed (issue 31: a loaded path holding ';' was cut in two)."""
    return list(listed) if listed and text == ";".join(listed) else split_paths(text)


def _stamp(paths: list[str]) -> list:
    """Size and mtime of every file behind the paths (a folder: its trace files, as the store
    build lists them), so a file rewritten in place makes a new job necessary."""
    from engine.errors import TraceError
    from engine.trace.safe_io import list_files

    out: list = []
    for p in paths:
        try:
            files = list_files(p) if os.path.isdir(p) else [Path(p)]
        except TraceError:
            files = [Path(p)]
        for f in files:
            try:
                s = os.stat(f)
                out.append([str(f), s.st_size, s.st_mtime_ns])
            except OSError:
                out.append([str(f), None])
    return out


@st.cache_data(max_entries=64, show_spinner=False)
def _is_store(path: str, stamp: list) -> bool:
    return read.is_store(path)  # parses the manifest (1 MB for 256 ranks): once per its mtime


def store_of(paths: list[str]) -> str | None:
    """The trace store these paths stand for, when known without reading them: the folder itself
    when it is a store, else the store a finished summary job of the same, unchanged paths built."""
    if len(paths) == 1 and _is_store(paths[0], _stamp([os.path.join(paths[0], "manifest.json")])):
        return str(Path(paths[0]).resolve())
    stamp = _stamp(paths)
    for j in reversed(workspace.catalog().jobs(kind=KIND)):
        p, s = j["params"], j.get("summary") or {}
        if j["status"].value == "done" and p.get("paths") == paths and p.get("stamp") == stamp:
            store = s.get("store")
            if store and read.is_store(store):
                return str(store)
    return None


def submit(paths: list[str], scheduler: str, name: str | None) -> int:
    """Queue the summary job (a worker process: store build when needed, then the summaries)."""
    params = {"paths": paths, "scheduler": scheduler, "stamp": _stamp(paths)}
    return workspace.runner().submit(KIND, params, trace=name, target=f"rank summaries ({scheduler})")


def active_jobs(paths: list[str]) -> list[dict]:
    return [
        j for j in workspace.catalog().jobs(kind=KIND) if not j["status"].finished and j["params"].get("paths") == paths
    ]


def last_failure(paths: list[str]) -> str | None:
    jobs = [j for j in workspace.catalog().jobs(kind=KIND) if j["params"].get("paths") == paths]
    if jobs and jobs[-1]["status"].value in ("failed", "cancelled"):
        return workspace.failure_line(jobs[-1])
    return None


def _mtime(store: str) -> int:
    try:
        return (Path(store) / rk.SUMMARY).stat().st_mtime_ns
    except OSError:
        return 0


@st.cache_data(max_entries=8, show_spinner=False)
def _summary(store: str, mtime: int) -> pd.DataFrame | None:
    return rk.cached(store)


def summary(store: str) -> pd.DataFrame | None:
    """The store's rank x step table when built (None: a summary job must run first)."""
    return _summary(store, _mtime(store))


@st.cache_data(max_entries=8, show_spinner=False)
def _tables(store: str, mtime: int) -> dict:
    t = _summary(store, mtime)
    return {"per_rank": rk.per_rank(t), "stragglers": rk.stragglers(t)}


def tables(store: str) -> dict:
    """{"per_rank", "stragglers"} of the store's summary (cached)."""
    return _tables(store, _mtime(store))


@st.cache_resource(max_entries=8, show_spinner=False)
def _heatmaps(store: str, mtime: int):
    from engine.figures.overview import step_heatmaps

    return step_heatmaps(_summary(store, mtime))


def heatmaps(store: str):
    return _heatmaps(store, _mtime(store))


@st.cache_resource(max_entries=8, show_spinner=False)
def _bars(store: str, mtime: int):
    from engine.figures.overview import rank_bars

    return rank_bars(_tables(store, mtime)["per_rank"])


def bars(store: str):
    return _bars(store, _mtime(store))


@st.cache_resource(max_entries=8, show_spinner="Reading the rank's events from the store…")
def rank_timeline(store: str, rank: int, lo: float, hi: float):
    """(figure, event count) of one rank's events overlapping [lo, hi] µs, read from the store
    alone (no other rank is touched)."""
    from engine.figures.timeline import TimelineView, timeline_figure

    ev = read.rank_events(store, rank, window=(lo, hi))
    fig = timeline_figure(ev, TimelineView(rank=rank, start_us=0.0, end_us=hi - lo), origin_us=lo)
    return fig, len(ev)
