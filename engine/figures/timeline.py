"""Timeline figure: one lane per CPU thread and per GPU stream, microsecond-accurate.

Why not `px.timeline`: it converts to datetimes and rounds to milliseconds, while kernels last a
few µs. Small views use `go.Bar(base=start_us, x=dur_us, orientation="h")` (exact, with hover
per bar); big ones (the 105k-event HTA traces) use one Scattergl line trace per colour class,
each event a segment `[start, end, None]`, which WebGL draws at interactive speed. Nested events
of one thread stack downward in sub-rows (like Perfetto) so children are not hidden by parents.

Rows are drawn downward as negative y (lane 0 on top) rather than with a reversed y axis,
which WebGL line traces do not draw correctly. Times on the x axis are `ts_us - origin_us` (origin = earliest event of the trace by default),
stored exactly: the figure's bar `base` equals `ts_us - origin_us` and `x` equals `dur_us`.
`customdata` carries the event row id `ev` (the `events.ev` column).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

if TYPE_CHECKING:
    import plotly.graph_objects as go

BAR_LIMIT = 4000
GROUP_COLORS = {
    "cpu_op": "#7c5cff",
    "kernel": "#f72585",
    "runtime": "#ffd166",
    "memory": "#06d6a0",
    "annotation": "#8d99ae",
    "python": "#4cc9f0",
    "other": "#adb5bd",
}


def _group(cat: str) -> str:
    if cat == "cpu_op":
        return "cpu_op"
    if cat == "kernel":
        return "kernel"
    if cat in ("cuda_runtime", "cuda_driver", "cuda_sync"):
        return "runtime"
    if cat.startswith("gpu_mem"):
        return "memory"
    if "annotation" in cat:
        return "annotation"
    if cat.startswith("python"):
        return "python"
    return "other"


@dataclass(kw_only=True, slots=True)
class TimelineView:
    """Window (relative to origin, µs), minimum duration filter, rank, and the bar/line switch."""

    start_us: float | None = None
    end_us: float | None = None
    min_dur_us: float = 0.0
    rank: int | None = None
    bar_limit: int = BAR_LIMIT
    max_depth: int = 6

    def __post_init__(self) -> None:
        if self.min_dur_us < 0:
            raise ValueError("min_dur_us must be >= 0")
        if self.start_us is not None and self.end_us is not None and self.end_us < self.start_us:
            raise ValueError("end_us must be >= start_us")


def lane_table(events: pd.DataFrame) -> pd.DataFrame:
    """Add `lane` (label), `is_gpu`, `group` columns; CPU lanes first, then GPU streams."""
    ev = events
    cats = ev["cat"].astype(str)
    is_gpu = cats.isin(["kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation"]).to_numpy()
    pid = ev["pid"].astype(str).reset_index(drop=True)
    tid = ev["tid"].astype(str).reset_index(drop=True)
    if "stream" in ev.columns:
        stream = ev["stream"].astype("Int64").astype(str).reset_index(drop=True)
        stream = stream.where(stream != "<NA>", tid)
    else:
        stream = tid
    lane = np.where(is_gpu, ("GPU " + pid + " stream " + stream).to_numpy(), ("CPU " + pid + " / " + tid).to_numpy())
    out = ev.assign(lane=lane, is_gpu=is_gpu, group=cats.map(_group).to_numpy())
    return out


def _stack_depth(start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Nesting depth of intervals sorted by start (a stack of open ends)."""
    depth = np.zeros(len(start), np.int64)
    stack: list[float] = []
    for i, (s, e) in enumerate(zip(start.tolist(), end.tolist())):
        while stack and stack[-1] <= s:
            stack.pop()
        depth[i] = len(stack)
        stack.append(e)
    return depth


def prepare(events: pd.DataFrame, view: TimelineView | None = None, origin_us: float | None = None) -> pd.DataFrame:
    """Filter (rank, window, min duration) and lay out: columns start_us, y, lane, group, ...

    Sub-row depth is computed before the duration filter, so a lane's layout does not jump
    when the filter changes.
    """
    view = view or TimelineView()
    ev = events
    if view.rank is not None and "rank" in ev.columns:
        ev = ev[ev["rank"] == view.rank]
    if origin_us is None:
        origin_us = float(ev["ts_us"].min()) if len(ev) else 0.0
    ev = lane_table(ev)
    ev = ev.assign(start_us=ev["ts_us"].to_numpy(float) - origin_us)
    if view.start_us is not None or view.end_us is not None:
        lo = -np.inf if view.start_us is None else view.start_us
        hi = np.inf if view.end_us is None else view.end_us
        s = ev["start_us"].to_numpy()
        ev = ev[(s + ev["dur_us"].to_numpy() >= lo) & (s <= hi)]
    ev = ev.sort_values(["lane", "start_us", "dur_us"], ascending=[True, True, False], kind="stable")
    depth = np.zeros(len(ev), np.int64)
    lanes = ev["lane"].to_numpy()
    s, d = ev["start_us"].to_numpy(), ev["dur_us"].to_numpy()
    bounds = np.flatnonzero(np.r_[True, lanes[1:] != lanes[:-1], True])
    for a, b in itertools.pairwise(bounds):
        depth[a:b] = _stack_depth(s[a:b], s[a:b] + d[a:b])
    ev = ev.assign(sub=np.minimum(depth, view.max_depth))
    if view.min_dur_us > 0:
        ev = ev[ev["dur_us"].to_numpy() >= view.min_dur_us]
    order = sorted(ev["lane"].unique(), key=lambda lane: (lane.startswith("GPU"), lane))
    rows = ev.groupby("lane", observed=True)["sub"].max().to_dict()
    base, y0 = {}, 0
    for lane in order:
        base[lane] = y0
        y0 += int(rows[lane]) + 1 + 1  # a spacer row between lanes
    y = ev["lane"].map(base).to_numpy(np.int64) + ev["sub"].to_numpy(np.int64)
    ev = ev.assign(y=y)
    ev.attrs["lanes"] = base
    ev.attrs["origin_us"] = origin_us
    return ev


def default_window(events: pd.DataFrame, max_events: int = 5000, origin_us: float | None = None) -> tuple[float, float]:
    """A first view (µs from origin) that a browser draws quickly: the first ProfilerStep when
    the trace has one, else the span of the first `max_events` events, ignoring whole-trace
    spans (the profiler's own "PyTorch Profiler" range) that would stretch the axis."""
    if len(events) == 0:
        return 0.0, 1.0
    ts = events["ts_us"].to_numpy(float)
    end = ts + events["dur_us"].to_numpy(float)
    origin = float(ts.min()) if origin_us is None else origin_us
    span = float(end.max()) - origin
    steps = events[events["name"].astype(str).str.startswith("ProfilerStep#")]
    if len(steps):
        first = steps.sort_values("ts_us").iloc[0]
        return float(first["ts_us"]) - origin, float(first["ts_us"] + first["dur_us"]) - origin
    if len(events) <= max_events:
        return 0.0, max(span, 1.0)
    small = events["dur_us"].to_numpy(float) < 0.5 * span
    order = np.argsort(ts[small], kind="stable")[:max_events]
    lo, hi = float(ts[small][order].min()), float(end[small][order].max())
    return lo - origin, max(hi - origin, lo - origin + 1.0)


def timeline_figure(
    events: pd.DataFrame,
    view: TimelineView | None = None,
    *,
    origin_us: float | None = None,
    flow_from: int | None = None,
    height: int | None = None,
    title: str = "",
) -> go.Figure:
    """The timeline of `events` (the `Trace.events` table); arrows from `flow_from` to its kernels."""
    import plotly.graph_objects as go

    view = view or TimelineView()
    ev = prepare(events, view, origin_us)
    origin = ev.attrs["origin_us"]
    lanes = ev.attrs["lanes"]
    fig = go.Figure()
    use_bars = len(ev) <= view.bar_limit
    for tr in timeline_traces(ev, use_bars):
        fig.add_trace(tr)
    if flow_from is not None:
        for (x0, y0), (x1, y1) in flow_arrows(events, ev, flow_from):
            fig.add_annotation(
                x=x1,
                y=y1,
                ax=x0,
                ay=y0,
                xref="x",
                yref="y",
                axref="x",
                ayref="y",
                showarrow=True,
                arrowhead=3,
                arrowwidth=1.6,
                arrowcolor="#ffd166",
            )
    fig.update_layout(
        barmode="overlay",
        height=height or max(320, 16 * (max(ev["y"].max(), 0) + 3 if len(ev) else 10)),
        margin=dict(l=10, r=10, t=30, b=30),
        title=title or f"{len(ev):,} events",
        clickmode="event+select",
        xaxis=dict(
            title=f"µs since {origin:,.0f}",
            zeroline=False,
            range=[view.start_us, view.end_us] if view.start_us is not None and view.end_us is not None else None,
        ),
        yaxis=dict(tickvals=[-v for v in lanes.values()], ticktext=list(lanes.keys())),
        legend=dict(orientation="h", yanchor="bottom", y=1.0, xanchor="right", x=1.0),
        meta={"origin_us": origin, "bars": use_bars},
    )
    return fig


def timeline_traces(ev: pd.DataFrame, use_bars: bool, *, legend: bool = True) -> list:
    """Plotly traces for prepared events (`prepare`): bars (exact) or WebGL segments (fast)."""
    import plotly.graph_objects as go

    out = []
    for group, part in ev.groupby("group", sort=True, observed=True):
        color = GROUP_COLORS.get(group, "#999")
        names = part["name"].astype(str).to_numpy()
        if use_bars:
            out.append(
                go.Bar(
                    base=part["start_us"].to_numpy(),
                    x=part["dur_us"].to_numpy(),
                    y=-part["y"].to_numpy(),
                    orientation="h",
                    name=group,
                    marker=dict(color=color, line=dict(width=0)),
                    showlegend=legend,
                    legendgroup=group,
                    customdata=part["ev"].to_numpy(),
                    width=0.85,
                    text=names,
                    textposition="none",
                    hovertemplate="%{text}<br>start %{base:.3f} µs<br>dur %{x:.3f} µs<br>ev %{customdata}<extra></extra>",
                )
            )
        else:
            n = len(part)
            xs = np.empty(3 * n)
            xs[0::3] = part["start_us"].to_numpy()
            xs[1::3] = xs[0::3] + part["dur_us"].to_numpy()
            xs[2::3] = np.nan
            ys = -np.repeat(part["y"].to_numpy(np.float64), 3)
            ys[2::3] = np.nan
            # Hover shows the event id only: repeating 3 names per event would triple the payload
            # (the 75k-event HTA trace: ~20 MB instead of ~6 MB); the selected event's details are
            # shown by the page.
            out.append(
                go.Scattergl(
                    x=xs,
                    y=ys,
                    mode="lines",
                    name=group,
                    line=dict(color=color, width=6),
                    showlegend=legend,
                    legendgroup=group,
                    customdata=np.repeat(part["ev"].to_numpy(np.int32), 3),
                    connectgaps=False,
                    hovertemplate=group + "<br>%{x:.3f} µs<br>ev %{customdata}<extra></extra>",
                )
            )
    return out


def flow_arrows(
    events: pd.DataFrame, laid: pd.DataFrame, ev_id: int
) -> list[tuple[tuple[float, float], tuple[float, float]]]:
    """Arrows from CPU launches to the GPU work they launched, for one selected event.

    A runtime launch links to its kernels by `correlation`; a cpu_op links through the launches
    nested inside it (same pid/tid, inside its time range). Coordinates are in `laid` (the
    output of `prepare`); events outside the current view are skipped.
    """
    if "correlation" not in events.columns:
        return []
    sel = events[events["ev"] == ev_id]
    if sel.empty:
        return []
    row = sel.iloc[0]
    cat = str(row["cat"])
    if cat == "cpu_op" or "annotation" in cat or cat.startswith("python"):
        same = events[
            (events["pid"] == row["pid"])
            & (events["tid"] == row["tid"])
            & events["cat"].isin(["cuda_runtime", "cuda_driver"])
        ]
        t0, t1 = row["ts_us"], row["ts_us"] + row["dur_us"]
        launches = same[(same["ts_us"] >= t0) & (same["ts_us"] <= t1) & same["correlation"].notna()]
    elif cat in ("kernel", "gpu_memcpy", "gpu_memset"):
        launches = events[
            (events["correlation"] == row["correlation"]) & events["cat"].isin(["cuda_runtime", "cuda_driver"])
        ]
    else:
        launches = sel[sel["correlation"].notna()]
    if launches.empty:
        return []
    gpu = events[
        events["cat"].isin(["kernel", "gpu_memcpy", "gpu_memset"])
        & events["correlation"].isin(launches["correlation"].dropna().tolist())
    ]
    pos = laid.set_index("ev")[["start_us", "y"]]
    out = []
    for _, k in gpu.iterrows():
        src = launches[launches["correlation"] == k["correlation"]]
        if src.empty or k["ev"] not in pos.index or src.iloc[0]["ev"] not in pos.index:
            continue
        a, b = pos.loc[src.iloc[0]["ev"]], pos.loc[k["ev"]]
        out.append(((float(a["start_us"]), -float(a["y"])), (float(b["start_us"]), -float(b["y"]))))
    return out
