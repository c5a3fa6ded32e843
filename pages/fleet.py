"""Fleet page: many jobs signed through the trace store, and a weighted suite that stands for them
(issue 35). The signing runs in a worker process (progress, cancel); this page reads its table."""

from collections.abc import Sequence
from pathlib import Path

import streamlit as st
from streamlit.delta_generator import DeltaGenerator

from app import fleet, scheduler, session, widgets, workspace
from app.markup import md_escape as md
from engine.errors import TraceError
from engine.figures.fleet import jobs_scatter, mix_bars

st.title("Fleet")
st.caption(
    "One signature per job (a trace file, or a folder's rank files): where its measured step goes, by kernel class, "
    "collective, host overhead and idle (engine/fleet/signature.py). A suite of N jobs with weights matches the "
    "fleet's mix (`mystique fleet suite` does the same)."
)
with st.form("fleet_form"):
    text = st.text_area("Jobs: trace files and folders, one per line", key="fleet_paths", height=90)
    sched = scheduler.widget()
    go = st.form_submit_button("Sign the fleet", type="primary")
paths = [p.strip() for p in (text or "").splitlines() if p.strip()]
if go:
    if not paths:
        st.error("Name at least one trace file or folder.")
    elif sched is not None:
        try:
            fleet.submit(paths, str(sched))
        except TraceError as exc:
            st.error(md(str(exc)))
        st.rerun()


@st.fragment(run_every=1.0)
def _progress() -> None:
    workspace.runner().pump()
    act = fleet.active()
    widgets.job_rows(act, key="fleet_cancel")
    if st.session_state.get("_fleet_active") and not act:
        st.session_state["_fleet_active"] = False
        st.rerun(scope="app")
    st.session_state["_fleet_active"] = bool(act)


if fleet.active():
    _progress()
if why := fleet.last_failure():
    st.caption(md(why))
done = fleet.fleets()
if not done:
    st.info("Sign a fleet: name the folders that hold its jobs' traces.")
    st.stop()
pick_id = st.selectbox(
    "Fleet",
    [f["id"] for f in done],
    format_func=lambda i: next(f"run {f['id']}: {f['jobs']} jobs" for f in done if f["id"] == i),
    key="fleet_pick",
)
folder = next(f["folder"] for f in done if f["id"] == pick_id)
sigs = fleet.signatures(folder)
if len(sigs) < 2:
    st.warning("This fleet has fewer than two jobs: nothing to choose from.")
    st.stop()
budget = st.slider("Suite size", 1, min(20, len(sigs)), min(5, len(sigs)), key="fleet_budget")
suite, base, points = fleet.suite(folder, budget)
c: Sequence[DeltaGenerator] = st.columns(4)
c[0].metric("jobs", f"{len(sigs):,}")
c[1].metric("suite L1 to the fleet", f"{suite.l1:.3f}")
c[2].metric("random picks (median)", f"{base['random_median_l1']:.3f}")
c[3].metric(f"{budget} longest jobs", f"{base['longest_l1']:.3f}")
left, right = st.columns(2)
left.plotly_chart(jobs_scatter(points), key="fleet_map", width="stretch")
right.plotly_chart(mix_bars(suite.fleet, suite.suite), key="fleet_mix", width="stretch")
members = sigs.iloc[suite.picks][["job", "device", "step_ms", "path"]].assign(weight=suite.weights)
st.subheader("Suite")
st.dataframe(
    members[["job", "weight", "device", "step_ms", "path"]],
    hide_index=True,
    key="fleet_members",
    column_config={"weight": st.column_config.ProgressColumn("weight", format="percent", min_value=0.0, max_value=1.0)},
)
c = st.columns(3)
if c[0].button("Write the suite", key="fleet_write", help="the manifest only: members, weights, signatures"):
    st.success(md(f"suite written: {fleet.write_suite(folder, budget)}"))
if c[1].button(
    "Compose the suite",
    key="fleet_compose",
    type="primary",
    help="each pick becomes a benchmark (one step, ranks this machine can replay); Kineto-only jobs are "
    "synthesized; as `mystique fleet suite --out`",
):
    try:
        fleet.submit_suite(folder, budget)
    except TraceError as exc:
        st.error(md(str(exc)))
    st.rerun()
if made := fleet.composed(folder, budget):
    man = made["manifest"]
    st.subheader("Composed suite")
    st.caption(md(f"{made['suite']} · replay it with `mystique replay {made['suite']}`"))
    st.dataframe(
        [
            {
                "job": m["job"],
                "weight": m["weight"],
                "benchmark": m.get("benchmark") or "",
                "step": m.get("step") or "",
                "ranks": len(m.get("ranks_kept") or []),
                "trims / reason": "; ".join(m.get("trims") or []) or (m.get("refused") or ""),
            }
            for m in man["members"]
        ],
        hide_index=True,
        key="fleet_composed",
    )
    for m in man["members"]:
        if m.get("refused"):
            st.caption(md(f"{m['job']} not composed: {m['refused']}"))
    if c[2].button("Replay the suite", key="fleet_replay", help="every member, as `mystique replay SUITE`"):
        try:
            fleet.submit_replay(made["suite"])
        except TraceError as exc:
            st.error(md(str(exc)))
        st.rerun()
    if res := fleet.replayed(made["suite"]):
        st.metric("weighted fleet step (ms)", f"{res['weighted_step_ms']:.2f}")
        st.caption(
            md(
                f"{res['replayed']} member(s) replayed ({res['weight_replayed']:.0%} of the weight), "
                f"{res['refused']} not; coverage per member: "
                + ", ".join(
                    f"{m['job']} {m['coverage']['rate']:.1%}" if "coverage" in m else f"{m['job']} refused"
                    for m in res["members"]
                )
            )
        )
if skipped := fleet.skipped(folder):
    with st.expander(f"{len(skipped)} file(s) skipped"):
        st.dataframe(skipped, hide_index=True)
st.subheader("Open a job")
c = st.columns([4, 1])
job = c[0].selectbox("Job", sigs["job"].astype(str).tolist(), key="fleet_job")
if c[1].button("Open in Explore", key="fleet_open"):
    row = sigs[sigs["job"].astype(str) == job].iloc[0]
    try:
        name = session.unique_name(str(job).split("/")[-1])
        session.add_trace(name, [str(row["path"])])
        session.make_current(name)
    except TraceError as exc:
        st.error(md(str(exc)))
    else:
        st.switch_page(str(Path(__file__).resolve().parent / "explore.py"))  # as the router names it
