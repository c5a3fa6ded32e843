"""Explore page: operator graph (collapsed by default), timeline with flow arrows, breakdowns."""

import streamlit as st

from app import state, views
from engine.errors import TraceError
from engine.figures import breakdown
from engine.figures.selection import selected_keys, selection_to_node_ids
from engine.trace.ranks import of_rank, ranks_of

st.title("Explore")
name = state.trace_picker(key="explore_trace")
if name is None:
    st.stop()
st.session_state["current"] = name
entry = state.traces()[name]
paths = tuple(entry["paths"])
trace = state.get_trace(name)
ranks = ranks_of(trace.ops, trace.events) or [0]
rank = st.selectbox("Rank", ranks, key="explore_rank") if len(ranks) > 1 else ranks[0]

# One view at a time (not st.tabs, which runs all three): the first render of a 14k-node trace
# only builds the graph.
view = st.radio(
    "View",
    ["Operator graph", "Timeline", "Breakdown", "Analysis"],
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
            "them. Click a group and *Open group* to drill in; breadcrumbs go back up. The selection is "
            "ringed gold, its producers blue, its consumers green."
        )
        try:
            ids, changed = state.graph_panel(name, paths, rank, "explore_graph")
        except TraceError as exc:
            st.error(str(exc))
            st.stop()
        if ids and changed:
            state.set_selection(name, ids, "graph")
        sel = state.selection()
        if ids and sel["source"] == "graph" and sel["trace"] == name:
            st.success(f"selected {len(ids)} ET ops")

elif view == "Timeline":
    if not trace.has_kineto:
        st.info("This trace has no Kineto events: the timeline needs a Kineto trace.")
    else:
        ev = of_rank(trace.events, rank)
        t0 = float(ev["ts_us"].min())
        span = float((ev["ts_us"] + ev["dur_us"]).max() - t0)
        w = st.session_state.get("t_window")
        if w is not None and not (0.0 <= float(w[0]) <= float(w[1]) <= max(span, 1.0)):
            st.session_state.pop("t_window")  # another trace or rank: its window does not apply
        c = st.columns([2, 1, 1])
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
        # The chart's selection from the last interaction is in session state before the chart is
        # drawn, so the clicked event's flow arrows are drawn in this same run.
        prev = st.session_state.get("explore_timeline")
        keys = [k for k in selected_keys(prev) if isinstance(k, int)] if prev else []
        flow = keys[0] if keys else None
        fig = views.timeline_fig(paths, rank, float(window[0]), float(window[1]), float(min_dur), flow, search)
        st.caption(
            "Drag to zoom in time (lanes stay), double-click to zoom out; click a bar or box-select "
            "(toolbar) to pick ops; a narrower window draws every event."
        )
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
        event = st.plotly_chart(
            fig, on_select="rerun", selection_mode=("points", "box"), key="explore_timeline", width="stretch"
        )
        if flow is not None:
            row = trace.events[trace.events["ev"] == flow]
            if len(row):
                r = row.iloc[0]
                st.caption(
                    f"event {flow}: {r['cat']} · {r['name']} · start {float(r['ts_us']) - t0:,.3f} µs · "
                    f"dur {float(r['dur_us']):,.3f} µs · flow arrows to the GPU work it launched"
                )
        if keys and trace.has_et:
            # from the selection this run started with: the chart's returned state resets when its
            # figure changes (the flow arrows just drawn change it)
            ids = selection_to_node_ids(prev, "timeline", events=trace.events, ops=trace.ops)
            if ids:
                state.set_selection(name, ids, "timeline")
                st.success(f"selected {len(ids)} ET ops from {len(keys)} events")

elif view == "Analysis":
    if not trace.has_kineto:
        st.info("The analyses need Kineto events.")
        st.stop()
    from engine.figures import analysis

    tabs = views.analysis_tables(paths)
    st.subheader("Temporal breakdown per rank")
    tb = tabs["breakdown"]
    if len(tb):
        st.plotly_chart(analysis.breakdown_figure(tb), key="a_breakdown", width="stretch")
        st.dataframe(tb.round(2), hide_index=True, key="a_breakdown_table")
        st.caption(
            "compute / communication / idle over each rank's span of "
            + ("GPU work" if (tb["basis"] == "gpu").any() else "host ops (no GPU work in this trace)")
            + "; comm_overlapped_pct: share of communication time hidden under compute."
        )
    st.subheader("Kernels" if (tb["basis"] == "gpu").any() else "Operators (no GPU kernels: host cpu_ops)")
    st.dataframe(
        tabs["kernels"].head(200),
        hide_index=True,
        key="a_kernels",
        column_config={
            "share_pct": st.column_config.ProgressColumn("share %", min_value=0, max_value=100, format="%.1f")
        },
    )
    st.subheader("Critical path of a step")
    stp = tabs["steps"]
    if rank is not None and "rank" in stp.columns:
        stp = stp[stp["rank"] == rank]
    if len(stp):
        i = st.selectbox("Step", range(len(stp)), format_func=lambda k: str(stp["name"].iloc[k]), key="a_step")
        row = stp.iloc[i]
        lo, hi = float(row["ts_us"]), float(row["ts_us"] + row["dur_us"])
    else:
        ev_r = trace.events[trace.events["rank"] == rank] if "rank" in trace.events.columns else trace.events
        lo, hi = (float(x) + float(ev_r["ts_us"].min()) for x in views.default_window(paths, rank))
        st.caption("No ProfilerStep in this trace: the default window is used as the step.")
    path = views.critical_path(paths, lo, hi, rank)
    if len(path):
        c = st.columns(3)
        c[0].metric("step µs", f"{hi - lo:,.0f}")
        c[1].metric("on the path: busy µs", f"{path['dur_us'].sum():,.0f}")
        c[2].metric("on the path: waiting µs", f"{path['wait_before_us'].sum():,.0f}")
        by = path.groupby(path["cat"].astype(str), observed=True)["dur_us"].agg(["size", "sum"]).reset_index()
        st.dataframe(by.rename(columns={"size": "events", "sum": "µs"}), hide_index=True, key="a_cp_by")
        st.dataframe(path.assign(ts_us=path["ts_us"] - lo), hide_index=True, key="a_cp", height=260)
    ranks_n = tabs["stragglers"]
    if len(ranks_n) > 1:
        st.subheader("Ranks side by side")
        st.dataframe(ranks_n, hide_index=True, key="a_stragglers")
        slow = ranks_n[ranks_n["straggler"]]
        if len(slow):
            st.warning(
                f"straggler: rank {int(slow['rank'].iloc[0])} (median step "
                f"{float(slow['median_step_us'].iloc[0]):,.0f} µs, {float(slow['vs_fastest'].iloc[0]):.2f}x the fastest)"
            )
        win = st.number_input("Window (µs from each rank's start)", 100.0, value=float(hi - lo), key="a_rank_window")
        st.plotly_chart(views.rank_timelines_fig(paths, float(win)), key="a_rank_timelines", width="stretch")

else:
    if trace.has_kineto:
        c = st.columns(2)
        ops_t = breakdown.time_by(trace.events, "cpu_op")
        c[0].plotly_chart(
            breakdown.bar_figure(ops_t, "name", title="CPU time by operator (Kineto cpu_op)"),
            key="b_ops",
            width="stretch",
        )
        k_t = breakdown.time_by(trace.events, breakdown.GPU_CATS)
        if len(k_t):
            c[1].plotly_chart(
                breakdown.bar_figure(k_t, "name", title="GPU time by kernel"), key="b_kernels", width="stretch"
            )
            idle = breakdown.gpu_idle(trace.events)
            st.plotly_chart(breakdown.idle_figure(idle), key="b_idle", width="stretch")
            st.dataframe(idle, hide_index=True, key="b_idle_table")
        else:
            c[1].info("No GPU kernels in this trace.")
    if trace.has_et:
        c = st.columns(2)
        for col, key in zip(c, ("category", "phase")):
            t = breakdown.op_time_by(trace.ops, key)
            col.plotly_chart(
                breakdown.bar_figure(t, key, title=f"Linked CPU time by {key} (leaf ops)"),
                key=f"b_{key}",
                width="stretch",
            )
        st.subheader("Top operators")
        top = breakdown.top_ops(trace.ops, 50)
        ev = st.dataframe(top, hide_index=True, on_select="rerun", selection_mode="multi-row", key="b_top")
        ids = selection_to_node_ids(ev, "table", table_ids=top["id"].tolist() if "id" in top else [])
        if ids:
            state.set_selection(name, ids, "table")
            st.success(f"selected {len(ids)} ET ops")

sel = state.selection()
if sel["ids"] and sel["trace"] == name:
    st.sidebar.markdown(f"**Selection**: {len(sel['ids'])} ops from {sel['source']}")
    st.sidebar.caption("Open the Compose page to add it to a segment.")
