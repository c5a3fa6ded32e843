"""Compare page: original vs replay (aligned timelines, e2e error, per-op errors, metric curves),
or any two loaded traces (e.g. the HTA control vs test runs)."""

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson
import pandas as pd
import streamlit as st
from streamlit.delta_generator import DeltaGenerator

from app import session, views, workspace
from app.markup import md_escape
from engine.errors import TraceError
from engine.figures import compare as cfig

st.title("Compare")
mode = st.radio("Compare", ["original vs replay", "trace vs trace"], horizontal=True, key="cmp_mode")


def _fmt(v, spec=".3f", suffix=""):
    return "—" if v is None or (isinstance(v, float) and v != v) else f"{v:{spec}}{suffix}"


def _pairs_metric(col, m: dict) -> None:
    """The headline of pairing: ops paired with an original op (by id or provenance), and apart,
    those whose original time is unknown (an ET alone has no times), so the count agrees with
    the per-op table."""
    ins = int(m.get("inserted") or 0)
    paired, unknown = int(m.get("paired", m.get("matched", 0))), int(m.get("times_unknown") or 0)
    col.metric(
        "ops paired",
        f"{paired} / {int(m.get('replay_ops', 0)) - ins}",
        f"{unknown} times unknown (ET only)" if unknown else None,
        delta_color="off",
    )


def _cross_gpu_tables(diff, a: str, b: str) -> None:
    """GPU time per kernel class and per paired op type, each with its direction (issue 32)."""
    if len(diff.by_class):
        st.subheader(md_escape(f"GPU time by kernel class: {b} against {a}"))
        st.markdown(" · ".join(f"**{md_escape(d)}**" for d in diff.by_class["direction"].head(4)))
        st.dataframe(diff.by_class.round({"a_us": 1, "b_us": 1, "ratio": 3}), hide_index=True, key="tt_classes")
    if len(diff.by_op_type):
        p = diff.op_pairs
        st.subheader("GPU time by operator, ops paired in launch order on name and input shapes")
        st.caption(
            f"{p['paired']:,} ops paired of {p['a_ops']:,} ({a}) and {p['b_ops']:,} ({b}) that launched GPU work; "
            "vendor kernels never pair by name, the operators that launched them do. ratio = "
            f"{b} / {a}: over 1, {b} is slower."
        )
        st.dataframe(diff.by_op_type.round({"a_us": 1, "b_us": 1, "ratio": 3}), hide_index=True, key="tt_op_types")


if mode == "original vs replay":
    runs = workspace.replay_runs()
    if not runs:
        st.info("No replay yet: run one on the Replay page.")
        st.stop()
    labels = [
        f"job {r['job']}: {r['trace']} · {r['target']} · {r['device']} · {_fmt(r.get('median_ms'))} ms"
        for i, r in enumerate(runs)
    ]
    pick = st.selectbox(
        "Replay run",
        range(len(runs)),
        index=len(runs) - 1,
        format_func=lambda i: labels[i],
        # keyed by the newest run: a replay that just finished is what Compare opens on (issue 21)
        key=f"cmp_run:{runs[-1]['job']}",
    )
    run = runs[pick]
    if run["trace"] not in session.traces():
        st.error(f"original trace {md_escape(repr(run['trace']))} is no longer loaded")
        st.stop()
    original = session.get_trace(run["trace"])
    try:
        report, cmp = views.replay_compare(tuple(session.traces()[run["trace"]]["paths"]), run["path"])
    except TraceError as exc:
        st.error(md_escape(exc))
        st.stop()
    e2e = cmp.e2e
    c: Sequence[DeltaGenerator] = st.columns(4)
    c[0].metric("original ms / iteration", _fmt(e2e.get("original_ms")))
    c[1].metric("replay ms / iteration", _fmt(e2e.get("replay_ms")))
    c[2].metric(
        "end-to-end error",
        _fmt(
            100 * e2e["error"] if e2e.get("error") == e2e.get("error") and e2e.get("error") is not None else None,
            ".1f",
            "%",
        ),
    )
    ins = int(cmp.matching.get("inserted") or 0)  # ops the composition added: no original to match
    _pairs_metric(c[3], cmp.matching)
    per_rank = ", ".join(
        "rank {}: {}".format(b["rank"], b.get("paired", b["matched"])) for b in cmp.matching.get("by_rank") or []
    )
    st.caption(
        f"ops paired by {cmp.matching.get('by', 'node id')}"
        + (f" on every rank ({per_rank})" if per_rank else "")
        + (f"; {ins} ops inserted by the composition (e.g. TP all-reduces) have no original" if ins else "")
        + (
            " (the composed ET's provenance: original node id, segment, repeat)"
            if cmp.matching.get("by") == "provenance"
            else ""
        )
        + "; ops whose names differ are never paired"
    )
    st.caption(f"original time from {md_escape(e2e.get('original_source'))}; per-op time basis: {cmp.time_basis}")
    if run["target"] != "whole trace":
        m = cmp.matching
        st.info(
            f"This replay ran a {md_escape(run['target'])}, not the whole step: the end-to-end error above compares it "
            "with the full original iteration. Like with like, over the ops both sides ran:"
        )
        c = st.columns(3)
        c[0].metric("matched ops, original ms", _fmt(m.get("original_sum_us", float("nan")) / 1e3))
        c[1].metric("matched ops, replay ms", _fmt(m.get("replay_sum_us", float("nan")) / 1e3))
        err = m.get("sum_error")
        c[2].metric("matched-ops error", _fmt(None if err is None or err != err else 100 * err, ".1f", "%"))
    for w in cmp.warnings:
        st.warning(md_escape(w))
    cov = cmp.coverage
    st.markdown(
        f"**Coverage**: selected {cov.get('selected', 0)}, replayed {cov.get('replayed', 0)}, "
        f"substituted {cov.get('substituted', 0)}, skipped {cov.get('skipped', 0)}"
        + (
            f" ({md_escape(', '.join(f'{k}: {v}' for k, v in cov.get('by_reason', {}).items()))})"
            if cov.get("by_reason")
            else ""
        )
    )
    if report.ranks:
        from engine.figures import ranks as rfig

        st.plotly_chart(
            rfig.ranks_side_by_side(
                rfig.original_rank_ms(original, views.rank_medians(tuple(session.traces()[run["trace"]]["paths"]))),
                report.to_json(),
            ),
            key="cmp_ranks",
            width="stretch",
        )
    tab_t, tab_b, tab_m, tab_o = st.tabs(["Timelines", "Time by op type", "Metrics", "Per-op table"])
    with tab_t:
        kp = report.kineto_path
        if original.has_kineto and kp and Path(kp).exists():
            replay_trace = views.load_paths((kp,))
            win = st.number_input(
                "Window (µs from each start)",
                100.0,
                value=float(max(1000.0, (e2e.get("original_ms") or 1) * 1000 * 1.2)),
                key="cmp_window",
            )
            st.plotly_chart(
                cfig.aligned_timelines(original.events, replay_trace.events, window_us=float(win)),
                key="cmp_timelines",
                width="stretch",
            )
        else:
            st.info("Aligned timelines need the original's Kineto trace and the replay's own Kineto trace.")
    with tab_b:
        if len(cmp.by_name):
            st.plotly_chart(
                cfig.time_by_bars(
                    cmp.by_name, "name", "original_us", "replay_us", title="Time by operator type (matched ops)"
                ),
                key="cmp_by_name",
                width="stretch",
            )
            st.plotly_chart(
                cfig.time_by_bars(cmp.by_category, "category", "original_us", "replay_us", title="Time by category"),
                key="cmp_by_cat",
                width="stretch",
            )
        else:
            st.info("No matched ops with original times.")
    with tab_m:
        if len(cmp.curves) and len(cmp.curves.columns) > 1:
            st.plotly_chart(cfig.metric_curves(cmp.curves), key="cmp_curves", width="stretch")
            st.dataframe(pd.DataFrame(cmp.metrics.get("shared", {})).T, key="cmp_metric_table")
        else:
            st.info("No utilization metrics shared by the original capture and the replay.")
    with tab_o:
        per = cmp.per_op.drop(columns=["op_id", "name"], errors="ignore").sort_values(
            "error", ascending=False, na_position="last"
        )
        st.dataframe(
            per,
            hide_index=True,
            key="cmp_per_op",
            column_config={"error": st.column_config.NumberColumn("error", format="percent")},
        )
    st.download_button(
        "Download comparison (JSON)",
        orjson.dumps(cmp.to_json(), option=orjson.OPT_INDENT_2),
        file_name="comparison.json",
        mime="application/json",
        key="cmp_dl",
    )
else:
    names = list(session.traces())
    if len(names) < 2:
        st.info(
            "Load two traces on the Traces page (e.g. /work/shared/traces/hta_trace_diff/control.json.gz "
            "and test.json.gz)."
        )
        st.stop()
    c = st.columns(2)
    for k in ("cmp_a", "cmp_b"):  # picks restored from an earlier visit or reload, if still loaded
        if k in st.session_state and st.session_state[k] not in names:
            del st.session_state[k]
    start_a: dict[str, Any] = {} if "cmp_a" in st.session_state else {"index": 0}  # a restored pick wins
    start_b: dict[str, Any] = {} if "cmp_b" in st.session_state else {"index": 1}
    a = c[0].selectbox("Trace A", names, key="cmp_a", **start_a)
    b = c[1].selectbox("Trace B", names, key="cmp_b", **start_b)
    ta, tb = session.get_trace(a), session.get_trace(b)
    pa, pb = tuple(session.traces()[a]["paths"]), tuple(session.traces()[b]["paths"])
    keep = st.checkbox("Show python frames and profiler bookkeeping", key="tt_bookkeeping")
    diff = views.trace_diff(pa, pb, a, b, keep)
    e = diff.e2e
    c = st.columns(3)
    c[0].metric(f"{md_escape(a)} ms / iteration", _fmt(e.get("a_ms")))
    c[1].metric(f"{md_escape(b)} ms / iteration", _fmt(e.get("b_ms")))
    c[2].metric(
        f"{b} against {a}",
        diff.headline.replace(" on the step", "").removeprefix(f"{b} ") if diff.headline else "—",
        _fmt(100 * e["error"] if e.get("error") is not None and e.get("error") == e.get("error") else None, ".1f", "%"),
        delta_color="off",
    )
    for w in diff.warnings:
        st.warning(md_escape(w))
    _cross_gpu_tables(diff, a, b)
    if len(diff.by_category):
        st.plotly_chart(
            cfig.time_by_bars(
                diff.by_category, "cat", "self_us_a", "self_us_b", (a, b), title="Self time by event category"
            ),
            key="tt_cat",
            width="stretch",
        )
        st.plotly_chart(
            cfig.time_by_bars(
                diff.by_name, "name", "self_us_a", "self_us_b", (a, b), title="Self time by event name (exclusive)"
            ),
            key="tt_name",
            width="stretch",
        )
        # the two timelines aligned by step (issue 32): each side from its step's start, or from the
        # step's first GPU work, so the kernels of two GPUs line up; from each start without steps
        c = st.columns([1, 1, 1])
        n_steps = min(views.step_count(pa), views.step_count(pb))
        step = (
            c[0].selectbox("Align at step", range(n_steps), format_func=lambda i: f"step {i + 1}", key="tt_step")
            if n_steps
            else 0
        )
        at = c[1].radio(
            "Align at", ["step start", "first GPU work"], horizontal=True, key="tt_align", disabled=not n_steps
        )
        al = [
            cfig.step_alignment(t.events, int(step or 0), "gpu" if at == "first GPU work" else "step") for t in (ta, tb)
        ]
        aligned = all(x is not None for x in al)
        longest = max(x[1] for x in al) if aligned else 20000.0  # type: ignore[index]
        # a new alignment (traces, step or anchor) starts from its own window, the longer step,
        # unless the user typed a window of their own
        anchor, auto = [a, b, aligned, at, step], float(max(longest, 100.0))
        prev = st.session_state.get("tt_window_for") or [None, None]
        if prev[0] != anchor:
            if st.session_state.get("tt_window") in (None, prev[1]):
                st.session_state["tt_window"] = auto
            st.session_state["tt_window_for"] = [anchor, auto]
        win = c[2].number_input(
            "Window (µs from each aligned start)" if aligned else "Window (µs from each start)",
            100.0,
            key="tt_window",
        )
        ea, eb = views.shown_events(pa, keep), views.shown_events(pb, keep)
        tfig = cfig.aligned_timelines(
            ea,
            eb,
            (a, b),
            window_us=float(win),
            origins_us=(al[0][0], al[1][0]) if aligned else (None, None),  # type: ignore[index]
            notes=(al[0][2], al[1][2]) if aligned else ("", ""),  # type: ignore[index]
        )
        st.plotly_chart(tfig, key="tt_timelines", width="stretch")
        if not aligned:
            st.caption("No ProfilerStep in one of the traces: both timelines run from their own start.")
        st.dataframe(diff.by_name, hide_index=True, key="tt_table")
    if len(diff.ops_by_name):
        st.subheader("ET operator counts")
        st.dataframe(diff.ops_by_name, hide_index=True, key="tt_ops")
