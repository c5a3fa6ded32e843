"""Timeline figure: one lane per CPU thread and per GPU stream, microsecond-accurate.

Why not `px.timeline`: it converts to datetimes and rounds to milliseconds, while kernels last a
few µs. Small views use `go.Bar(base=start_us, x=dur_us, orientation="h")` (exact, with hover
per bar); big ones (the 105k-event HTA traces) use one Scattergl line trace per colour class,
each event a segment `[start, end, None]`, which WebGL draws at interactive speed. (Until issue
13: WebGL lines had no names, no click and no box select, so one bar timeline with level of
detail by window replaced them; see `level_of_detail`.) Nested events
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

from engine.trace.ranks import of_rank

if TYPE_CHECKING:
    import plotly.graph_objects as go

# Bars one SVG element each: in headless Chromium on this VM 4,000 bars with names took 13-27 s to
# draw (benchmarks/responsiveness_browser.py), 288 took ~1 s; level of detail keeps a window to this.
BAR_LIMIT = 1200
# Names are drawn only on bars at least this wide on screen (text layout is most of the draw cost).
LABEL_MIN_PX = 36.0
PLOT_PX = 1200.0
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
    ev = of_rank(ev, view.rank)
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


def level_of_detail(ev: pd.DataFrame, budget: int, bins: int = 240) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(events drawn one bar each, aggregate bars) for a prepared window.

    Why: an SVG bar per event stays interactive (hover, click, box select) up to a few thousand
    bars; a 200k-event window is reduced to the `budget` longest events (what is visible at
    this zoom) plus, per sub-row, one grey bar per 1/`bins` of the window covering the short
    events in it ("1,234 events: narrow the window"). Narrowing the window (the page's slider
    or a search hit) shows every event again: level of detail by window.
    """
    if len(ev) <= budget:
        return ev, ev.iloc[:0]
    dur = ev["dur_us"].to_numpy(float)
    order = np.argsort(-dur, kind="stable")
    keep = np.zeros(len(ev), bool)
    keep[order[:budget]] = True
    rest = ev[~keep]
    s = rest["start_us"].to_numpy(float)
    e = s + rest["dur_us"].to_numpy(float)
    lo, hi = float(ev["start_us"].min()), float((ev["start_us"] + ev["dur_us"]).max())
    width = max((hi - lo) / bins, 1e-9)
    b = np.floor((s - lo) / width).astype(np.int64)
    agg = (
        pd.DataFrame({"y": rest["y"].to_numpy(), "b": b, "s": s, "e": e})
        .groupby(["y", "b"], sort=False)
        .agg(start_us=("s", "min"), end_us=("e", "max"), count=("s", "size"))
        .reset_index()
    )
    agg["dur_us"] = agg["end_us"] - agg["start_us"]
    return ev[keep], agg


def timeline_figure(
    events: pd.DataFrame,
    view: TimelineView | None = None,
    *,
    origin_us: float | None = None,
    flow_from: int | None = None,
    height: int | None = None,
    title: str = "",
    search: str = "",
    shapes: dict[int, str] | None = None,
) -> go.Figure:
    """The timeline of `events` (the `Trace.events` table); arrows from `flow_from` to its kernels.

    One kind of timeline at every size (issue 13): SVG bars with names drawn when they fit,
    hover (name, duration, start, input shapes of the linked ET op via `shapes`), click and box
    select, x-only zoom (the y axis is fixed so lanes never hide), `search` (a regex on names)
    highlights its hits and dims the rest, and `level_of_detail` keeps big windows light.
    """
    import plotly.graph_objects as go

    view = view or TimelineView()
    ev = prepare(events, view, origin_us)
    origin = ev.attrs["origin_us"]
    lanes = ev.attrs["lanes"]
    fig = go.Figure()
    detail, agg = level_of_detail(ev, view.bar_limit)
    span = (
        view.end_us - view.start_us
        if view.start_us is not None and view.end_us is not None
        else (float((ev["start_us"] + ev["dur_us"]).max() - ev["start_us"].min()) if len(ev) else 1.0)
    )
    for tr in timeline_traces(detail, True, search=search, shapes=shapes, span_us=span):
        fig.add_trace(tr)
    if len(agg):
        fig.add_trace(aggregate_trace(agg))
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
    n_rows = int(ev["y"].max()) + 3 if len(ev) else 10
    fig.update_layout(
        barmode="overlay",
        height=height or max(320, 22 * n_rows + 110),
        margin=dict(l=10, r=10, t=60, b=40),
        title=dict(
            text=title or (f"{len(ev):,} events" + (f" · {len(detail):,} drawn, rest grouped" if len(agg) else "")),
            y=0.98,
            yanchor="top",
        ),
        clickmode="event+select",
        dragmode="zoom",
        xaxis=dict(
            title=f"µs since {origin:,.0f}",
            zeroline=False,
            range=[view.start_us, view.end_us] if view.start_us is not None and view.end_us is not None else None,
        ),
        yaxis=dict(tickvals=[-v for v in lanes.values()], ticktext=list(lanes.keys()), fixedrange=True),
        # legend below the plot: never under the modebar (toolbar) at the top right
        legend=dict(orientation="h", yanchor="top", y=-0.12 if n_rows < 30 else -0.04, xanchor="left", x=0.0),
        meta={
            "origin_us": origin,
            "bars": True,
            "drawn": len(detail),
            "grouped": int(agg["count"].sum()) if len(agg) else 0,
        },
    )
    return fig


def aggregate_trace(agg: pd.DataFrame, *, legend: bool = True):
    """Grey bars standing for many short events (see `level_of_detail`); not selectable ids."""
    import plotly.graph_objects as go

    counts = agg["count"].to_numpy()
    return go.Bar(
        base=agg["start_us"].to_numpy(),
        x=agg["dur_us"].to_numpy(),
        y=-agg["y"].to_numpy(),
        orientation="h",
        name="grouped short events",
        marker=dict(color="rgba(140,140,150,0.45)", line=dict(width=0)),
        showlegend=legend,
        width=0.85,
        customdata=np.stack([np.full(len(agg), None), counts], axis=1),
        hovertemplate="%{customdata[1]:,} short events<br>narrow the window to see them<extra></extra>",
    )


def _hover_data(part: pd.DataFrame, names: np.ndarray, shapes: dict[int, str] | None) -> np.ndarray:
    """customdata rows [ev, dur_us, start_us, shapes, name, ET op id or -1]: the event id first (selection reads
    customdata[0]); the duration is its own field, since a horizontal bar's hover `x` is its end."""
    n = len(part)
    shp = np.full(n, "", dtype=object)
    if shapes and "op_id" in part.columns:
        oid = part["op_id"].to_numpy()
        shp = np.array([shapes.get(int(o), "") if o == o and o is not None else "" for o in oid], dtype=object)
    cd = np.empty((n, 6), dtype=object)
    cd[:, 0] = part["ev"].to_numpy().astype(np.int64)
    cd[:, 1] = part["dur_us"].to_numpy(float)
    cd[:, 2] = part["start_us"].to_numpy(float)
    cd[:, 3] = shp
    cd[:, 4] = names
    cd[:, 5] = (
        part["op_id"].fillna(-1).to_numpy().astype(np.int64) if "op_id" in part.columns else np.full(n, -1, np.int64)
    )
    return cd


HOVER = (
    "<b>%{customdata[4]}</b><br>dur %{customdata[1]:,.3f} µs<br>start %{customdata[2]:,.3f} µs"
    "<br>%{customdata[3]}<extra>ev %{customdata[0]} · ET op %{customdata[5]}</extra>"
)


def timeline_traces(
    ev: pd.DataFrame,
    use_bars: bool = True,
    *,
    legend: bool = True,
    search: str = "",
    shapes: dict[int, str] | None = None,
    span_us: float | None = None,
) -> list:
    """Plotly bar traces (one per colour class) for prepared events (`prepare`). `use_bars` is
    kept for callers; big windows are reduced by `level_of_detail` before they get here."""
    import plotly.graph_objects as go

    hits = None
    if search:
        try:
            hits = ev["name"].astype(str).str.contains(search, case=False, regex=True).to_numpy()
        except Exception:  # noqa: BLE001 - re.error from a user's pattern: treat as a plain substring
            hits = ev["name"].astype(str).str.contains(search, case=False, regex=False).to_numpy()
    out = []
    lo = float(ev["start_us"].min()) if len(ev) else 0.0
    hi = float((ev["start_us"] + ev["dur_us"]).max()) if len(ev) else 1.0
    if span_us is None:
        span_us = max(hi - lo, 1e-9)
    px_per_us = PLOT_PX / max(span_us, 1e-9)
    for group, part in ev.groupby("group", sort=True, observed=True):
        color = GROUP_COLORS.get(group, "#999")
        names = part["name"].astype(str).to_numpy()
        # a name only where it fits, cut to the bar's width: no per-bar text fitting in the browser
        px = part["dur_us"].to_numpy(float) * px_per_us
        chars = (px / 6.5).astype(np.int64)
        text = [
            n if len(n) <= c else (n[: c - 1] + "…") if px_ >= LABEL_MIN_PX else ""
            for n, c, px_ in zip(names, chars, px)
        ]
        marker: dict = dict(color=color, line=dict(width=0))
        if hits is not None:
            h = hits[ev.index.get_indexer(part.index)] if len(part) else np.zeros(0, bool)
            marker["opacity"] = np.where(h, 1.0, 0.18)
            marker["line"] = dict(width=np.where(h, 1.5, 0.0), color="#111")
        out.append(
            go.Bar(
                base=part["start_us"].to_numpy(),
                x=part["dur_us"].to_numpy(),
                y=-part["y"].to_numpy(),
                orientation="h",
                name=group,
                marker=marker,
                showlegend=legend,
                legendgroup=group,
                customdata=_hover_data(part, names, shapes),
                width=0.85,
                text=text,
                textposition="inside",
                insidetextanchor="start",
                constraintext="none",
                textfont=dict(size=9, color="#fff"),
                hovertemplate=HOVER,
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
