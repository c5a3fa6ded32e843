"""Session state and caches shared by the pages, backed by the workspace catalog.

Nothing is lost (issue 13): every loaded trace, spec, replay job and sticky setting is written
to the workspace's SQLite catalog (`engine.workspace`, default `.mystique/` in the working
directory, `MYSTIQUE_WORKSPACE`); a new session (browser reload, server restart) restores them.

Why this split: Streamlit reruns a page top to bottom on every interaction, so anything big
(traces, graph models, figures) lives in the view caches of app/views.py, keyed on small strings
(file paths, view parameters; refreshed when a file changes); `st.session_state` holds only
handles: trace names -> {"paths", "hash", "kind"}, the current selection (ids), specs (dicts)
and result file paths. app/prefetch.py builds a loaded trace's first views in the background.
Engine calls raise `TraceError` for bad input; pages show it with `st.error`.
"""

from __future__ import annotations

import hashlib
import threading
from pathlib import Path

import streamlit as st

from app import prefetch, views
from app.markup import md_escape
from engine import envvars
from engine.errors import TraceError

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "sample_traces"


def work_dir() -> Path:
    """Where uploads and replay results go (MYSTIQUE_UI_DIR; default .mystique_cache/ui in a
    checkout, the user cache folder when installed, since an install prefix may be read-only)."""
    from engine import resources

    default = ROOT / ".mystique_cache" / "ui" if resources.is_checkout() else resources.user_cache_dir() / "ui"
    return Path(envvars.get("MYSTIQUE_UI_DIR") or default)


def workspace_dir() -> Path:
    """The session's workspace folder: chosen on the Traces page, else MYSTIQUE_WORKSPACE, else
    `<MYSTIQUE_UI_DIR>/workspace` when that is set (tests), else `.mystique/` in the cwd."""
    chosen = st.session_state.get("workspace")
    if chosen:
        return Path(chosen)
    if ws := envvars.get("MYSTIQUE_WORKSPACE"):
        return Path(ws)
    if ui := envvars.get("MYSTIQUE_UI_DIR"):
        return Path(ui) / "workspace"
    return Path.cwd() / ".mystique"


@st.cache_resource(show_spinner=False)
def _catalog(root: str):
    from engine.workspace import Catalog

    return Catalog(root)


def catalog():
    return _catalog(str(workspace_dir().resolve()))


def catalog_error(exc: TraceError | str) -> None:
    """Show a catalog failure once per session, where it happened: a read-only catalog refuses
    every save with the same line, which must not repeat on every rerun; nothing is swallowed."""
    shown = st.session_state.setdefault("_catalog_shown", [])
    msg = str(exc).splitlines()[0]
    if msg not in shown:
        shown.append(msg)
        st.error(md_escape(msg))


def catalog_notice() -> None:
    """Once per session: what opening the workspace took (a damaged file moved aside and
    rebuilt, a read-only or newer catalog), as a warning; later refusals say the same line."""
    try:
        notice = catalog().notice
    except TraceError as exc:
        return catalog_error(exc)
    shown = st.session_state.setdefault("_catalog_shown", [])
    if notice and notice not in shown:
        shown.append(notice)
        st.warning(md_escape(notice))


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
    "cmp_a",
    "cmp_b",
    "cmp_window",
    "replay_target",
    "replay_rmode",
    "tt_window",
    "tt_window_for",
    "tt_step",
    "tt_align",
    "t_fold_py",
    "t_flows",
    "explore_graph_click",
    "compose_graph_click",
    "dash_scheduler",
    "ov_job",
    "ov_job_paths",
)
# Widgets keyed per trace and target (the Replay form's world size): every key with the prefix.
STICKY_PREFIXES = ("replay_world:",)
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
    dynamic = [k for k in st.session_state if isinstance(k, str) and k.startswith(STICKY_PREFIXES)]
    for k in (*STICKY, *dynamic):
        if k in st.session_state:
            v = st.session_state[k]
            plain = isinstance(v, (str, int, float, bool)) or (
                isinstance(v, list) and all(isinstance(x, str) for x in v)
            )
            if plain and saved.get(k) != v:
                saved[k] = changed[k] = v
    for k in SESSION_KEYS:
        if k in st.session_state and st.session_state.get(f"_saved_{k}") != st.session_state[k]:
            st.session_state[f"_saved_{k}"] = changed[f"session.{k}"] = _plain(st.session_state[k])
    if changed:
        try:
            catalog().put_settings(changed)
        except TraceError as exc:  # CatalogError: read-only, newer schema, full disk
            catalog_error(exc)


def _plain(v):
    import copy

    return copy.deepcopy(v)


DEFAULT_SAMPLE = "mlp"


def sample_sets() -> dict[str, list[str]]:
    """Bundled samples: folder name -> [ET, Kineto] paths (whichever exist)."""
    from engine.trace.layout import resolve

    out = {}
    if SAMPLES.is_dir():
        for d in sorted(p for p in SAMPLES.iterdir() if p.is_dir()):
            try:  # a capture folder, or every rank's ET + Kineto of a multi-rank one (engine.trace.layout)
                out[d.name] = [str(f) for f in resolve(d).files]
            except TraceError:
                continue  # not a trace folder
    return out


def traces() -> dict[str, dict]:
    return st.session_state.setdefault("traces", {})


def add_trace(name: str, paths: list[str]) -> str:
    """Load `paths` as one trace named `name` (ET + Kineto of one run pair up); returns the name it
    got: `name`, or `name (2)`... when another dashboard on this workspace holds it (the
    catalog decides, engine.workspace.Catalog.add_trace). Raises TraceError.
    A folder (a composed benchmark, a capture, a multi-rank job) stands for its files as the CLI
    reads them (engine.trace.layout.resolve): a composed folder's ranks, not its COMPLETE.json."""
    if any(Path(p).is_dir() for p in paths):
        from engine.trace.layout import resolve

        paths = [str(f) for f in resolve(*paths).files]
    key = tuple(str(p) for p in paths)
    views.check_fresh(key)
    trace = views.open_paths(key)  # over the whole-table budget: read through its store
    entry = {
        "paths": [str(p) for p in paths],
        "hash": trace.content_hash,
        "kind": trace.meta.get("kind", ""),
        "link_rate": (trace.meta.get("link") or {}).get("link_rate"),
    }
    try:
        name = catalog().add_trace(name, entry)
    except TraceError as exc:  # the trace stays loaded in the session; the user is told once
        catalog_error(exc)
    traces()[name] = entry
    st.session_state.setdefault("current", name)
    prefetch.request(entry["paths"])
    return name


def rename_trace(old: str, new: str) -> None:
    loaded = traces()
    loaded[new] = loaded.pop(old)
    specs = st.session_state.get("specs", {})
    if old in specs:
        specs[new] = specs.pop(old)
        specs[new]["trace"] = new
    try:
        catalog().rename_trace(old, new)
    except TraceError as exc:  # renamed in the session; the user is told once
        catalog_error(exc)
    st.session_state["_pending_current"] = new  # applied by the router before any picker is drawn


def remove_trace(name: str) -> None:
    traces().pop(name, None)
    try:
        catalog().remove_trace(name)
    except TraceError as exc:  # removed from the session; the user is told once
        catalog_error(exc)
    st.session_state.pop("current", None)
    for key in PICKER_KEYS:
        st.session_state.pop(key, None)


PICKER_KEYS = ("summary_pick", "explore_trace", "compose_trace", "replay_trace", "wi_trace")


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


def get_trace(name: str, whole: bool = True):
    """The loaded trace `name` as its files are now: a file rewritten in place drops the cached views
    (views.check_fresh) and the entry's content hash follows the new content. Raises TraceError.
    A trace over the whole-table budget is a `StoreTrace` (engine.trace.store.handle) when
    `whole` is False (Explore, the pickers); a page that needs whole tables (`whole`) says why in
    one line and stops there."""
    entry = traces()[name]
    key = tuple(entry["paths"])
    views.check_fresh(key)
    trace = views.open_paths(key)
    if trace.content_hash != entry.get("hash"):
        entry["hash"] = trace.content_hash
        try:
            catalog().put_trace(name, entry)
        except TraceError as exc:  # the session keeps the new hash; the user is told once
            catalog_error(exc)
    if whole and views.is_big(key):
        st.error(md_escape(trace.refusal()))
        st.stop()
    return trace


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
    st.session_state["_sticky"] = {k: v for k, v in settings.items() if k in STICKY or k.startswith(STICKY_PREFIXES)}
    for k in SESSION_KEYS:
        if f"session.{k}" in settings and settings[f"session.{k}"] is not None:
            st.session_state[k] = settings[f"session.{k}"]
            st.session_state[f"_saved_{k}"] = _plain(settings[f"session.{k}"])
    if st.session_state.get("current") not in traces():
        st.session_state["current"] = next(iter(traces()), None)
    if st.session_state.get("current"):
        prefetch.request(traces()[st.session_state["current"]]["paths"])  # reload: its views are ready sooner
    if missing:
        st.session_state["_start_error"] = "workspace traces whose files are gone: " + ", ".join(missing)
    return bool(traces())


def replay_runs() -> list[dict]:
    """Finished replay jobs of the workspace, oldest first (what Compare offers)."""
    out: list[dict] = []
    try:
        jobs = catalog().jobs(kind="replay")
    except TraceError as exc:
        catalog_error(exc)
        return out
    for j in jobs:
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
                "peak_rss_mb": s.get("peak_rss_mb"),
            }
        )
    return out


def save_spec(trace_name: str, spec: dict) -> None:
    try:
        catalog().put_spec(trace_name, spec)
    except TraceError as exc:  # the spec stays in the session; the user is told once
        catalog_error(exc)


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
    # A picker follows a new current trace (just loaded, composed or replayed) even when its page
    # was shown before: make_current's value for a widget key drawn on an earlier page is dropped
    # with that page's stale widgets, so the plain "current" key is what each picker checks.
    seen = f"_current_seen:{key}"
    if st.session_state.get(key) not in names or (cur in names and st.session_state.get(seen) != cur):
        st.session_state[key] = cur if cur in names else names[0]
    st.session_state[seen] = cur
    picked = st.selectbox(label, names, key=key)
    last = f"_shown:{key}"
    if picked is not None and st.session_state.get(last) not in (None, picked):
        reset_searches()  # a search typed for one trace would filter the next one to "0 matches"
    st.session_state[last] = picked
    if picked is not None:
        try:
            get_trace(picked, whole=False)  # every page shows the files as they are now
        except TraceError:
            pass  # the page's own use of the trace reports it
    return picked


SEARCH_KEYS = ("t_search", "t_jump", "compose_filter")
"""Search widgets that belong to the trace shown, plus every graph panel's `<chart>_search`."""


def reset_searches() -> None:
    """Clear the regex searches (drawn after the picker, so they come back empty this run)."""
    for k in [k for k in st.session_state if k in SEARCH_KEYS or str(k).endswith("_search")]:
        del st.session_state[k]


def trace_key(name: str) -> str:
    """A short key of the trace's content (its hash): widgets keyed with it hold settings of that
    trace's spec only, so a value set for one trace never carries over to another (issue 21)."""
    e = traces().get(name) or {}
    return str(e.get("hash") or name)[:12]


def selection() -> dict:
    """The working selection: {"trace": name, "ids": [ET ids], "source": str}."""
    return st.session_state.setdefault("selection", {"trace": None, "ids": [], "source": ""})


def set_selection(trace_name: str, ids: list[int], source: str) -> None:
    st.session_state["selection"] = {"trace": trace_name, "ids": sorted({int(i) for i in ids}), "source": source}


def graph_panel(
    name: str, paths: tuple[str, ...], rank: int | None, chart_key: str, height: int = views.GRAPH_HEIGHT
) -> tuple[list[int], bool]:
    """The drill-down operator graph (Explore and Compose share it): breadcrumbs, search, the
    chart, Open group; returns (ET ids of the picked groups, whether the pick changed now)."""
    from engine.figures.selection import selected_keys

    foci = st.session_state.setdefault("graph_focus", {})
    focus_key = foci.get(f"{name}|{rank}")
    model = views.hierarchy_model(paths, rank, focus_key)
    crumbs = model.crumbs
    cols = st.columns([6, 2, 1])
    with cols[0]:
        bc = st.columns(min(len(crumbs), 8))
        for i, (label, f) in enumerate(crumbs[-8:]):
            if bc[i].button(("› " if i else "") + md_escape(label), key=f"{chart_key}_crumb_{i}", width="stretch"):
                foci[f"{name}|{rank}"] = views.focus_key_of(f)
                st.session_state.pop(chart_key, None)
                st.rerun()
    search = cols[1].text_input(
        "Search ops", key=f"{chart_key}_search", placeholder="name regex", label_visibility="collapsed"
    )
    color_by = cols[2].selectbox(
        "Colour", list(views.GRAPH_COLOR_BY), key=f"{chart_key}_color", label_visibility="collapsed"
    )
    # The pick is kept per view: the chart's own selection is reset whenever its figure changes
    # (the highlight rings change it), so it cannot be the memory of what was clicked.
    picks = st.session_state.setdefault("graph_pick", {})
    pk = f"{chart_key}|{name}|{rank}|{focus_key}"
    seen = st.session_state.setdefault("graph_seen", {})
    now = [k for k in selected_keys(st.session_state.get(chart_key)) if k in model.groups]
    changed = bool(now) and seen.get(pk) != tuple(now)
    seen[pk] = tuple(now)  # a chart selection counts once: "Clear pick" is not undone by it
    # Drilling in and selecting are separate actions (issue 32): in "open" mode a click on a group
    # opens it and picks nothing; in "select" mode a click picks, and Open group drills in.
    opens = (
        st.radio(
            "A click on a group",
            ["selects it", "opens it"],
            horizontal=True,
            key=f"{chart_key}_click",
            help="Open: drill into the group (nothing is selected). Select: pick its ops for Compose.",
        )
        == "opens it"
    )
    if changed and opens:
        group = next((k for k in now if isinstance(k, str) and k.startswith(("tree:", "range:"))), None)
        if group is not None:
            foci[f"{name}|{rank}"] = group
            st.session_state.pop(chart_key, None)
            st.rerun()
        changed = False  # a single op has nothing to open: a click in open mode never selects
    if changed:
        picks[pk] = now
    sel_keys = tuple(k for k in picks.get(pk, []) if k in model.groups)
    fig, n_found = views.hierarchy_fig(paths, rank, focus_key, color_by, sel_keys, search, height)
    if search:
        st.caption(f"search {md_escape(repr(search))}: {n_found} groups hold a matching op (ringed red)")
    st.plotly_chart(fig, on_select="rerun", selection_mode=("points", "box", "lasso"), key=chart_key, width="stretch")
    if sel_keys:
        b = st.columns([3, 1])
        openable = [k for k in sel_keys if isinstance(k, str) and k.startswith(("tree:", "range:"))]
        if openable:
            lab = model.nodes.set_index("key").loc[openable[0], "label"]
            if b[0].button(f"Open group {md_escape(lab)}", key=f"{chart_key}_open"):
                foci[f"{name}|{rank}"] = openable[0]
                st.rerun()
        if b[1].button("Clear pick", key=f"{chart_key}_clear"):
            picks.pop(pk, None)
            st.rerun()
    return sorted({int(i) for k in sel_keys for i in model.groups[k]}), changed


@views.view(st.cache_data, max_entries=32, show_spinner=False)
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
