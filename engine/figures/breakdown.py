"""Where the time goes: tables (pure pandas) and bar figures built from them.

Tables are separate from figures so the UI can show the same numbers in a sortable
`st.dataframe` (and select rows from it) and tests can check them against the trace.
Operator time comes from Kineto `cpu_op` events when the trace has them (the measured truth),
else from the ET-linked `k_dur_us`; GPU time from kernel/memcpy/memset events.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

if TYPE_CHECKING:
    import plotly.graph_objects as go

GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")


def self_time(events: pd.DataFrame) -> np.ndarray:
    """Exclusive (self) µs of every event, aligned with `events` rows: its duration minus the
    time of the events directly nested in it on the same thread (GPU: same stream).

    Why: summing inclusive durations counts a nested op once per ancestor (a ProfilerStep,
    its module annotation, the aten op and the aten op it calls), so category and name totals
    exceeded the step. Self times of a lane add up to its busy time.
    """
    n = len(events)
    if n == 0:
        return np.zeros(0)
    start = events["ts_us"].to_numpy(float)
    dur = np.nan_to_num(events["dur_us"].to_numpy(float))
    lane_cols = [c for c in ("rank", "pid", "tid", "stream") if c in events.columns]
    lane = pd.MultiIndex.from_frame(events[lane_cols].astype(str)).codes if lane_cols else [np.zeros(n, np.int64)]
    lane_id = np.zeros(n, np.int64)
    for codes in lane:
        lane_id = lane_id * (int(np.max(codes)) + 2 if len(codes) else 1) + np.asarray(codes, np.int64)
    order = np.lexsort((-dur, start, lane_id))
    child = np.zeros(n)
    stack: list[tuple[float, int]] = []
    prev_lane = None
    for i in order.tolist():
        ln = lane_id[i]
        if ln != prev_lane:
            stack, prev_lane = [], ln
        s, e = start[i], start[i] + dur[i]
        while stack and stack[-1][0] <= s:
            stack.pop()
        if stack:
            pe, p = stack[-1]
            child[p] += min(e, pe) - s
        stack.append((e, i))
    return np.maximum(dur - child, 0.0)


def time_by(events: pd.DataFrame, cat: str | tuple[str, ...] = "cpu_op", key: str = "name") -> pd.DataFrame:
    """Total/mean duration and count of `events` of category `cat`, grouped by `key`, sorted desc."""
    cats = (cat,) if isinstance(cat, str) else cat
    mask = events["cat"].astype(str).isin(cats).to_numpy()
    ev = events[mask]
    ev = ev.assign(self_us=self_time(events)[mask])
    g = ev.groupby(ev[key].astype(str), observed=True)
    out = pd.DataFrame(
        {
            "total_us": g["dur_us"].sum(),
            "self_us": g["self_us"].sum(),
            "count": g.size(),
            "mean_us": g["dur_us"].mean(),
        }
    )
    total = float(out["total_us"].sum())
    out["share_pct"] = 100.0 * out["total_us"] / total if total > 0 else 0.0
    out = out.sort_values("total_us", ascending=False)
    out.index.name = key
    return out.reset_index()


def op_time_by(ops: pd.DataFrame, key: str = "category", time_col: str = "k_dur_us") -> pd.DataFrame:
    """ET-linked time of ops grouped by `key` (category, phase, name, module).

    Only call-tree leaves (no children) are counted, so nested ops are not counted twice."""
    leaves = ops[ops["n_children"] == 0] if "n_children" in ops.columns else ops
    t = leaves[time_col].fillna(0.0) if time_col in leaves.columns else pd.Series(0.0, index=leaves.index)
    g = t.groupby(leaves[key].astype(str)).agg(["sum", "size"])
    out = g.rename(columns={"sum": "total_us", "size": "count"}).sort_values("total_us", ascending=False)
    out.index.name = key
    return out.reset_index()


def _union_busy(start: np.ndarray, end: np.ndarray) -> float:
    order = np.argsort(start, kind="stable")
    busy, cur_s, cur_e = 0.0, None, None
    for s, e in zip(start[order].tolist(), end[order].tolist()):
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                busy += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    if cur_e is not None:
        busy += cur_e - cur_s
    return busy


def gpu_idle(events: pd.DataFrame) -> pd.DataFrame:
    """Per GPU stream: span (first start to last end), busy (union of GPU work) and idle µs."""
    ev = events[events["cat"].astype(str).isin(GPU_CATS)]
    rows = []
    for (pid, tid), part in ev.groupby([ev["pid"].astype(str), ev["tid"].astype(str)], observed=True):
        s = part["ts_us"].to_numpy(float)
        e = s + part["dur_us"].to_numpy(float)
        span = float(e.max() - s.min())
        busy = _union_busy(s, e)
        rows.append(
            {
                "gpu": pid,
                "stream": tid,
                "span_us": span,
                "busy_us": busy,
                "idle_us": span - busy,
                "idle_pct": 100.0 * (span - busy) / span if span > 0 else 0.0,
                "events": len(part),
            }
        )
    return pd.DataFrame(rows, columns=["gpu", "stream", "span_us", "busy_us", "idle_us", "idle_pct", "events"])


def top_ops(ops: pd.DataFrame, n: int = 25, time_col: str | None = None) -> pd.DataFrame:
    """The `n` ET ops with the most linked time (GPU if known, else CPU): one row per op id."""
    if time_col is None:
        time_col = (
            "gpu_dur_us" if "gpu_dur_us" in ops.columns and ops["gpu_dur_us"].fillna(0).gt(0).any() else "k_dur_us"
        )
    cols = [c for c in ("id", "name", "category", "phase", "module", "k_dur_us", "gpu_dur_us") if c in ops.columns]
    t = ops[cols].copy()
    t["name"] = t["name"].astype(str)
    if time_col not in t.columns:
        return t.head(0)
    return t[t[time_col].fillna(0) > 0].nlargest(n, time_col).reset_index(drop=True)


def bar_figure(
    table: pd.DataFrame, key: str, value: str = "total_us", *, top: int = 20, title: str = "", ids: str | None = None
) -> go.Figure:
    """Horizontal bars of the `top` rows of `table` (largest first); customdata = `ids` column or key."""
    import plotly.graph_objects as go

    t = table.head(top).iloc[::-1]
    custom = t[ids].to_numpy() if ids and ids in t.columns else t[key].astype(str).to_numpy()
    fig = go.Figure(
        go.Bar(
            x=t[value].to_numpy(float),
            y=t[key].astype(str).to_numpy(),
            orientation="h",
            customdata=custom,
            marker_color="#7c5cff",
            hovertemplate="%{y}<br>%{x:,.1f} µs<extra></extra>",
        )
    )
    fig.update_layout(
        height=max(260, 22 * len(t) + 80),
        margin=dict(l=10, r=10, t=40, b=30),
        title=title,
        xaxis_title=value.replace("_us", " (µs)"),
        clickmode="event+select",
    )
    return fig


def idle_figure(idle: pd.DataFrame) -> go.Figure:
    """Stacked busy/idle bars per GPU stream."""
    import plotly.graph_objects as go

    label = ("GPU " + idle["gpu"].astype(str) + " / " + idle["stream"].astype(str)).to_numpy()
    fig = go.Figure(
        [
            go.Bar(y=label, x=idle["busy_us"], name="busy", orientation="h", marker_color="#f72585"),
            go.Bar(y=label, x=idle["idle_us"], name="idle", orientation="h", marker_color="#555"),
        ]
    )
    fig.update_layout(
        barmode="stack",
        height=max(200, 30 * len(idle) + 100),
        title="GPU stream busy vs idle",
        margin=dict(l=10, r=10, t=40, b=30),
        xaxis_title="µs",
    )
    return fig


def top_ops_figure(summary: dict, top: int = 12) -> go.Figure:
    """Bars of `summarize()`'s top ops by time: the trace at a glance on the Traces page."""
    rows = summary.get("top_ops") or []
    t = (
        pd.DataFrame(rows, columns=["name", "count", "dur_us"])
        if rows
        else pd.DataFrame({"name": [], "count": [], "dur_us": []})
    )
    return bar_figure(
        t.sort_values("dur_us", ascending=False),
        "name",
        "dur_us",
        top=top,
        title=f"Top {min(top, len(t))} operators by time",
    )
