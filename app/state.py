"""Session state and caches shared by the pages, backed by the workspace catalog.

Nothing is lost (issue 13): every loaded trace, spec, replay job and sticky setting is written
to the workspace's SQLite catalog (`engine.workspace`, default `.mystique/` in the working
directory, `MYSTIQUE_WORKSPACE`); a new session (browser reload, server restart) restores them.

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

from engine.trace.ranks import of_rank

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "sample_traces"


def work_dir() -> Path:
    """Where uploads and replay results go (MYSTIQUE_UI_DIR; default .mystique_cache/ui in a
    checkout, the user cache folder when installed, since an install prefix may be read-only)."""
    from engine import resources

    default = ROOT / ".mystique_cache" / "ui" if resources.is_checkout() else resources.user_cache_dir() / "ui"
    return Path(os.environ.get("MYSTIQUE_UI_DIR", default))


def workspace_dir() -> Path:
    """The session's workspace folder: chosen on the Traces page, else MYSTIQUE_WORKSPACE, else
    `<MYSTIQUE_UI_DIR>/workspace` when that is set (tests), else `.mystique/` in the cwd."""
    chosen = st.session_state.get("workspace")
    if chosen:
        return Path(chosen)
    if os.environ.get("MYSTIQUE_WORKSPACE"):
        return Path(os.environ["MYSTIQUE_WORKSPACE"])
    if os.environ.get("MYSTIQUE_UI_DIR"):
        return Path(os.environ["MYSTIQUE_UI_DIR"]) / "workspace"
    return Path.cwd() / ".mystique"


@st.cache_resource(show_spinner=False)
def _catalog(root: str):
    from engine.workspace import Catalog

    return Catalog(root)


def catalog():
    return _catalog(str(workspace_dir().resolve()))


def runner():
    from engine.workspace import JobRunner

    return JobRunner(catalog())


# Widget values that follow the user across pages, reloads and restarts (plain scalars only;
# pickers of loaded things are not here: they follow `current`).
STICKY = (
    "explore_view",
    "g_collapse",
    "g_color",
    "g_search",
    "t_min_dur",
    "t_search",
    "compose_scope",
    "replay_device",
    "replay_warmup",
    "replay_iters",
    "replay_mode",
    "replay_gaps",
    "cmp_mode",
    "cmp_window",
    "tt_window",
)
SESSION_KEYS = ("current", "selection", "benchmark")


def restore_settings() -> None:
    """Before a page runs: put back sticky widget values Streamlit dropped when their page was
    left (widget state lives only while its widget is drawn)."""
    saved = st.session_state.setdefault("_sticky", {})
    for k, v in saved.items():
        if k not in st.session_state:
            st.session_state[k] = v


def save_settings() -> None:
    """After a page ran: remember sticky values and session handles, in the catalog too."""
    saved = st.session_state.setdefault("_sticky", {})
    changed = {}
    for k in STICKY:
        if k in st.session_state:
            v = st.session_state[k]
            if isinstance(v, (str, int, float, bool)) and saved.get(k) != v:
                saved[k] = changed[k] = v
    for k in SESSION_KEYS:
        if k in st.session_state and st.session_state.get(f"_saved_{k}") != st.session_state[k]:
            st.session_state[f"_saved_{k}"] = changed[f"session.{k}"] = _plain(st.session_state[k])
    if changed:
        try:
            catalog().put_settings(changed)
        except Exception:  # noqa: BLE001 - a read-only workspace must not break the page
            pass


# The graph's defaults, shared by its widgets and by the prefetch, whose calls must match the
# page's first render argument for argument to land in the same cache entries.
GRAPH_HEIGHT = 560
GRAPH_COLOR_BY = ("category", "phase")


def prefetch(paths) -> None:
    """Ask for the first Explore views of a trace (operator graph at the top, default timeline
    window) to be built in the background once this run ends (`flush_prefetch`).

    Why: the first render of Explore was all server work (data dependencies, hierarchy, layout,
    figure) plus one-off imports; done while the user still reads the Traces page, the Explore
    click finds it in the caches. Same cached functions, same arguments as the page: a page that
    asks while the worker computes waits on Streamlit's per-key lock instead of computing twice.
    Off with MYSTIQUE_PREFETCH=0."""
    if os.environ.get("MYSTIQUE_PREFETCH", "1") == "0":
        return
    sticky = st.session_state.get("_sticky", {})
    min_dur = st.session_state.get("t_min_dur", sticky.get("t_min_dur", 0.0))
    req = (tuple(str(p) for p in paths), float(min_dur or 0.0))
    pending = st.session_state.setdefault("_prefetch", [])
    if req not in pending:
        pending.append(req)


def flush_prefetch() -> None:
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
    """One daemon worker per server process, computing the views `prefetch` asked for."""
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


def wait_prefetched(timeout_s: float = 120.0) -> bool:
    """Block until the background worker has nothing queued or running (tests); False on timeout."""
    import time

    q = _PREFETCH.get("q")
    end = time.monotonic() + timeout_s
    while q is not None and q.unfinished_tasks and time.monotonic() < end:
        time.sleep(0.05)
    return q is None or not q.unfinished_tasks


def _prefetch_views(paths: tuple[str, ...], min_dur: float) -> None:
    """The calls pages/explore.py makes on its first render of each view, in the same form."""
    from engine.trace.ranks import ranks_of

    trace = load_paths(paths)
    rank = (ranks_of(trace.ops, trace.events) or [0])[0]
    if trace.has_et:
        hierarchy_fig(paths, rank, None, GRAPH_COLOR_BY[0], (), "", GRAPH_HEIGHT)
    if trace.has_kineto:
        w = default_window(paths, rank)
        timeline_fig(paths, rank, float(w[0]), float(w[1]), float(min_dur), None, "")


def _plain(v):
    import copy

    return copy.deepcopy(v)


DEFAULT_SAMPLE = "mlp"


def sample_sets() -> dict[str, list[str]]:
    """Bundled samples: folder name -> [ET, Kineto] paths (whichever exist)."""
    out = {}
    if SAMPLES.is_dir():
        for d in sorted(p for p in SAMPLES.iterdir() if p.is_dir()):
            files = [str(p) for p in (d / f"{d.name}_et.json.gz", d / f"{d.name}_kineto.json.gz") if p.exists()]
            # multi-rank samples: every rank's ET + Kineto (one multi-rank trace)
            files = files or [str(p) for p in sorted(d.glob(f"{d.name}_rank*_*.json.gz"))]
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
    prefetch(entry["paths"])
    try:
        catalog().put_trace(name, entry)
    except Exception:  # noqa: BLE001 - the trace stays loaded in the session
        pass
    return entry


def rename_trace(old: str, new: str) -> None:
    loaded = traces()
    loaded[new] = loaded.pop(old)
    specs = st.session_state.get("specs", {})
    if old in specs:
        specs[new] = specs.pop(old)
        specs[new]["trace"] = new
    catalog().rename_trace(old, new)
    st.session_state["_pending_current"] = new  # applied by the router before any picker is drawn


def remove_trace(name: str) -> None:
    traces().pop(name, None)
    catalog().remove_trace(name)
    st.session_state.pop("current", None)
    for key in PICKER_KEYS:
        st.session_state.pop(key, None)


PICKER_KEYS = ("summary_pick", "explore_trace", "compose_trace", "replay_trace")


def make_current(name: str) -> None:
    """Make `name` the trace every page shows next.

    Pickers are keyed widgets, and a keyed widget's identity is its key: the browser keeps its
    old value unless the server *sets* it. Popping the key (what 4eb7f39 did) left the browser
    showing, and sending back, the previous trace (issue 13 problem 8). So the value is set.
    Called before the pickers are drawn in a run (button handlers sit above them).
    """
    st.session_state["current"] = name
    for key in PICKER_KEYS:
        st.session_state[key] = name


def get_trace(name: str):
    return load_paths(tuple(traces()[name]["paths"]))


def unique_name(base: str) -> str:
    names, name, i = traces(), base, 2
    while name in names:
        name, i = f"{base} ({i})", i + 1
    return name


def ensure_started() -> None:
    """First run of a session: restore the workspace (traces, specs, settings, selection); an
    empty workspace gets the bundled sample so every page has something to show."""
    if st.session_state.get("_started"):
        return
    st.session_state["_started"] = True
    if _restore():
        return
    sets = sample_sets()
    pick = DEFAULT_SAMPLE if DEFAULT_SAMPLE in sets else next(iter(sets), None)
    if pick is None:
        return
    try:
        add_trace(f"sample:{pick}", sets[pick])
        st.session_state["current"] = f"sample:{pick}"
    except Exception as exc:  # noqa: BLE001 -- shown to the user, the app stays usable
        st.session_state["_start_error"] = f"could not load bundled sample {pick}: {exc}"


def _restore() -> bool:
    """Load what the workspace catalog holds into this session; False when it holds no trace."""
    try:
        cat = catalog()
        saved = cat.traces()
    except Exception as exc:  # noqa: BLE001 - shown; the session starts empty
        st.session_state["_start_error"] = f"could not open workspace {workspace_dir()}: {exc}"
        return False
    if not saved:
        return False
    missing = []
    for name, entry in saved.items():
        if not all(Path(p).exists() for p in entry["paths"]):
            missing.append(name)
            continue
        traces()[name] = entry  # loaded lazily by the page that needs it (cached on paths)
    specs = cat.specs()
    st.session_state["specs"] = {k: v for k, v in specs.items() if k in traces()}
    settings = cat.settings()
    st.session_state["_sticky"] = {k: v for k, v in settings.items() if k in STICKY}
    for k in SESSION_KEYS:
        if f"session.{k}" in settings and settings[f"session.{k}"] is not None:
            st.session_state[k] = settings[f"session.{k}"]
            st.session_state[f"_saved_{k}"] = _plain(settings[f"session.{k}"])
    if st.session_state.get("current") not in traces():
        st.session_state["current"] = next(iter(traces()), None)
    if st.session_state.get("current"):
        prefetch(traces()[st.session_state["current"]]["paths"])  # reload: its views are ready sooner
    if missing:
        st.session_state["_start_error"] = "workspace traces whose files are gone: " + ", ".join(missing)
    return bool(traces())


def replay_runs() -> list[dict]:
    """Finished replay jobs of the workspace, oldest first (what Compare offers)."""
    out = []
    for j in catalog().jobs(kind="replay"):
        if j["status"].value != "done" or not j.get("result_path") or not Path(j["result_path"]).exists():
            continue
        s = j["summary"]
        out.append(
            {
                "job": j["id"],
                "trace": j["trace"],
                "path": j["result_path"],
                "kineto_path": s.get("kineto_path"),
                "device": s.get("device") or j["params"].get("config", {}).get("device", "cpu"),
                "target": j["target"],
                "median_ms": s.get("median_ms"),
                "wall_s": s.get("wall_s"),
                "worker_peak_rss_mb": s.get("worker_peak_rss_mb"),
            }
        )
    return out


def save_spec(trace_name: str, spec: dict) -> None:
    try:
        catalog().put_spec(trace_name, spec)
    except Exception:  # noqa: BLE001 - the spec stays in the session
        pass


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
    if st.session_state.get(key) not in names:
        st.session_state[key] = cur if cur in names else names[0]
    return st.selectbox(label, names, key=key)


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
    from engine.trace.ranks import rank_ops

    trace = load_paths(paths)
    dag = data_deps(trace, rank=rank)
    view = GraphView(collapse=collapse, depth=depth, expand=expand, max_nodes=max_nodes)
    return build_graph_model(rank_ops(trace.ops, rank), dag, view)


@st.cache_resource(max_entries=8, show_spinner="Finding data dependencies…")
def dag_of(paths: tuple[str, ...], rank: int | None):
    from engine.graph import data_deps

    return data_deps(load_paths(paths), rank=rank)


@st.cache_resource(max_entries=32, show_spinner=False)
def hierarchy_model(paths: tuple[str, ...], rank: int | None, focus_key: str | None):
    """The operator graph at a drill-down focus (same node budget on every page)."""
    from engine.figures.hierarchy import NODE_BUDGET, Focus, build_hierarchy_model
    from engine.trace.ranks import rank_ops

    trace = load_paths(paths)
    focus = Focus.from_key(focus_key) if focus_key else None
    return build_hierarchy_model(rank_ops(trace.ops, rank), dag_of(paths, rank), focus, NODE_BUDGET)


@st.cache_resource(max_entries=32, show_spinner=False)
def hierarchy_fig(
    paths: tuple[str, ...],
    rank: int | None,
    focus_key: str | None,
    color_by: str,
    selected: tuple,
    search: str,
    height: int = GRAPH_HEIGHT,
):
    from engine.figures.hierarchy import hierarchy_figure, search_keys
    from engine.trace.ranks import rank_ops

    model = hierarchy_model(paths, rank, focus_key)
    found = tuple(search_keys(model, rank_ops(load_paths(paths).ops, rank), search)) if search else ()
    return hierarchy_figure(model, color_by, selected=selected, found=found, height=height), len(found)


def focus_key_of(focus) -> str | None:
    if focus is None or (focus.parent is None and focus.lo is None):
        return None
    if focus.lo is None:
        return f"tree:{focus.parent}"
    return f"range:{'root' if focus.parent is None else focus.parent}:{focus.lo}:{focus.hi}"


def graph_panel(
    name: str, paths: tuple[str, ...], rank: int | None, chart_key: str, height: int = GRAPH_HEIGHT
) -> tuple[list[int], bool]:
    """The drill-down operator graph (Explore and Compose share it): breadcrumbs, search, the
    chart, Open group; returns (ET ids of the picked groups, whether the pick changed now)."""
    from engine.figures.selection import selected_keys

    foci = st.session_state.setdefault("graph_focus", {})
    focus_key = foci.get(f"{name}|{rank}")
    model = hierarchy_model(paths, rank, focus_key)
    crumbs = model.crumbs
    cols = st.columns([6, 2, 1])
    with cols[0]:
        bc = st.columns(min(len(crumbs), 8))
        for i, (label, f) in enumerate(crumbs[-8:]):
            if bc[i].button(("› " if i else "") + label, key=f"{chart_key}_crumb_{i}", width="stretch"):
                foci[f"{name}|{rank}"] = focus_key_of(f)
                st.session_state.pop(chart_key, None)
                st.rerun()
    search = cols[1].text_input(
        "Search ops", key=f"{chart_key}_search", placeholder="name regex", label_visibility="collapsed"
    )
    color_by = cols[2].selectbox("Colour", list(GRAPH_COLOR_BY), key=f"{chart_key}_color", label_visibility="collapsed")
    # The pick is kept per view: the chart's own selection is reset whenever its figure changes
    # (the highlight rings change it), so it cannot be the memory of what was clicked.
    picks = st.session_state.setdefault("graph_pick", {})
    pk = f"{chart_key}|{name}|{rank}|{focus_key}"
    seen = st.session_state.setdefault("graph_seen", {})
    now = [k for k in selected_keys(st.session_state.get(chart_key)) if k in model.groups]
    changed = bool(now) and seen.get(pk) != tuple(now)
    seen[pk] = tuple(now)  # a chart selection counts once: "Clear pick" is not undone by it
    if changed:
        picks[pk] = now
    sel_keys = tuple(k for k in picks.get(pk, []) if k in model.groups)
    fig, n_found = hierarchy_fig(paths, rank, focus_key, color_by, sel_keys, search, height)
    if search:
        st.caption(f"search {search!r}: {n_found} groups hold a matching op (ringed red)")
    st.plotly_chart(fig, on_select="rerun", selection_mode=("points", "box", "lasso"), key=chart_key, width="stretch")
    if sel_keys:
        b = st.columns([3, 1])
        openable = [k for k in sel_keys if isinstance(k, str) and k.startswith(("tree:", "range:"))]
        if openable:
            lab = model.nodes.set_index("key").loc[openable[0], "label"]
            if b[0].button(f"Open group {lab}", key=f"{chart_key}_open"):
                foci[f"{name}|{rank}"] = openable[0]
                st.rerun()
        if b[1].button("Clear pick", key=f"{chart_key}_clear"):
            picks.pop(pk, None)
            st.rerun()
    return sorted({int(i) for k in sel_keys for i in model.groups[k]}), changed


@st.cache_resource(max_entries=8, show_spinner="Laying out the timeline…")
def timeline_layout(paths: tuple[str, ...], rank: int | None):
    """Lanes, colours and nesting sub-rows of one rank's events, once per trace (every window,
    filter and click then costs a slice: `engine.figures.timeline.lay_out`)."""
    from engine.figures.timeline import lay_out

    return lay_out(load_paths(paths).events, rank)


@st.cache_resource(max_entries=32, show_spinner=False)
def timeline_fig(
    paths: tuple[str, ...],
    rank: int | None,
    start_us: float | None,
    end_us: float | None,
    min_dur_us: float,
    flow_from: int | None,
    search: str = "",
):
    from engine.figures.timeline import TimelineView, timeline_figure

    trace = load_paths(paths)
    view = TimelineView(start_us=start_us, end_us=end_us, min_dur_us=min_dur_us, rank=rank)
    return timeline_figure(
        trace.events,
        view,
        flow_from=flow_from,
        search=search,
        shapes=op_shapes(paths),
        laid=timeline_layout(paths, rank),
    )


@st.cache_resource(max_entries=8, show_spinner=False)
def op_shapes(paths: tuple[str, ...]) -> dict[int, str]:
    """ET op id -> "in: 64×3×224×224 float32, ..." for timeline hovers (ops linked to events).
    Shapes are formatted once per distinct shape (a trace has tens, over 10k tensor rows)."""
    trace = load_paths(paths)
    t = getattr(trace, "tensors", None)
    if t is None or len(t) == 0:
        return {}
    t = t[t["io"].astype(str) == "in"]
    text: dict = {}

    def fmt(s) -> str:
        try:
            hit = text.get(s)
        except TypeError:  # unhashable (a nested list): format it each time
            return str(s)
        if hit is None:
            hit = text[s] = "×".join(str(int(x)) for x in s) if isinstance(s, tuple) else str(s)
        return hit

    label = [f"{fmt(s)} {d}" for s, d in zip(t["shape"].tolist(), t["dtype"].astype(str).tolist())]
    out: dict[int, str] = {}
    for op, lab in zip(t["op_id"].to_numpy().tolist(), label):
        cur = out.get(op)
        if cur is None:
            out[op] = "in: " + lab
        elif len(cur) < 160:
            out[op] = cur + ", " + lab
    return out


@st.cache_data(max_entries=16, show_spinner=False)
def search_events(paths: tuple[str, ...], rank: int | None, pattern: str) -> list[tuple[str, float, float]]:
    """(name, start µs from the rank's origin, dur µs) of events whose name matches `pattern`
    (a regex, case-insensitive; a bad regex is matched as plain text), longest first."""
    ev = of_rank(load_paths(paths).events, rank)
    if len(ev) == 0:
        return []
    t0 = float(ev["ts_us"].min())
    names = ev["name"].astype(str)
    try:
        hit = names.str.contains(pattern, case=False, regex=True)
    except Exception:  # noqa: BLE001 - re.error: plain substring
        hit = names.str.contains(pattern, case=False, regex=False)
    m = ev[hit.to_numpy()]
    m = m.sort_values("ts_us")
    return list(zip(m["name"].astype(str), (m["ts_us"] - t0).astype(float), m["dur_us"].astype(float)))


@st.cache_data(max_entries=32, show_spinner=False)
def rank_inputs(name: str, bench: dict | None) -> dict:
    """Files and recorded ranks a distributed replay of trace `name` (or the composed
    benchmark) takes (engine.replay.distributed.rank_inputs)."""
    from engine.replay.distributed import rank_inputs as _ri

    t = get_trace(name)
    return _ri(traces()[name]["paths"], (t.meta or {}).get("ranks") or [0], bench.get("dir") if bench else None)


def rank_medians(name: str) -> dict[int, float]:
    """Unprofiled per-rank step medians of a multi-rank capture ({} for others)."""
    from engine.replay.distributed import capture_rank_medians

    return capture_rank_medians(traces()[name]["paths"]) if name in traces() else {}


def capture_meta(paths: tuple[str, ...]) -> dict | None:
    """The capture meta of the trace files (engine.capture.meta rules), None when there is none."""
    from engine.capture.meta import meta_for
    from engine.errors import TraceError

    try:
        return meta_for(*paths)
    except TraceError:
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
    height: int = GRAPH_HEIGHT,
):
    """The graph figure for a view (cached: reruns that change nothing else cost nothing)."""
    from engine.figures.graph import graph_figure

    model = graph_model(paths, rank, collapse, depth, expand, max_nodes)
    return graph_figure(model, color_by, highlight=list(highlight), height=height)


@st.cache_data(max_entries=32, show_spinner=False)
def default_window(paths: tuple[str, ...], rank: int | None) -> tuple[float, float]:
    from engine.figures import timeline

    ev = of_rank(load_paths(paths).events, rank)
    return tuple(float(x) for x in timeline.default_window(ev))


@st.cache_data(max_entries=16, show_spinner="Analysing…")
def analysis_tables(paths: tuple[str, ...]) -> dict:
    """Temporal breakdown, kernel table, steps and straggler table of a trace (cached on paths)."""
    from engine.figures import analysis

    ev = load_paths(paths).events
    return {
        "breakdown": analysis.temporal_breakdown(ev),
        "kernels": analysis.kernel_table(ev),
        "steps": analysis.steps(ev),
        "stragglers": analysis.straggler_table(ev),
    }


@st.cache_data(max_entries=16, show_spinner="Finding the critical path…")
def critical_path(paths: tuple[str, ...], start_us: float, end_us: float, rank: int | None):
    from engine.figures.analysis import critical_path as cp

    return cp(load_paths(paths).events, start_us, end_us, rank)


@st.cache_resource(max_entries=8, show_spinner=False)
def rank_timelines_fig(paths: tuple[str, ...], window_us: float | None):
    from engine.figures.analysis import rank_timelines

    return rank_timelines(load_paths(paths).events, window_us)
