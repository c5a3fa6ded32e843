"""Ranks page: the overview of a many-rank job from its trace store (issue 22).

Per-rank compute / communication / exposed communication / idle over every step (heat maps), the
stragglers, and one rank's timeline on demand. The summaries are built once in a worker process
(app/overview.py); this page reads only them, and a rank's events when its timeline is opened.
"""

from collections.abc import Sequence

import streamlit as st
from streamlit.delta_generator import DeltaGenerator

from app import overview, scheduler, session, widgets, workspace
from app.markup import md_escape
from engine.errors import TraceError

st.title("Ranks")
if "ov_job" not in st.session_state:
    cur = session.traces().get(st.session_state.get("current") or "")
    st.session_state["ov_job_paths"] = list(cur["paths"]) if cur else []  # a list: a path may hold ';'
    st.session_state["ov_job"] = ";".join(st.session_state["ov_job_paths"])
# Not a keyed widget: "ov_job" is plain (sticky) state that outlives the page, and the box is
# redrawn from it, so coming back to the page never shows or sends back a stale value.
with st.container(key="ov_job_box"):
    st.session_state["ov_job"] = text = st.text_input(
        "Job: a trace store folder, a folder of rank traces, or trace files (separated by ;)",
        value=st.session_state["ov_job"],
        placeholder="/data/run42/ or ~/.cache/mystique/store/<key>",
    )
with st.expander("Settings"):
    sched = scheduler.widget()
paths = overview.job_paths(text, st.session_state.get("ov_job_paths") or [])
if not paths:
    st.info("Name a job: its per-rank summaries are built once, then this page reads only them.")
    st.stop()
store = overview.store_of(paths)
table = overview.summary(store) if store else None


def _jobs_panel() -> None:
    workspace.runner().pump()
    active = overview.active_jobs(paths)
    widgets.job_rows(active, key="ov_cancel")
    if st.session_state.get("_ov_active") and not active:
        st.session_state["_ov_active"] = False
        st.rerun()  # finished: draw the overview
    st.session_state["_ov_active"] = bool(active)
    if not active:
        if why := overview.last_failure(paths):
            st.caption(md_escape(why))
        if st.button("Build rank summaries", type="primary", key="ov_build", disabled=sched is None):
            try:
                overview.submit(paths, str(sched), st.session_state.get("current"))
            except TraceError as exc:
                st.error(md_escape(exc))
            st.rerun()


if store is None or table is None:  # no store: no table either
    st.caption("No rank summaries for this job yet: they are built in a worker process (store + one task per rank).")
    st.fragment(_jobs_panel, run_every=1.0 if overview.active_jobs(paths) else None)()
    st.stop()

tabs = overview.tables(store)
lag, per_rank = tabs["stragglers"], tabs["per_rank"]
c: Sequence[DeltaGenerator] = st.columns(4)
c[0].metric("ranks", f"{len(per_rank):,}")
c[1].metric("steps per rank", f"{int(per_rank['steps'].max()) if len(per_rank) else 0}")
c[2].metric("median step ms", f"{float(per_rank['step_ms'].median()) if len(per_rank) else 0:,.3f}")
c[3].metric(
    "slowest rank",
    f"{int(lag['rank'].iloc[0])}" if len(lag) else "-",
    f"{float(lag['vs_median_pct'].iloc[0]):+.1f} %" if len(lag) else None,
    delta_color="inverse",
)
st.plotly_chart(overview.heatmaps(store), key="ov_heat", width="stretch")
st.caption(
    "ms per rank and step (ProfilerStep spans, else the whole trace): compute + exposed communication + idle "
    "= the step, as on the Analysis page (docs/analysis.md). Each panel has its own colour scale (hover for ms): "
    "a bright row is a slow rank, a bright column a slow step."
)
st.subheader("Slow ranks (step time against the median, slowest first)")
st.caption(
    "`slower_than_median`: a step 2 % or more over the median rank's. Not the straggler: that is the rank "
    "the others wait for at collectives (Explore → Analysis, from the simulated schedule; docs/analysis.md). "
    "In a synchronised job a slow step is as often a rank that waited."
)
with st.container(key="ov_lag"):
    st.dataframe(lag.round(3), hide_index=True, key="ov_stragglers", height=320)
st.plotly_chart(overview.bars(store), key="ov_bars", width="stretch")

st.subheader("One rank's timeline")
steps = table[["rank", "step_index", "step", "start_us", "step_ms"]]
c = st.columns([1, 2, 1])
rank = c[0].selectbox("Rank", lag["rank"].tolist(), key="ov_rank")
mine = steps[steps["rank"] == rank]
pick = c[1].selectbox(
    "Step",
    mine["step_index"].tolist(),
    format_func=lambda i: str(mine.set_index("step_index").at[i, "step"]),
    key="ov_step",
)
if c[2].button("Open timeline", key="ov_open"):
    st.session_state["ov_opened"] = (store, rank, pick)
if st.session_state.get("ov_opened") == (store, rank, pick) and pick is not None:
    row = mine.set_index("step_index").loc[pick]
    lo = float(row["start_us"])
    try:
        fig, n = overview.rank_timeline(store, int(rank), lo, lo + float(row["step_ms"]) * 1e3)
    except TraceError as exc:
        st.error(md_escape(exc))
    else:
        st.caption(f"rank {rank} · {md_escape(row['step'])} · {n:,} events read from the store")
        st.plotly_chart(fig, key="ov_timeline", width="stretch")
