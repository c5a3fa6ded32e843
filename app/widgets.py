"""Widgets several pages draw: the trace picker, the drill-down graph panel, the critical-path
block (Explore's Analysis and the What-if page show the same one; only the metrics above it differ)
and the rows of a page's running worker jobs (Replay, Ranks, Fleet).

They read and write the session (app/session.py) and draw from the cached views (app/views.py);
they run no engine work of their own.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import streamlit as st

from app import views, workspace
from app.markup import md_escape
from app.session import get_trace, reset_searches, traces
from engine.errors import TraceError
from engine.figures import critical as critfig
from engine.figures.style import KIND_LABELS


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


def show_critical_path(cp: dict, segments, top_ops, *, title: str, key: str) -> None:
    """The path across ranks, its time by kind (ms per step) and the ops that hold it."""
    st.plotly_chart(critfig.critical_path_figure(segments, title=title), key=f"{key}_fig", width="stretch")
    st.dataframe(
        [{"kind": KIND_LABELS[k], "ms per step": round(v, 3)} for k, v in cp["by_kind"].items()],
        hide_index=True,
        key=f"{key}_by",
    )
    st.dataframe(critfig.path_table(top_ops), hide_index=True, key=key, width="stretch")


def _job_label(job: dict) -> str:
    return f"job {job['id']} · {job['status'].value}"


def job_rows(
    jobs: Sequence[dict], *, key: str, label: Callable[[dict], str] = _job_label, border: bool = False
) -> None:
    """One row per running or queued worker job: a progress bar with its label and last message
    (escaped, at most 160 characters) and a Cancel button (`{key}_{id}`). A cancel reruns the
    page; a catalog that refuses it (read-only) shows its one line instead, which a rerun would
    wipe before anyone read it (`workspace.catalog_error` shows it once per session)."""
    for j in jobs:
        with st.container(border=border):
            cols = st.columns([5, 1])
            cols[0].progress(float(j["fraction"] or 0.0), text=md_escape(f"{label(j)} · {j['message'] or ''}"[:160]))
            if cols[1].button("Cancel", key=f"{key}_{j['id']}"):
                try:
                    workspace.runner().cancel(j["id"])
                except TraceError as exc:  # CatalogError: a read-only catalog cannot record it
                    workspace.catalog_error(exc)
                else:
                    st.rerun()
