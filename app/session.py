"""The session: the registry of loaded traces, its restore from the workspace, the working
selection and the sticky settings.

Why this split: Streamlit reruns a page top to bottom on every interaction, so anything big
(traces, graph models, figures) lives in the view caches of app/views.py, keyed on small strings
(file paths, view parameters; refreshed when a file changes); `st.session_state` holds only
handles: trace names -> {"paths", "hash", "kind"}, the current selection (ids), specs (dicts)
and result file paths. What is saved goes to the workspace catalog (app/workspace.py);
app/prefetch.py builds a loaded trace's first views in the background; the widgets that read
this state are in app/widgets.py. Engine calls raise `TraceError` for bad input; pages show it
with `st.error`.
"""

from __future__ import annotations

from pathlib import Path

import streamlit as st

from app import prefetch, views
from app.markup import md_escape
from app.workspace import ROOT, catalog, catalog_error, workspace_dir
from engine.errors import TraceError

SAMPLES = ROOT / "sample_traces"


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
