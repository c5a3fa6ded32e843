"""Replay page: run a trace, the current selection or a composed benchmark on CPU/GPU."""

import tempfile
import time
from pathlib import Path

import orjson
import streamlit as st

from app import state
from engine.errors import TraceError

st.title("Replay")
name = state.trace_picker("Original trace", key="replay_trace", kinds=("execution_trace",))
if name is None:
    st.stop()
trace = state.get_trace(name)
sel = state.selection()
bench = st.session_state.get("benchmark")  # {"trace", "dir", "et_path", "op_ids"} from Compose

targets = ["whole trace"]
if sel["ids"] and sel["trace"] == name:
    targets.append(f"selection ({len(sel['ids'])} ops)")
if bench and bench.get("trace") == name:
    targets.append(f"composed benchmark ({Path(bench['dir']).name})")
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


c = st.columns(5)
device = c[0].selectbox("Device", _devices(), key="replay_device")
warmup = int(c[1].number_input("Warm-up iterations", 0, 100, 2, key="replay_warmup"))
iters = int(c[2].number_input("Timed iterations", 1, 1000, 5, key="replay_iters"))
mode = c[3].selectbox(
    "Operator level",
    ["top", "leaf"],
    key="replay_mode",
    help="top: highest rebuildable op per call path; leaf: lowest (closer to kernels)",
)
host_gaps = c[4].checkbox("Reproduce CPU gaps", value=False, key="replay_gaps")

if st.button("Run replay", type="primary", key="run_replay"):
    from engine.replay import ReplayConfig, replay

    op_ids = None
    replay_trace = trace
    if target.startswith("selection"):
        from engine.graph import Selection, select

        # close the picked ops over their call-tree descendants and apply the replay rule inside
        try:
            op_ids = select(trace, Selection(ids=list(sel["ids"]))).replay_ids
        except TraceError as exc:
            st.error(str(exc))
            st.stop()
    elif target.startswith("composed"):
        op_ids = bench.get("op_ids")
        if bench.get("et_path"):
            replay_trace = state.load_paths((bench["et_path"],))
            op_ids = None
    lock = state.device_lock(device)
    if not lock.acquire(blocking=False):
        st.warning(f"A replay is already running on {device}; try again when it finishes.")
    else:
        try:
            with st.status(f"Replaying on {device}…", expanded=True) as status:
                bar = st.progress(0.0, text="starting")

                def cb(fraction: float, message: str) -> None:
                    bar.progress(min(1.0, max(0.0, fraction)), text=message[:120])

                t0 = time.perf_counter()
                # a fresh folder per run: two replays within one second must not share (and
                # overwrite) one result folder
                state.results_dir().mkdir(parents=True, exist_ok=True)
                out = Path(
                    tempfile.mkdtemp(
                        dir=state.results_dir(),
                        prefix=f"{trace.content_hash[:12]}_{time.strftime('%Y%m%d-%H%M%S')}_{device.replace(':', '')}_",
                    )
                )
                config = ReplayConfig(
                    device=device, warmup=warmup, iters=iters, mode=mode, host_gaps=host_gaps, profile=True, out_dir=out
                )
                result = replay(replay_trace, config=config, op_ids=op_ids, progress=cb)
                report = result.to_json()
                json_path = out / "replay.json"
                json_path.write_bytes(orjson.dumps(report, option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_INDENT_2))
                st.session_state.setdefault("replays", []).append(
                    {
                        "trace": name,
                        "path": str(json_path),
                        "kineto_path": report.get("kineto_path"),
                        "device": device,
                        "target": target,
                        "median_ms": report.get("median_ms"),
                        "wall_s": round(time.perf_counter() - t0, 2),
                    }
                )
                status.update(
                    label=f"Replay done: median {report.get('median_ms', float('nan')):.3f} ms/iter", state="complete"
                )
        except TraceError as exc:
            st.error(str(exc))
        finally:
            lock.release()

runs = [r for r in st.session_state.get("replays", []) if r["trace"] == name]
if runs:
    st.subheader("Results")
    st.dataframe(
        [{k: r[k] for k in ("target", "device", "median_ms", "wall_s", "path")} for r in runs],
        hide_index=True,
        key="replay_runs",
    )
    last = runs[-1]
    report = orjson.loads(Path(last["path"]).read_bytes())
    c = st.columns(4)
    c[0].metric("median ms / iteration", f"{report['median_ms']:.3f}")
    cov = report.get("coverage") or {}
    c[1].metric("ops replayed", f"{cov.get('replayed', 0)} / {cov.get('selected', 0)}")
    c[2].metric("substituted", cov.get("substituted", 0))
    c[3].metric("skipped", cov.get("skipped", 0))
    if cov.get("by_reason"):
        st.caption("skipped/substituted by reason: " + ", ".join(f"{k}: {v}" for k, v in cov["by_reason"].items()))
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
    st.caption("Open the Compare page to compare this replay with the original.")
