"""What-if page parts for issue 30: the device picker, GPU times from a second loaded trace, an
inclusive host-span speed-up, and predicted against measured when a second trace of the same
program is the measured side. Kept apart from pages/whatif.py so the page only calls them."""

from __future__ import annotations

import json

import streamlit as st

from app import session, views
from app.markup import md_escape
from engine.trace.devices import CATALOG


def kineto_path(entry: dict) -> str:
    """The Kineto file of a workspace trace (an ET loaded beside it is not a kernel-times source)."""
    paths = [str(p) for p in entry["paths"]]
    kin = [p for p in paths if "_et." not in p.rsplit("/", 1)[-1]]
    return (kin or paths)[0]


def gpu_edits(name: str) -> tuple[list[dict], str | None]:
    """The issue-30 edit widgets (one row of three columns); returns the edits and the name of the
    trace picked as the measured side (None: none)."""
    edits: list[dict] = []
    others = [n for n in session.traces() if n != name]
    c = st.columns(3)
    if c[0].checkbox("Retarget GPU", key="wi_dev"):
        target = c[0].selectbox("target GPU (datasheet peaks)", sorted(CATALOG), key="wi_dev_t")
        src = c[0].selectbox("this trace ran on", ["detect", *sorted(CATALOG)], key="wi_dev_s")
        edits.append({"kind": "device", "target": target, **({} if src == "detect" else {"source_device": src})})
    measured = None
    if c[1].checkbox("Kernel times from another trace", key="wi_kt", disabled=not others):
        other = c[1].selectbox("same program, other GPU or library", others, key="wi_kt_src")
        edits.append({"kind": "kernel_times", "source": kineto_path(session.traces()[other])})
        measured = other
    pick = c[1].selectbox(
        "measured side (a trace of the changed setup)", ["none", *others], key="wi_meas", disabled=not others
    )
    if pick != "none":
        measured = pick
    if c[2].checkbox("Host span speed-up, nested work included", key="wi_incl"):
        rx = c[2].text_input("span name regex", r"^enumerate\(DataLoader\)", key="wi_incl_rx")
        fac = c[2].number_input("factor", 0.01, 1e6, 10.0, key="wi_incl_f")
        edits.append({"kind": "speedup", "name": rx, "factor": fac, "inclusive": True})
    return edits, measured


@st.cache_data(max_entries=8, show_spinner=False)
def _measured(content_hash: str, paths: tuple[str, ...]):
    """The measured side simulated unchanged: its summary JSON (measured step, breakdown, critical
    path) and its events."""
    from engine.simulate import simulate

    trace = views.load_paths(paths)
    return simulate(trace).to_json(), trace.events


def show_measured(measured: str, res: dict, pred_events, window_ms: float) -> None:
    """Predicted (this trace, edited) against measured (the other trace): step, breakdown, critical
    path by kind, timelines side by side."""
    from engine.figures import compare as cfig
    from engine.figures import whatif as wfig

    entry = session.traces().get(measured)
    if entry is None:
        return
    m, m_events = _measured(entry["hash"], tuple(entry["paths"]))
    st.subheader(f"Predicted vs measured ({measured})")
    step = m["measured_iteration_ms"] or m["predicted_iteration_ms"]
    c = st.columns(3)
    c[0].metric("measured step ms", f"{step:.3f}")
    c[1].metric("predicted step ms", f"{res['predicted_iteration_ms']:.3f}")
    c[2].metric("error", f"{100 * (res['predicted_iteration_ms'] / step - 1):+.1f} %", delta_color="off")
    for rep in res.get("kernel_times", []):
        st.caption(
            f"kernel times: {100 * rep['matched_fraction']:.1f} % of {rep['gpu_tasks']:,} GPU tasks matched; "
            f"GPU time {rep['gpu_ms_before']:.3f} -> {rep['gpu_ms_after']:.3f} ms"
        )
    st.plotly_chart(
        wfig.breakdown_bars(m["breakdown"], res["breakdown"], (f"measured ({measured})", "predicted")),
        key="wi_meas_bd",
        width="stretch",
    )
    kinds = sorted(
        set((m.get("critical_path") or {}).get("by_kind", {}))
        | set((res.get("critical_path") or {}).get("by_kind", {}))
    )
    if kinds:
        st.dataframe(
            [
                {
                    "critical path (ms)": k,
                    "predicted": (res.get("critical_path") or {}).get("by_kind", {}).get(k, 0.0),
                    "measured trace": (m.get("critical_path") or {}).get("by_kind", {}).get(k, 0.0),
                }
                for k in kinds
            ],
            hide_index=True,
            key="wi_meas_cp",
        )
    st.plotly_chart(
        cfig.aligned_timelines(
            pred_events, m_events, ("predicted", f"measured ({measured})"), window_us=window_ms * 1e3
        ),
        key="wi_meas_tl",
        width="stretch",
    )


def device_report(res: dict) -> None:
    """The device retarget's per-class models and the catalog rows it used."""
    for rep in res.get("device", []):
        st.caption(md_escape(f"device: {rep['source']} ({rep['source_from']}) -> {rep['target']}; host {rep['host']}"))
        st.dataframe(
            [
                {"class": k, **{f: v.get(f) for f in ("model", "ratio", "ms_before", "ms_after", "fallback")}}
                for k, v in rep["classes"].items()
            ],
            hide_index=True,
            key=f"wi_dev_tbl_{rep['target']}",
        )
        st.caption(md_escape(json.dumps(rep["citations"])))
