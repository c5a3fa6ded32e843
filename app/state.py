"""Session state and caches shared by the pages.

Why this split: Streamlit reruns a page top to bottom on every interaction, so anything big
(traces, graph models, figures) lives in `st.cache_resource`/`st.cache_data` keyed on small
strings (file paths, content hashes, view parameters); `st.session_state` holds only handles:
trace names -> {"paths", "hash", "kind"}, the current selection (ids), specs (dicts) and result
file paths. Engine calls raise `TraceError` for bad input; pages show it with `st.error`.
"""

from __future__ import annotations

import hashlib
import os
import threading
from pathlib import Path

import streamlit as st

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "sample_traces"


def work_dir() -> Path:
    """Where uploads and replay results go (MYSTIQUE_UI_DIR; default .mystique_cache/ui in a
    checkout, the user cache folder when installed, since an install prefix may be read-only)."""
    from engine import resources

    default = ROOT / ".mystique_cache" / "ui" if resources.is_checkout() else resources.user_cache_dir() / "ui"
    return Path(os.environ.get("MYSTIQUE_UI_DIR", default))


DEFAULT_SAMPLE = "mlp"


def sample_sets() -> dict[str, list[str]]:
    """Bundled samples: folder name -> [ET, Kineto] paths (whichever exist)."""
    out = {}
    if SAMPLES.is_dir():
        for d in sorted(p for p in SAMPLES.iterdir() if p.is_dir()):
            files = [str(p) for p in (d / f"{d.name}_et.json.gz", d / f"{d.name}_kineto.json.gz") if p.exists()]
            if files:
                out[d.name] = files
    return out


def traces() -> dict[str, dict]:
    return st.session_state.setdefault("traces", {})


@st.cache_resource(max_entries=12, show_spinner="Loading trace…")
def load_paths(paths: tuple[str, ...]):
    """The Trace for these files (engine parse cache underneath; keyed on path strings)."""
    from engine.trace import load

    return load(*paths)


def add_trace(name: str, paths: list[str]) -> dict:
    """Load `paths` as one trace named `name` (ET + Kineto of one run pair up). Raises TraceError."""
    trace = load_paths(tuple(str(p) for p in paths))
    entry = {
        "paths": [str(p) for p in paths],
        "hash": trace.content_hash,
        "kind": trace.meta.get("kind", ""),
        "link_rate": (trace.meta.get("link") or {}).get("link_rate"),
    }
    traces()[name] = entry
    st.session_state.setdefault("current", name)
    return entry


PICKER_KEYS = ("summary_pick", "explore_trace", "compose_trace", "replay_trace")


def make_current(name: str) -> None:
    """Make `name` the trace every page shows next (trace pickers forget their old choice)."""
    st.session_state["current"] = name
    for key in PICKER_KEYS:
        st.session_state.pop(key, None)


def get_trace(name: str):
    return load_paths(tuple(traces()[name]["paths"]))


def unique_name(base: str) -> str:
    names, name, i = traces(), base, 2
    while name in names:
        name, i = f"{base} ({i})", i + 1
    return name


def ensure_started() -> None:
    """First run of a session: load the bundled sample so every page has something to show."""
    if st.session_state.get("_started"):
        return
    st.session_state["_started"] = True
    sets = sample_sets()
    pick = DEFAULT_SAMPLE if DEFAULT_SAMPLE in sets else next(iter(sets), None)
    if pick is None:
        return
    try:
        add_trace(f"sample:{pick}", sets[pick])
        st.session_state["current"] = f"sample:{pick}"
    except Exception as exc:  # noqa: BLE001 -- shown to the user, the app stays usable
        st.session_state["_start_error"] = f"could not load bundled sample {pick}: {exc}"


def save_upload(name: str, data: bytes) -> Path:
    """Write an uploaded file under the UI work dir, named by content (same bytes, same path)."""
    digest = hashlib.sha256(data).hexdigest()[:16]
    d = work_dir() / "uploads" / digest
    d.mkdir(parents=True, exist_ok=True)
    p = d / Path(name).name
    if not p.exists():
        p.write_bytes(data)
    return p


def results_dir() -> Path:
    d = work_dir() / "results"
    d.mkdir(parents=True, exist_ok=True)
    return d


@st.cache_resource
def device_lock(device: str) -> threading.Lock:
    """One lock per device across all sessions: two replays never share a device at once."""
    return threading.Lock()


def trace_picker(label: str = "Trace", key: str = "trace_pick", kinds: tuple[str, ...] = ()) -> str | None:
    """A selectbox of loaded traces (optionally only those whose kind contains one of `kinds`)."""
    names = [n for n, e in traces().items() if not kinds or any(k in e["kind"] for k in kinds)]
    if not names:
        st.info("No trace loaded yet: add one on the Traces page.")
        return None
    cur = st.session_state.get("current")
    idx = names.index(cur) if cur in names else 0
    name = st.selectbox(label, names, index=idx, key=key)
    return name


def selection() -> dict:
    """The working selection: {"trace": name, "ids": [ET ids], "source": str}."""
    return st.session_state.setdefault("selection", {"trace": None, "ids": [], "source": ""})


def set_selection(trace_name: str, ids: list[int], source: str) -> None:
    st.session_state["selection"] = {"trace": trace_name, "ids": sorted({int(i) for i in ids}), "source": source}


@st.cache_data(max_entries=32, show_spinner=False)
def summary_of(paths: tuple[str, ...]) -> dict:
    from engine.trace import summarize

    return summarize(load_paths(paths))


@st.cache_resource(max_entries=16, show_spinner="Building the operator graph…")
def graph_model(
    paths: tuple[str, ...], rank: int | None, collapse: str, depth: int, expand: tuple[str, ...], max_nodes: int
):
    """Laid-out graph model (data-dependency DAG, collapsed per the view) for one rank."""
    from engine.figures.graph import GraphView, build_graph_model
    from engine.graph import data_deps
    from engine.graph.calltree import rank_ops

    trace = load_paths(paths)
    dag = data_deps(trace, rank=rank)
    view = GraphView(collapse=collapse, depth=depth, expand=expand, max_nodes=max_nodes)
    return build_graph_model(rank_ops(trace.ops, rank), dag, view)


@st.cache_resource(max_entries=32, show_spinner=False)
def timeline_fig(
    paths: tuple[str, ...],
    rank: int | None,
    start_us: float | None,
    end_us: float | None,
    min_dur_us: float,
    flow_from: int | None,
):
    from engine.figures.timeline import TimelineView, timeline_figure

    trace = load_paths(paths)
    view = TimelineView(start_us=start_us, end_us=end_us, min_dur_us=min_dur_us, rank=rank)
    return timeline_figure(trace.events, view, flow_from=flow_from)


@st.cache_data(max_entries=32, show_spinner=False)
def capture_meta(paths: tuple[str, ...]) -> dict | None:
    """The capture meta (`<name>_meta.json` next to the trace files), when there is exactly one."""
    import orjson

    folders = {Path(p).parent for p in paths}
    metas = [m for f in folders for m in f.glob("*_meta.json")]
    if len(metas) != 1:
        return None
    try:
        return orjson.loads(metas[0].read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return None


@st.cache_resource(max_entries=16, show_spinner=False)
def graph_fig(
    paths: tuple[str, ...],
    rank: int | None,
    collapse: str,
    depth: int,
    expand: tuple[str, ...],
    max_nodes: int,
    color_by: str,
    highlight: tuple,
    height: int = 560,
):
    """The graph figure for a view (cached: reruns that change nothing else cost nothing)."""
    from engine.figures.graph import graph_figure

    model = graph_model(paths, rank, collapse, depth, expand, max_nodes)
    return graph_figure(model, color_by, highlight=list(highlight), height=height)


@st.cache_data(max_entries=32, show_spinner=False)
def default_window(paths: tuple[str, ...], rank: int | None) -> tuple[float, float]:
    from engine.figures.timeline import default_window as _dw

    ev = load_paths(paths).events
    if rank is not None and "rank" in ev.columns:
        ev = ev[ev["rank"] == rank]
    return tuple(float(x) for x in _dw(ev))
