"""What-if page: pick edits, simulate, see the predicted timeline and breakdown next to the original."""

import json
from collections.abc import Sequence

import streamlit as st
from streamlit.delta_generator import DeltaGenerator

from app import session, views, widgets, workspace
from app.markup import md_escape
from app.whatif_measured import device_report, gpu_edits, show_measured
from engine.errors import TraceError
from engine.figures import whatif as wfig
from engine.simulate.config import SimConfig
from engine.simulate.whatif.selectors import SELECTORS
from engine.simulate.whatif.spec import field_bounds

st.title("What-if")
st.caption(
    "Predict a step from its trace (task graph + list scheduler, engine/simulate), then change the setup. "
    "Shapes for batch/hidden/layers/sharding come from the ET; load it together with the Kineto trace."
)
name = widgets.trace_picker("Trace", key="wi_trace", kinds=("kineto",))
if name is None:
    st.stop()

wi_ranks = [str(r) for r in (session.get_trace(name).meta.get("ranks") or [])]
edits: list[dict] = []
notes: dict = {}  # edit kind -> the slot under its fields where the inferred value is shown


def show_inferred(res: dict) -> None:
    """Under the Layers and Batch fields: the value the simulation inferred (or was given)."""
    if "layers" in notes and res.get("layers"):
        ly = res["layers"][0]
        notes["layers"].caption(md_escape(f"module: {ly.get('module')} ({ly.get('matched', 0)} matched)"))
    if "batch" in notes and res.get("batch"):
        b = res["batch"][0]
        how = "inferred" if b.get("inferred") else "given"
        notes["batch"].caption(md_escape(f"current batch: {b.get('size')} ({how}, shapes from {b.get('shapes_from')})"))


def folded(warnings: list[str]) -> list[str]:
    """Warnings that differ only in their numbers (24 times "no backward nodes found for module
    event N") folded into the first of them with a count, in first-seen order."""
    import re

    groups: dict[str, list[str]] = {}
    for w in warnings:
        groups.setdefault(re.sub(r"\d+", "#", w), []).append(w)
    return [g[0] if len(g) == 1 else f"{g[0]} (and {len(g) - 1} more like it)" for g in groups.values()]


with st.expander("Edits", expanded=True):
    if st.checkbox(
        "Unprofiled step: take the profiler's host overhead out first",
        key="wi_unprof",
        help="the step measured without the profiler (a capture's meta records it as median_ms); every host "
        "segment shrinks by one factor so that the unchanged trace simulates to it",
    ):
        unprof = st.number_input("unprofiled step ms", 0.001, 1e7, None, key="wi_unprof_ms", placeholder="ms")
        if unprof:
            edits.append({"kind": "unprofiled", "step_ms": float(unprof)})
    c: Sequence[DeltaGenerator] = st.columns(3)
    if c[0].checkbox("Speed-up", key="wi_sp"):
        cat = c[0].selectbox("category", sorted(SELECTORS), index=sorted(SELECTORS).index("gemm"), key="wi_sp_cat")
        fac = c[0].number_input("factor (below 1: slower)", 0.01, 1000.0, 2.0, key="wi_sp_f")
        on = c[0].selectbox("on rank", ["all", *wi_ranks], key="wi_sp_rank")
        edits.append({"kind": "speedup", "category": cat, "factor": fac, **({} if on == "all" else {"rank": int(on)})})
    if c[1].checkbox("Layers", key="wi_ly"):
        mod = c[1].text_input(
            "module regex (empty: auto)", "", key="wi_ly_m", placeholder="auto: the repeated block stack"
        )
        notes["layers"] = c[1].empty()
        lo, hi = field_bounds("layers", "copies")
        cp = c[1].number_input("extra copies", lo, hi, 1, key="wi_ly_c")
        edits.append({"kind": "layers", **({"module": mod.strip()} if mod.strip() else {}), "copies": int(cp)})
    if c[2].checkbox("Batch size", key="wi_bs"):
        size = c[2].number_input(
            "current batch (empty: auto)", 1, 1 << 20, None, key="wi_bs_n", placeholder="auto: from the trace"
        )
        notes["batch"] = c[2].empty()
        sc = c[2].number_input("scale", 0.05, 64.0, 2.0, key="wi_bs_s")
        mult = c[2].text_input("per-sample multiples (e.g. seq len)", "", key="wi_bs_m")
        edits.append(
            {
                "kind": "batch",
                **({"size": int(size)} if size else {}),
                "scale": sc,
                "multiples": [int(x) for x in mult.replace(",", " ").split()],
            }
        )
    c = st.columns(3)
    if c[0].checkbox("Data-parallel ranks", key="wi_dp"):
        lo, hi = field_bounds("data_parallel", "ranks")
        ranks = c[0].number_input("ranks", lo, hi, 64, key="wi_dp_n")
        edits.append({"kind": "data_parallel", "ranks": int(ranks)})
    if c[1].checkbox("Embedding sharding plans", key="wi_sh"):
        rk = c[1].text_input("ranks", "2 4", key="wi_sh_r")
        edits.append({"kind": "sharding", "ranks": [int(x) for x in rk.replace(",", " ").split()]})
    more, measured = gpu_edits(name)  # device, kernel times, inclusive span (app/whatif_measured.py)
    edits += more
    spec_text = c[2].text_area(
        "Spec (JSON, editable)",
        json.dumps({"version": 1, "edits": edits}, indent=1),
        height=180,
        key=f"wi_json_{hash(json.dumps(edits))}",
    )


def edits_in(spec: str) -> bool:
    try:
        return bool(json.loads(spec).get("edits"))
    except (ValueError, AttributeError, RecursionError):
        return True  # a bad spec fails in views.whatif with its own message


entry = session.traces()[name]
try:
    with st.status("Simulating…", expanded=False) as status:
        base, res, pred_events, orig_events, path, lag = views.whatif(
            entry["hash"], tuple(entry["paths"]), spec_text, json.dumps(SimConfig().to_dict(), sort_keys=True)
        )
        status.update(
            label=f"Simulated {res['tasks']:,} tasks at {res['tasks_per_s'] / 1e6:.2f} M tasks/s (graph build + schedule)",
            state="complete",
        )
except (TraceError, ValueError) as exc:
    st.error(md_escape(exc))
    st.stop()

c = st.columns(4)
c[0].metric(
    "measured iteration ms", "—" if base["measured_iteration_ms"] is None else f"{base['measured_iteration_ms']:.3f}"
)
c[1].metric(
    "simulated, unchanged",
    f"{base['predicted_iteration_ms']:.3f}",
    None if base["error_pct"] is None else f"{base['error_pct']:+.2f} % vs measured",
    delta_color="off",
)
change_pct = 100 * (res["predicted_iteration_ms"] / base["predicted_iteration_ms"] - 1)
c[2].metric(  # no badge without edits; an unchanged step is neither good nor bad (grey)
    "predicted with edits",
    f"{res['predicted_iteration_ms']:.3f}",
    f"{change_pct:+.1f} %" if edits_in(spec_text) else None,
    delta_color="inverse" if abs(change_pct) >= 0.05 else "off",
)
c[3].metric("tasks / edges", f"{res['tasks']:,} / {sum(res['edges'].values()):,}")
show_inferred(res)
for w in folded(res["warnings"]):
    st.warning(md_escape(w))
device_report(res)
if measured is not None:
    show_measured(measured, res, pred_events, max(1.0, 1.2 * res["predicted_iteration_ms"]))
tab_b, tab_c, tab_t, tab_s, tab_a = st.tabs(["Breakdown", "Critical path", "Timelines", "Sharding", "Assumptions"])
with tab_b:
    st.plotly_chart(
        wfig.breakdown_bars(res["measured_breakdown"], res["breakdown"], ("measured (the trace)", "predicted")),
        key="wi_bd",
        width="stretch",
    )
    st.dataframe(wfig.breakdown_table(res), hide_index=True, key="wi_bd_table")
    st.caption(
        "ms per step: compute + exposed communication + idle = the step (docs/analysis.md). "
        "'measured' is the trace itself, as on Explore's Analysis page."
    )
with tab_c:
    cp = res.get("critical_path")
    if cp and path is not None:
        c = st.columns(3)
        c[0].metric("critical path ms", f"{cp['ms']:,.3f}")
        c[1].metric("predicted step ms", f"{res['predicted_iteration_ms']:,.3f}")
        c[2].metric("ranks on it", ", ".join(f"{r} ({v:.1f} ms)" for r, v in cp["ranks"].items()))
        widgets.show_critical_path(
            cp, path["segments"], path["top_ops"], title="Critical path of the prediction, across ranks", key="wi_cp"
        )
        strag = res.get("stragglers") or {}
        if strag.get("straggler"):
            s_ = strag["straggler"]
            st.warning(
                f"rank {s_['rank']} holds the others up ({s_['held_others_ms']:.3f} ms per step at collectives): {md_escape(s_['reason'])}"
            )
        if lag is not None and len(lag) > 1:
            st.dataframe(lag.round(3), hide_index=True, key="wi_stragglers")
        sens = res.get("sensitivity")
        if sens:
            st.markdown(
                f"**What should I optimise?** The step's change for each kind of work {sens['factor']:g}x faster"
            )
            st.dataframe(wfig.sensitivity_table(sens), hide_index=True, key="wi_sensitivity")
            st.caption("Each row schedules the prediction again with that work sped up (not read off the path).")
    else:
        st.info("No critical path: the prediction has no tasks.")
with tab_t:
    from engine.figures import compare as cfig

    win = st.number_input(
        "Window (µs from each start)",
        100.0,
        value=float(max(1000.0, base["predicted_iteration_ms"] * 1200)),
        key="wi_win",
    )
    st.plotly_chart(
        cfig.aligned_timelines(orig_events, pred_events, ("original", "predicted"), window_us=float(win)),
        key="wi_tl",
        width="stretch",
    )
with tab_s:
    if "sharding" in res:
        st.dataframe(wfig.sharding_table(res["sharding"]), hide_index=True, width="stretch")
    else:
        st.info("Add the 'Embedding sharding plans' edit to rank plans.")
with tab_a:
    st.json({k: v for k, v in res.items() if k in ("assumptions", "dp", "layers", "batch", "cost_model", "edges")})

if st.button("Add the prediction to the workspace (opens in Explore and Compare)", key="wi_add"):
    from engine.simulate import export_kineto

    label = session.unique_name(f"{name} (predicted)")
    path = workspace.results_dir() / f"predicted_{entry['hash'][:12]}_{abs(hash(spec_text)) % 10**8}.json.gz"
    try:
        export_kineto(pred_events, path, session.get_trace(name).meta)
        label = session.add_trace(label, [str(path)])
        st.success(f"added {md_escape(repr(label))}: pick it on Explore or Compare")
    except (TraceError, OSError) as exc:
        st.error(md_escape(exc))
