"""Replay page: queue replays of a trace, the current selection or a composed benchmark.

Replays run in worker processes (`engine.workspace.jobs`): the page never blocks, progress
streams back through the workspace catalog, Cancel kills the worker, several can be queued,
leaving the page (or reloading) does not stop them, and the reported RSS is the worker's own.
"""

from pathlib import Path

import streamlit as st

from app import session, views, widgets, workspace
from app.markup import md_escape
from engine.errors import TraceError
from engine.graph.replayset import SelectionMode
from engine.replay.collectives import ReplayMode
from engine.replay.config import ReplayConfig  # no torch: engine.replay imports its executor lazily

st.title("Replay")
name = widgets.trace_picker("Original trace", key="replay_trace", kinds=("execution_trace",))
if name is None:
    st.stop()
trace = session.get_trace(name)
sel = session.selection()
bench = st.session_state.get("benchmark")  # {"trace", "dir", "et_path", ...} from Compose

targets = ["whole trace"]
if sel["ids"] and sel["trace"] == name:
    targets.append(f"selection ({len(sel['ids'])} ops)")
if bench and bench.get("trace") == name:
    targets.append(f"composed benchmark ({Path(bench['dir']).name})")
nxt = st.session_state.pop("_replay_target_next", None)  # Compose just exported: open on it
if nxt in targets:
    st.session_state["replay_target"] = nxt
elif st.session_state.get("replay_target") not in targets:
    st.session_state.pop("replay_target", None)  # a restored target this trace does not have
target = st.radio("Replay", targets, key="replay_target", horizontal=True)


def _devices() -> list[str]:
    devs = ["cpu"]
    try:
        import torch

        if torch.cuda.is_available():
            devs += [f"cuda:{i}" for i in range(torch.cuda.device_count())]
    except ImportError:
        pass
    return devs


DEFAULTS = ReplayConfig()  # the one source of defaults (the CLI reads it too)
c = st.columns(5)
device = c[0].selectbox("Device", _devices(), key="replay_device")
warmup = int(c[1].number_input("Warm-up iterations", 0, 100, DEFAULTS.warmup, key="replay_warmup"))
iters = int(c[2].number_input("Timed iterations", 1, 1000, DEFAULTS.iters, key="replay_iters"))
mode = c[3].selectbox(
    "Operator level",
    [m.value for m in SelectionMode],
    key="replay_mode",
    help="top: highest rebuildable op per call path; leaf: lowest (closer to kernels)",
)
host_gaps = c[4].checkbox("Reproduce CPU gaps", value=False, key="replay_gaps")
allow_code = st.checkbox(
    "Allow trace code",
    value=DEFAULTS.allow_trace_code,
    key="replay_allow_trace_code",
    help="also run ops that may touch files, devices or the network (aten::from_file, save, ops with "
    "path arguments) and code shipped in the trace. Off: they are skipped with a reason. Turn on "
    "only for a trace you trust (docs/security.md).",
)
rank_files = views.rank_inputs(
    tuple(session.traces()[name]["paths"]),
    tuple((trace.meta or {}).get("ranks") or [0]),
    bench.get("dir") if bench and target.startswith("composed") else None,
)
dist_opts = None
if len(rank_files["ranks"]) > 1 or not target.startswith("selection"):
    d = st.columns(3)
    n_rec = len(rank_files["ranks"])
    world = int(
        d[0].number_input(
            "World size (processes)",
            1,
            64,
            n_rec if n_rec > 1 else 1,
            # keyed per trace and target: a value set for one never carries to a multi-rank other
            # (issue 21: a 2-rank composed folder kept World size 1 and ran as one SPMD rank)
            key=f"replay_world:{name}:{target}:{n_rec}",
            help="one process per rank with real collectives (gloo on CPU, NCCL on CUDA); "
            "a one-rank trace runs as N symmetric ranks (SPMD)",
        )
    )
    rmode = d[1].selectbox("Mode", [m.value for m in ReplayMode], key="replay_rmode")
    if world > 1 or n_rec > 1:
        dist_opts = {"world_size": world, "mirror_rank": None if world == n_rec else rank_files["ranks"][0]}
    mode_kw = {"replay_mode": rmode}
else:
    mode_kw = {}


def job_params(name: str, bench: dict | None) -> dict:
    """The worker's params for this form (engine.workspace.worker.run_replay). Options such as a
    world size or a distributed mode are more keys here and a job kind in the worker registry."""
    params: dict = {
        "paths": list(session.traces()[name]["paths"]),
        "op_ids": None,
        "rank": None,
        "config": {
            "device": device,
            "warmup": warmup,
            "iters": iters,
            "mode": mode,
            "host_gaps": host_gaps,
            "allow_trace_code": allow_code,
        },
    }
    params["config"]["profile"] = True
    params["config"].update(mode_kw)
    if dist_opts is not None:
        params["paths"] = rank_files["paths"]
        params["distributed"] = dist_opts
        params["config"]["metrics"] = False
        return params
    if target.startswith("selection"):
        params["op_ids"] = views.replay_ids(tuple(session.traces()[name]["paths"]), tuple(sel["ids"]))
    elif target.startswith("composed") and bench is not None:  # the target exists only with a bench
        params["paths"] = [bench["et_path"]]
    return params


def show_world_memory(name: str) -> bool:
    """The memory estimate of the chosen world, before Run (issue 32: 8 ranks at ~5 GB each were
    preset on a 24 GB machine with no estimate); False when the CLI would refuse it."""
    if dist_opts is None:
        return True
    import json

    cfg = {
        **job_params(name, bench)["config"],
        "metrics": False,
        "out_dir": str(workspace.results_dir()),
    }  # as the worker sets it
    try:
        b, refusal = views.world_memory(
            tuple(rank_files["paths"]), dist_opts["world_size"], dist_opts["mirror_rank"], json.dumps(cfg)
        )
    except (TraceError, ValueError) as exc:
        st.error(str(exc))
        return False
    gib = b["total_bytes"] / 2**30
    per = max(b["per_rank_bytes"].values()) / 2**30
    text = (
        f"Memory estimate: {b['world_size']} ranks × up to {per:.2f} GiB = {gib:.1f} GiB at once, "
        f"of {b['available_bytes'] / 2**30:.1f} GiB this machine can give ({b['limited_by']})"
    )
    if refusal:
        st.error(refusal)
        return False
    st.caption(text)
    return True


fits = show_world_memory(name)
if st.button("Run replay", type="primary", key="run_replay", disabled=not fits):
    try:
        job = workspace.runner().submit("replay", job_params(name, bench), trace=name, target=target)
        st.toast(f"replay job {job} queued")
    except TraceError as exc:
        st.error(md_escape(exc))


def _jobs_panel() -> None:
    workspace.runner().pump()
    jobs = [j for j in workspace.catalog().jobs(kind="replay") if j["trace"] == name]
    active = [j for j in jobs if not j["status"].finished]
    if active:
        st.subheader("Running and queued")
    widgets.job_rows(
        active, key="cancel", label=lambda j: f"job {j['id']} · {j['target']} · {j['status'].value}", border=True
    )
    failed = [j for j in jobs if j["status"].value in ("failed", "cancelled")]
    for j in failed[-3:]:
        st.caption(md_escape(workspace.failure_line(j)))
    runs = [r for r in workspace.replay_runs() if r["trace"] == name]
    if st.session_state.get("_replay_active") and not active:
        st.session_state["_replay_active"] = False
        st.rerun()  # a job finished: redraw the whole page (results below, Compare's picker)
    st.session_state["_replay_active"] = bool(active)
    if not runs:
        return
    st.subheader("Results")
    st.dataframe(
        [
            {k: r.get(k) for k in ("job", "target", "device", "median_ms", "wall_s", "peak_rss_mb", "path")}
            for r in runs
        ],
        hide_index=True,
        key="replay_runs",
    )
    last = runs[-1]
    from engine.replay.result import ReplayResult  # lazy: engine.replay imports torch

    try:
        report = ReplayResult.read(last["path"])
    except TraceError as exc:
        st.error(md_escape(exc))
        return
    c = st.columns(5)
    n_steps = report.steps_per_iteration
    c[0].metric(
        "median ms / recorded step" if n_steps > 1 else "median ms / iteration",
        f"{report.median_step_ms:.3f}",
        help=f"one iteration replays the ET's {n_steps} recorded steps: {report.median_ms:.3f} ms"
        if n_steps > 1
        else None,
    )
    cov = report.coverage
    c[1].metric("ops replayed", f"{cov.get('replayed', 0)} / {cov.get('selected', 0)}")
    c[2].metric("substituted", cov.get("substituted", 0))
    c[3].metric("skipped", cov.get("skipped", 0))
    c[4].metric(
        "peak RSS (process tree)",
        f"{last.get('peak_rss_mb') or last.get('worker_peak_rss_mb') or 0:,.0f} MB",
        help="the replay worker's peak plus each rank process's (ranks run at once)",
    )
    if cov.get("by_reason"):
        st.caption("skipped by reason: " + md_escape(", ".join(f"{k}: {v}" for k, v in cov["by_reason"].items())))
    if cov.get("by_substitution"):
        st.caption("substituted: " + md_escape(", ".join(f"{k}: {v}" for k, v in cov["by_substitution"].items())))
    for w in report.warnings:  # one rank of a multi-rank job replayed alone (engine.replay.worldhint)
        if "--mirror-rank" in w and "--world-size" in w:
            n = w.rsplit("--world-size ", 1)[1].split()[0].strip("`")
            st.info(f"{md_escape(w)} (here: set World size (processes) to {md_escape(n)})", icon="💡")
    if report.ranks:
        from engine.figures import ranks as rfig

        if report.spmd:
            st.caption(md_escape(report.spmd["assumption"]))
        doc = report.to_json()
        st.plotly_chart(rfig.rank_bars(doc), key="replay_rank_bars", width="stretch")
        st.dataframe(rfig.rank_table(doc), hide_index=True, key="replay_rank_table")
    d = st.columns(2)
    d[0].download_button(
        "Download replay report (JSON)",
        Path(last["path"]).read_bytes(),
        file_name="replay.json",
        mime="application/json",
        key="dl_report",
    )
    kp = last.get("kineto_path")
    if kp and Path(kp).exists():
        d[1].download_button(
            "Download replay Kineto trace (open in Perfetto)",
            Path(kp).read_bytes(),
            file_name=Path(kp).name,
            key="dl_kineto",
        )
    st.caption("Open the Compare page to compare a replay with the original.")


busy = any(not j["status"].finished for j in workspace.catalog().jobs(kind="replay"))
st.fragment(_jobs_panel, run_every=1.0 if busy else None)()
