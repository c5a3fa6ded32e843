"""Explore page: operator graph (collapsed by default), timeline with flow arrows, breakdowns."""

from collections.abc import Sequence

import streamlit as st
from streamlit.delta_generator import DeltaGenerator

from app import scheduler, session, views, widgets, zoom
from app.markup import md_escape
from engine.analysis import selftime
from engine.errors import TraceError
from engine.figures import breakdown
from engine.figures.selection import selected_keys, selection_to_node_ids

st.title("Explore")
name = widgets.trace_picker(key="explore_trace")
if name is None:
    st.stop()
st.session_state["current"] = name
entry = session.traces()[name]
paths = tuple(entry["paths"])
trace = session.get_trace(name, whole=False)  # over the whole-table budget: read through its store
ranks = views.trace_ranks(paths)
rank = st.selectbox("Rank", ranks, key="explore_rank") if len(ranks) > 1 else ranks[0]

# One view at a time (not st.tabs, which runs all three): the first render of a 14k-node trace
# only builds the graph.
view = st.radio(
    "View",
    ["Operator graph", "Timeline", "Breakdown", "Analysis", "SQL"],
    horizontal=True,
    key="explore_view",
    label_visibility="collapsed",
)

if view == "Operator graph":
    if not trace.has_et:
        st.info("This trace has no execution trace (ET): the operator graph needs one.")
    else:
        st.caption(
            "Groups (squares) stand for call-tree subtrees, edges for data dependencies summed between "
            "them. A click on a group either selects it (its ops go to Compose; *Open group* then drills in) "
            "or opens it: pick which above the chart. Breadcrumbs go back up. The selection is "
            "ringed gold, its producers blue, its consumers green."
        )
        try:
            ids, changed = widgets.graph_panel(name, paths, rank, "explore_graph")
        except TraceError as exc:
            st.error(md_escape(exc))
            st.stop()
        if ids and changed:
            session.set_selection(name, ids, "graph")
        sel = session.selection()
        if ids and sel["source"] == "graph" and sel["trace"] == name:
            st.success(f"selected {len(ids)} ET ops")

elif view == "Timeline":
    if not trace.has_kineto:
        st.info("This trace has no Kineto events: the timeline needs a Kineto trace.")
    else:
        t0, span = views.rank_extent(paths, rank)
        w = st.session_state.get("t_window")
        if w is not None and not (0.0 <= float(w[0]) <= float(w[1]) <= max(span, 1.0)):
            st.session_state.pop("t_window")  # another trace or rank: its window does not apply
        # A zoom or pan on the chart (app/zoom.py's watcher) not applied yet becomes the window laid
        # out in this run: the detail of the new window comes in.
        zoomed = zoom.zoomed_window(
            st.session_state.get("explore_timeline_zoom"), st.session_state.get("t_zoom_seen"), span
        )
        if zoomed is not None:
            st.session_state["t_zoom_seen"], st.session_state["t_window"] = zoomed
        c: Sequence[DeltaGenerator] = st.columns([2, 1, 1])
        search = c[1].text_input("Search names (regex)", key="t_search", placeholder="e.g. conv|gemm")
        matches = views.search_events(paths, rank, search) if search else []
        if search:

            def _jump() -> None:
                m = st.session_state.get("t_jump")
                if m is not None:
                    s0, d0 = matches[m][1], matches[m][2]
                    pad = max(d0 * 2.0, 20.0)
                    st.session_state["t_window"] = (max(0.0, s0 - pad), min(span, s0 + d0 + pad))

            c[2].selectbox(
                f"{len(matches):,} matches · jump to",
                range(min(len(matches), 500)),
                index=None,
                format_func=lambda i: f"{matches[i][0][:40]} @ {matches[i][1]:,.0f} µs",
                key="t_jump",
                on_change=_jump,
            )
        window = c[0].slider(
            "Window (µs from trace start)", 0.0, max(span, 1.0), views.default_window(paths, rank), key="t_window"
        )
        min_dur = (
            c[2].number_input("Min duration (µs)", 0.0, value=0.0, step=1.0, key="t_min_dur") if not search else 0.0
        )
        threads, has_python = views.timeline_threads(paths, rank)
        if any(t not in threads for t in st.session_state.get("t_folded") or ()):
            # another trace or rank: its threads do not apply
            st.session_state["t_folded"] = [t for t in st.session_state["t_folded"] if t in threads]
        c = st.columns([1, 2, 1])
        fold_py = c[0].toggle(
            "Fold python frames",
            key="t_fold_py",
            disabled=not has_python,
            help="Hide python_function rows: aten ops and runtime calls rise to the top of their thread.",
        )
        folded = c[1].multiselect(
            "Folded threads (top-level events only)", threads, key="t_folded", placeholder="none: every row shown"
        )
        flows_on = c[2].toggle("Launch lines", value=True, key="t_flows", help="From each drawn kernel to its launch.")
        # The chart's selection from the last interaction is in session state before the chart is
        # drawn, so the clicked event's flow arrows are drawn in this same run.
        prev = st.session_state.get("explore_timeline")
        keys = [k for k in selected_keys(prev) if isinstance(k, int)] if prev else []
        flow = keys[0] if keys else None
        fig = views.timeline_fig(
            paths,
            rank,
            float(window[0]),
            float(window[1]),
            float(min_dur),
            flow,
            search,
            bool(fold_py),
            tuple(folded),
            bool(flows_on),
        )
        min_bar = float((fig.layout.meta or {}).get("min_bar_us") or 0.0)
        st.caption(
            "Drag to zoom in time (lanes stay): the window follows and its detail is drawn; "
            "double-click for the whole trace. Click a bar or box-select (toolbar) to pick ops. "
            + (
                f"At this window events under {min_bar:,.3g} µs are grouped grey (GPU work: merged busy spans "
                "in the kernel colour): zoom in to draw them."
                if min_bar
                else "Every event in the window is drawn."
            )
            + (
                f" Launch lines: {int((fig.layout.meta or {}).get('flows') or 0):,} drawn kernels link back to "
                "their launch in this window (the longest 300 get a line)."
                if flows_on
                else ""
            )
        )
        left_out = float((fig.layout.meta or {}).get("left_out_under_us") or 0.0)
        if left_out:  # a trace read through its store: a window reads at most WINDOW_MAX_ROWS rows
            st.caption(f"This window holds too many events to read: those under {left_out:,.3g} µs are left out.")
        meta = views.capture_meta(paths)
        samples = ((meta or {}).get("metrics") or {}).get("samples") or {}
        if samples.get("t_s") and st.checkbox("Metric curves under the timeline", key="t_metrics"):
            from engine.figures.analysis import timeline_with_metrics

            fig = timeline_with_metrics(fig, samples, span_us=float(window[1]) - float(window[0]))
            fig.update_xaxes(range=[float(window[0]), float(window[1])])
            st.caption(
                "CPU %, RSS (and GPU utilisation when sampled) of the capture's timed run, stretched over the "
                "window on the same µs axis: the profiled step itself is not sampled."
            )
        st.plotly_chart(
            fig, on_select="rerun", selection_mode=("points", "box"), key="explore_timeline", width="stretch"
        )
        zoom.watch_zoom("explore_timeline", key="explore_timeline_zoom")
        if flow is not None:
            r = views.event_row(paths, flow)
            if r is not None:
                st.caption(
                    f"event {flow}: {md_escape(r['cat'])} · {md_escape(r['name'])} · start {float(r['ts_us']) - t0:,.3f} µs · "
                    f"dur {float(r['dur_us']):,.3f} µs · flow arrows to the GPU work it launched"
                )
        if keys and trace.has_et:
            # from the selection this run started with: the chart's returned state resets when its
            # figure changes (the flow arrows just drawn change it)
            ids = selection_to_node_ids(prev, "timeline", events=trace.events, ops=trace.ops)
            if ids:
                session.set_selection(name, ids, "timeline")
                st.success(f"selected {len(ids)} ET ops from {len(keys)} events")

elif view == "Analysis":
    if not trace.has_kineto:
        st.info(md_escape(selftime.missing_timing(trace)))
        st.stop()
    from app.classes import show_kernel_classes
    from app.gpu_analysis import show_gpu_analysis
    from engine.figures import analysis

    tabs = views.analysis_tables(paths, scheduler.current())
    st.subheader("Time breakdown per rank (ms per step)")
    per_rank = tabs["per_rank"]
    if len(per_rank):
        st.plotly_chart(analysis.breakdown_figure(per_rank), key="a_breakdown", width="stretch")
        st.dataframe(per_rank.round(3), hide_index=True, key="a_breakdown_table")
        basis = "GPU work" if (per_rank["basis"] == "gpu").any() else "host operators (no GPU work in this trace)"
        st.caption(
            f"Over each rank's ProfilerStep spans, measured on {basis}: compute + exposed communication "
            "+ idle = the step; communication = exposed + the part hidden under compute "
            "(definitions: docs/analysis.md). The What-if page and `simulate --json` show the same numbers."
        )
    gpu = bool((per_rank["basis"] == "gpu").any()) if len(per_rank) else False
    st.subheader("Kernels (self time)" if gpu else "Operators by self time (no GPU kernels: host cpu_ops)")
    st.dataframe(
        tabs["kernels"].head(200),
        hide_index=True,
        key="a_kernels",
        column_config={
            "name": st.column_config.TextColumn("name", width="large", help="the whole name (hover a cell)"),
            "share_pct": st.column_config.ProgressColumn("share %", min_value=0, max_value=100, format="%.1f"),
        },
    )
    show_kernel_classes(tabs["classes"], key="a_classes")
    show_gpu_analysis(views.gpu_queues(paths), lambda: views.gemm_table(paths), key="a_gpu")
    st.subheader("Critical path (across ranks)")
    try:
        sim = views.simulated(paths)
    except TraceError as exc:
        st.info(f"No critical path: {md_escape(exc)}")
        st.stop()
    cp = sim["json"]["critical_path"]
    if cp:
        c = st.columns(4)
        c[0].metric("step ms (simulated, unchanged)", f"{sim['json']['predicted_iteration_ms']:,.3f}")
        c[1].metric("critical path ms", f"{cp['ms']:,.3f}")
        c[2].metric("ranks on it", ", ".join(str(r) for r in cp["ranks"]))
        c[3].metric("collectives on it", len(cp["collectives"]))
        widgets.show_critical_path(
            cp, sim["segments"], sim["top_ops"], title="The longest step's critical path, across ranks", key="a_cp"
        )
        if cp["collectives"]:
            st.caption("Collectives on the path: " + md_escape(", ".join(list(cp["collectives"])[:8])))
        st.caption(
            "The longest path through the simulator's schedule of this trace (engine/simulate/critical_path.py): "
            "its length is the step; it moves to the rank that arrived last at each collective."
        )
    lag = sim["stragglers"]
    if lag is not None and len(lag) > 1:
        st.subheader("Stragglers")
        st.dataframe(lag.round(3), hide_index=True, key="a_stragglers")
        hit = lag[lag["straggler"]]
        if len(hit):
            r = hit.iloc[0]
            st.warning(
                f"rank {int(r['rank'])} holds the others up: they wait {float(r['held_others_ms']):,.3f} ms per step "
                f"for it at collectives; on the critical path its time goes to {md_escape(r['reason'])}."
            )
        else:
            st.success("No rank holds the others up at collectives.")
        st.caption("A rank is named for the time others wait for it, never for its own waiting (waited_ms).")
    if len(ranks) > 1:
        st.subheader("Ranks side by side")
        step_us = float(sim["json"]["predicted_iteration_ms"]) * 1000
        win = st.number_input(
            "Window (µs from each rank's start)", 100.0, value=max(step_us, 100.0), key="a_rank_window"
        )
        st.plotly_chart(views.rank_timelines_fig(paths, float(win)), key="a_rank_timelines", width="stretch")

elif view == "Breakdown" and views.is_big(paths):
    st.info(
        md_escape(trace.meta["whole_table"])
        + ": the Breakdown needs whole tables. Analysis reads its tables from the trace store, rank by rank."
    )

elif view == "Breakdown":
    missing = selftime.missing_timing(trace)
    if missing:
        st.info(md_escape(missing))
    tables = views.breakdown_tables(paths)
    if trace.has_kineto:
        c = st.columns(2)
        ops_t = tables["ops"]
        c[0].plotly_chart(
            breakdown.bar_figure(
                ops_t[ops_t["kind"] == "operator"], "name", title="CPU self time by operator (Kineto cpu_op)"
            ),
            key="b_ops",
            width="stretch",
        )
        k_t = tables["kernels"]
        if len(k_t):
            c[1].plotly_chart(
                breakdown.bar_figure(k_t, "name", title="GPU time by kernel"), key="b_kernels", width="stretch"
            )
            from app.classes import show_kernel_classes

            show_kernel_classes(tables["classes"], key="b_classes")
            idle = tables["idle"]
            st.plotly_chart(breakdown.idle_figure(idle), key="b_idle", width="stretch")
            st.dataframe(idle, hide_index=True, key="b_idle_table")
        else:
            c[1].info("No GPU kernels in this trace.")
        ann = tables["annotations"]
        if len(ann):
            st.subheader("Annotations (what they span; not operators)")
            st.dataframe(ann.head(50), hide_index=True, key="b_annotations")
    if trace.has_et and trace.has_kineto:
        c = st.columns(2)
        for col, key in zip(c, ("category", "phase")):
            t = tables[key]
            col.plotly_chart(
                breakdown.bar_figure(t, key, "total_us", title=f"Linked CPU time by {key} (leaf ops)"),
                key=f"b_{key}",
                width="stretch",
            )
        st.subheader("Top operators (self time; annotations apart)")
        top = tables["top_ops"]
        ev = st.dataframe(top, hide_index=True, on_select="rerun", selection_mode="multi-row", key="b_top")
        ids = selection_to_node_ids(ev, "table", table_ids=top["id"].tolist() if "id" in top else [])
        if ids:
            session.set_selection(name, ids, "table")
            st.success(f"selected {len(ids)} ET ops")

elif view == "SQL":
    # Read-only SQL over the trace store (engine.trace.store, docs/store.md): the same views and
    # lock-down as `mystique sql`; a bad query or a refused file access is one line of error.
    st.caption(
        "Read-only SQL (DuckDB) over the trace store's views `events`, `flows` and `sources` "
        "(Kineto events; columns in docs/store.md). Files outside the store cannot be read or written."
    )
    sql = st.text_area(
        "SQL",
        "SELECT cat, count(*) AS n, sum(dur_us) AS total_us FROM events GROUP BY cat ORDER BY total_us DESC",
        key="explore_sql",
    )
    try:
        res = views.sql_result(paths, sql, scheduler.current())
    except TraceError as exc:
        st.error(md_escape(exc))
    else:
        st.dataframe(res.frame, hide_index=True, key="explore_sql_result")
        n = len(res.frame)
        st.caption(f"first {n:,} rows (the result has more; only these were read)" if res.truncated else f"{n:,} rows")

sel = session.selection()
if sel["ids"] and sel["trace"] == name:
    st.sidebar.markdown(f"**Selection**: {len(sel['ids'])} ops from {sel['source']}")
    st.sidebar.caption("Open the Compose page to add it to a segment.")
