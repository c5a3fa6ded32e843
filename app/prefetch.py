"""Background prefetch of a trace's first Explore views, while the user still reads another page.

Why: the first render of Explore was all server work (data dependencies, hierarchy, layout,
figure) plus one-off imports. One daemon worker per server process computes, after the run that
loaded a trace ended, the same cached views (app/views.py) with the same arguments as the page's
first render, so the Explore click finds them in the caches.
"""

from __future__ import annotations

import threading

import streamlit as st

from app import views
from app.views import GRAPH_COLOR_BY, GRAPH_HEIGHT
from engine import envvars


def request(paths) -> None:
    """Ask for the first Explore views of a trace (operator graph at the top, default timeline
    window) to be built in the background once this run ends (`flush`).

    Why: the first render of Explore was all server work (data dependencies, hierarchy, layout,
    figure) plus one-off imports; done while the user still reads the Traces page, the Explore
    click finds it in the caches. Same cached functions, same arguments as the page: a page that
    asks while the worker computes waits on Streamlit's per-key lock instead of computing twice.
    Off with MYSTIQUE_PREFETCH=0."""
    if envvars.get("MYSTIQUE_PREFETCH") == "0":
        return
    sticky = st.session_state.get("_sticky", {})
    min_dur = st.session_state.get("t_min_dur", sticky.get("t_min_dur", 0.0))
    req = (tuple(str(p) for p in paths), float(min_dur or 0.0))
    pending = st.session_state.setdefault("_prefetch", [])
    if req not in pending:
        pending.append(req)


def flush() -> None:
    """After a page ran: hand this run's prefetch requests to the background worker."""
    pending = st.session_state.pop("_prefetch", None)
    if pending:
        _warm_once()
        q = _prefetch_queue()
        for req in pending:
            q.put(req)


_PREFETCH: dict = {}
_PREFETCH_LOCK = threading.Lock()


def _warm_once() -> None:
    """Import what Explore needs (networkx, plotly's trace validators, the figure modules: about a
    second on a loaded machine) once per process, in the script thread at the end of its first
    run that loads a trace. Not in the worker: two threads importing one package tree at once can
    hand one of them a partially initialised module (CPython accepts that to break an import
    deadlock); the worker then only computes."""
    with _PREFETCH_LOCK:
        if _PREFETCH.get("warm"):
            return
        _PREFETCH["warm"] = True
    try:
        _warm_imports()
    except Exception:  # noqa: BLE001 - an optimisation only: the page imports what it needs itself
        pass


def _prefetch_queue():
    """One daemon worker per server process, computing the views `request` asked for."""
    import queue

    with _PREFETCH_LOCK:
        if "q" not in _PREFETCH:
            _PREFETCH["q"] = q = queue.Queue()
            threading.Thread(target=_prefetch_worker, args=(q,), name="mystique-prefetch", daemon=True).start()
        return _PREFETCH["q"]


def _warm_imports() -> None:
    import networkx  # noqa: F401 -- imported for its side effect: loaded once, early
    import plotly.graph_objects as go
    import plotly.io as pio

    import engine.capture.meta
    import engine.figures.hierarchy
    import engine.figures.selection
    import engine.figures.timeline
    import engine.graph
    import engine.graph._nxbuild  # noqa: F401

    # plotly builds each trace type's validators on first use (~0.5 s for Scatter + Bar)
    fig = go.Figure(
        [
            go.Scatter(x=[0, 1], y=[0, 1], mode="markers+text", text=["a", "b"], customdata=[[0], [1]]),
            go.Scatter(x=[0, 1, None], y=[0, 1, None], mode="lines", line=dict(width=1), hoverinfo="skip"),
            go.Bar(base=[0.0], x=[1.0], y=[0], orientation="h", text=["a"], customdata=[[0, "a"]], width=0.85),
        ]
    )
    fig.update_layout(xaxis=dict(range=[0, 1]), yaxis=dict(fixedrange=True), legend=dict(orientation="h"))
    pio.to_json(fig.to_dict(), validate=False)


def _prefetch_worker(q) -> None:
    while True:
        paths, min_dur = q.get()
        try:
            _prefetch_views(paths, min_dur)
        except Exception:  # noqa: BLE001 - the page reports errors when it builds the view itself
            pass
        finally:
            q.task_done()


def wait_idle(timeout_s: float = 120.0) -> bool:
    """Block until the background worker has nothing queued or running (tests); False on timeout."""
    import time

    q = _PREFETCH.get("q")
    end = time.monotonic() + timeout_s
    while q is not None and q.unfinished_tasks and time.monotonic() < end:
        time.sleep(0.05)
    return q is None or not q.unfinished_tasks


def _prefetch_views(paths: tuple[str, ...], min_dur: float) -> None:
    """The calls pages/explore.py makes on its first render of each view, in the same form."""
    trace = views.open_paths(paths)  # over the whole-table budget: its store (a window is read)
    rank = views.trace_ranks(paths)[0]
    if trace.has_et:
        views.hierarchy_fig(paths, rank, None, GRAPH_COLOR_BY[0], (), "", GRAPH_HEIGHT)
    if trace.has_kineto:
        w = views.default_window(paths, rank)
        views.timeline_fig(paths, rank, float(w[0]), float(w[1]), float(min_dur), None, "", False, (), True)
