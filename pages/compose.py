"""Compose page: pick operators (graph nodes, timeline bars, table rows) into segments, set
repeat / batch scale / dtype / sharding, see the composed op list, closure and memory; save,
load and export the benchmark. The spec lives in session state as a plain dict (small,
JSON-ready: the engine's BenchmarkSpec layout); `app.compose_bridge` talks to engine.compose."""

from collections.abc import Sequence
from dataclasses import fields
from pathlib import Path

import orjson
import streamlit as st
from streamlit.delta_generator import DeltaGenerator

from app import compose_bridge as bridge
from app import session, views, widgets, workspace
from app.markup import md_escape
from engine.compose.limits import ComposeLimits
from engine.compose.shard.kinds import SHARDINGS, ShardKind
from engine.errors import TraceError
from engine.figures.selection import selection_to_node_ids
from engine.rules import bounds, choices

st.title("Compose")
name = widgets.trace_picker("Source trace", key="compose_trace", kinds=("execution_trace",))
if name is None:
    st.stop()
trace = session.get_trace(name)
entry = session.traces()[name]
spec = bridge.spec_state(name, trace, entry["paths"])
# the spec's widgets are keyed by the trace's content: batch scale, sharding and the name set for
# one trace never carry over to the next one picked (issue 21 item 6)
# (+ how many specs were loaded for it: a loaded spec gets fresh widgets that show its values)
tk = f"{session.trace_key(name)}.{st.session_state.get(f'_spec_gen:{name}', 0)}"

st.subheader("1 · Pick operators")
src_graph, src_time, src_table = st.tabs(["Graph", "Timeline", "Table"])
picked: list[int] = []
with src_graph:
    picked += widgets.graph_panel(name, tuple(entry["paths"]), None, "compose_graph", height=460)[0]
with src_time:
    if trace.has_kineto:
        lo, hi = views.default_window(tuple(entry["paths"]), None)
        fig = views.timeline_fig(tuple(entry["paths"]), None, lo, hi, 0.0, None)
        event = st.plotly_chart(
            fig, on_select="rerun", selection_mode=("points", "box"), key="compose_timeline", width="stretch"
        )
        picked += selection_to_node_ids(event, "timeline", events=trace.events, ops=trace.ops)
    else:
        st.info("No Kineto events in this trace.")
with src_table:
    pattern = st.text_input("Filter by name (regex)", key="compose_filter", placeholder="e.g. addmm|relu")
    table = bridge.op_table(trace, pattern)
    ev = st.dataframe(
        table, hide_index=True, on_select="rerun", selection_mode="multi-row", key="compose_table", height=260
    )
    picked += selection_to_node_ids(ev, "table", table_ids=table["id"].tolist())
sel = session.selection()
if (
    not picked
    and sel["trace"] == name
    and sel["ids"]
    and st.checkbox(f"Use the Explore selection ({len(sel['ids'])} ops)", key="compose_use_explore")
):
    picked = list(sel["ids"])
picked = sorted(set(picked))
st.session_state["compose_picked"] = picked

c: Sequence[DeltaGenerator] = st.columns([2, 1, 1])
c[0].markdown(f"**Picked**: {len(picked)} ops" + (f" (first: {picked[:8]})" if picked else ""))
scope = c[1].radio("Add as", ["these ops", "their module subtree"], key="compose_scope")
if c[2].button("Add segment", disabled=not picked, key="compose_add", type="primary"):
    spec["segments"].append(
        bridge.new_segment(trace, picked, whole_module=scope != "these ops", index=len(spec["segments"]))
    )
    st.rerun()

st.subheader("2 · Segments")
if not spec["segments"]:
    st.info("No segment yet: pick operators above and press *Add segment* (or load a spec below).")
for i, seg in enumerate(spec["segments"]):
    with st.container(border=True):
        cols = st.columns([4, 1, 1])
        cols[0].markdown(f"**{md_escape(seg['label'])}** · {md_escape(bridge.describe(seg))}")
        seg["repeat"] = int(cols[1].number_input("repeat", 1, 10000, int(seg["repeat"]), key=f"seg_rep_{i}:{tk}"))
        if cols[2].button("Remove", key=f"seg_rm_{i}"):
            spec["segments"].pop(i)
            st.rerun()

c = st.columns(4)
spec["batch_scale"] = float(
    c[0].number_input("Batch scale", 0.01, 1024.0, float(spec["batch_scale"]), key=f"compose_batch_scale:{tk}")
)
dtypes = list(bridge.DTYPES)
dt = c[1].selectbox("dtype", dtypes, index=dtypes.index(spec["dtype"] or "as traced"), key=f"compose_dtype:{tk}")
spec["dtype"] = None if dt == "as traced" else dt
kinds = list(bridge.SHARDING)
shard = spec.get("sharding") or {}
kind = c[2].selectbox(
    "Sharding",
    kinds,
    index=kinds.index(shard.get("kind", "none")),
    key=f"compose_sharding:{tk}",
    help="dp/tp: data/tensor parallel degree; embedding: shard embedding tables over ranks",
)
sharding: dict | None = None
if kind != "none":  # the kind's own fields (engine.compose.shard.kinds): rules, label, start
    sharding = {"kind": kind}
    cls = SHARDINGS[ShardKind(kind)]
    for f in fields(cls):
        ui, rules, key = f.metadata, cls.rules_of(f.name), f"compose_{f.name}:{tk}"
        opts = choices(rules)
        if opts is not None:
            pick = list(opts).index(shard.get(f.name, ui["default"]))
            sharding[f.name] = c[3].selectbox(ui["label"], opts, index=pick, key=key)
        else:
            v = int(shard.get(f.name) or ui["default"])
            lo = int(bounds(rules)[0] or 1)
            sharding[f.name] = int(c[3].number_input(ui["label"], lo, ComposeLimits().max_ranks, v, key=key))
spec["sharding"] = sharding
spec["name"] = st.text_input("Benchmark name", spec.get("name", "benchmark"), key=f"compose_name:{tk}")

st.subheader("3 · Result")
if spec["segments"]:
    try:
        bench, summary = bridge.compose_spec(trace, spec)
    except TraceError as exc:
        st.error(md_escape(exc))
        bench, summary = None, None
    if summary is not None:
        for w in summary["warnings"]:
            st.warning(md_escape(w))
        m = st.columns(4)
        m[0].metric("ops per iteration", f"{summary['ops']:,}")
        m[1].metric("synthesized inputs", f"{summary['inputs']:,}")
        m[2].metric("estimated memory", f"{summary['memory_mb']:,.1f} MB")
        m[3].metric("ranks", summary["ranks"])
        rep = bridge.sharding_report(trace, bench, spec)
        if rep is not None:
            if rep["n_dropped"]:
                listed = ", ".join(f"{k} ×{v}" for k, v in list(rep["dropped"].items())[:8])
                st.warning(
                    f"Embedding sharding keeps only the embedding lookups (aten::embedding_bag and FBGEMM TBE "
                    f"lookups, + their all_to_all): {rep['n_dropped']} picked ops that are not lookups are not in "
                    f"the per-rank benchmarks ({md_escape(listed)}). Replay the dense part with a separate segment "
                    "without sharding.",
                    icon="⚠️",
                )
            st.markdown(
                f"**Embedding plan {md_escape(rep['plan'])} over {rep['ranks']} ranks** · load imbalance "
                f"(max / mean cost) {rep['imbalance']:.3f}"
            )
            st.dataframe(rep["per_rank"], hide_index=True, key="compose_shard_ranks")
            st.plotly_chart(bridge.shard_time_figure(rep["per_rank"]), key="compose_shard_chart", width="stretch")
        ranks_avail = sorted(bench.ranks)
        show_rank = (
            st.selectbox("Rank", ranks_avail, key="compose_show_rank") if len(ranks_avail) > 1 else ranks_avail[0]
        )
        with st.expander(f"Composed op list (rank {show_rank})", expanded=True):
            table = summary["op_table"] if show_rank == ranks_avail[0] else bridge.rank_ops_table(bench, show_rank)
            st.dataframe(table, hide_index=True, key="compose_ops", height=260)
        with st.expander("Closure: inputs synthesized from outside the selection"):
            st.dataframe(summary["inputs_table"], hide_index=True, key="compose_inputs", height=220)
        parent = st.text_input("Export under", str(workspace.catalog().root / "benchmarks"), key="compose_out_parent")
        # the folder is named after the benchmark (a kept text box kept the first name before)
        out_dir = str(Path(parent) / bridge.export_folder(spec["name"], session.traces()[name]["hash"], spec))
        st.caption(f"Export folder: {md_escape(out_dir)}")
        if st.button("Export benchmark", key="compose_export"):
            try:
                info = bridge.export_benchmark(bench, out_dir)
                st.session_state["benchmark"] = {"trace": name, "dir": out_dir, **info}
                # Replay opens on what was just composed (this page's own picker is drawn already)
                st.session_state["current"] = name
                st.session_state["_replay_target_next"] = f"composed benchmark ({Path(out_dir).name})"
                st.success(md_escape(f"exported to {out_dir}: {', '.join(info.get('files', []))}"))
            except TraceError as exc:
                st.error(md_escape(exc))

st.subheader("Save / load spec")
c = st.columns(2)
c[0].download_button(
    "Save spec (JSON)",
    orjson.dumps(bridge.spec_json(spec), option=orjson.OPT_INDENT_2),
    file_name=f"{spec.get('name', 'benchmark')}.spec.json",
    mime="application/json",
    key="spec_dl",
)
up = c[1].file_uploader("Load spec", type=["json"], key="spec_up")
if up is not None and st.session_state.get("_spec_loaded") != up.file_id:
    try:
        st.session_state["specs"][name] = bridge.spec_from_json(up.getvalue(), name)
        st.session_state["_spec_loaded"] = up.file_id
        # new widget keys: the widgets show the loaded spec, not the values typed before
        st.session_state[f"_spec_gen:{name}"] = st.session_state.get(f"_spec_gen:{name}", 0) + 1
        st.rerun()
    except TraceError as exc:
        st.error(md_escape(exc))

workspace.save_spec(name, spec)
