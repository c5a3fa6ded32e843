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

from engine.figures.flows import flow_arrows
from engine.figures.lanes import (
    BUSY_GAP_PX,
    busy_spans,
    busy_trace,
    flow_trace,
    python_free_depth,
    stack_depth,
    window_flows,
)
from engine.figures.style import AGGREGATE, BAR_TEXT, GROUP_COLORS, HIGHLIGHT, SEARCH_OUTLINE, UNKNOWN
from engine.trace.ranks import of_rank
from engine.trace.steps import step_spans
from engine.trace.vocab import GPU_ACTIVITY_CATS
from engine.trace.vocab import GPU_CATS as GPU_WORK_CATS

if TYPE_CHECKING:
    import plotly.graph_objects as go

# Bars one SVG element each: in headless Chromium on this VM 4,000 bars with names took 13-27 s to
# draw (benchmarks/responsiveness_browser.py); switching Explore to the ResNet timeline took 3.1 s
# with 1,200 bars and 1.9 s with 300 (load ~10, CPU-profiled: native layout/paint of the SVG and
# plotly.js); the control trace's first window took 1.1 s with 600 (load ~2). Level of detail keeps
# a window to this.
BAR_LIMIT = 400
# Events narrower than this on screen go into the grey grouped bars when a window is over budget.
MIN_BAR_PX = 0.5
# Names are drawn only on bars at least this wide on screen (text layout is most of the draw cost).
LABEL_MIN_PX = 36.0
PLOT_PX = 1200.0
# Sub-rows a thread may nest (a TimeSformer thread with python stacks nests 53 deep; until issue 32
# rows past 6 were clamped onto row 6, so every aten op and runtime call hid under python frames).
FULL_DEPTH = 256


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
    max_depth: int = FULL_DEPTH
    # python_function frames left out: aten ops and runtime calls rise to their own depth
    hide_python: bool = False
    # lane labels ("CPU pid / tid") drawn folded: their top-level events only, one row
    collapsed: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.min_dur_us < 0:
            raise ValueError("min_dur_us must be >= 0")
        if self.start_us is not None and self.end_us is not None and self.end_us < self.start_us:
            raise ValueError("end_us must be >= start_us")


GPU_CATS = GPU_ACTIVITY_CATS  # rows drawn on GPU stream lanes (work and GPU annotations)


def lane_table(events: pd.DataFrame) -> pd.DataFrame:
    """Add `lane` (label), `lane_code` (int), `is_gpu`, `group` columns; CPU lanes first, then GPU streams.

    Vectorised over the distinct (cat) and (pid, tid, stream) values: string work is done once
    per distinct lane, not per event (a 100k-event trace has a handful of lanes)."""
    ev = events
    n = len(ev)
    cat_codes, cat_uniq = pd.factorize(ev["cat"], use_na_sentinel=False)
    cat_names = [str(c) for c in cat_uniq]
    is_gpu = np.isin(np.asarray(cat_names, dtype=object), GPU_CATS)[cat_codes] if n else np.zeros(0, bool)
    group = np.asarray([_group(c) for c in cat_names], dtype=object)[cat_codes] if n else np.zeros(0, object)
    pid_codes, pid_uniq = pd.factorize(ev["pid"], use_na_sentinel=False)
    tid_codes, tid_uniq = pd.factorize(ev["tid"], use_na_sentinel=False)
    if "stream" in ev.columns:
        st_codes, st_uniq = pd.factorize(ev["stream"].astype("Int64"), use_na_sentinel=True)
    else:
        st_codes, st_uniq = np.full(n, -1, np.int64), []
    use_stream = is_gpu & (st_codes >= 0)
    # one int key per lane: (is_gpu, pid, stream or tid)
    second = np.where(use_stream, st_codes, len(st_uniq) + tid_codes).astype(np.int64)
    width = len(st_uniq) + len(tid_uniq) + 1
    key = (is_gpu.astype(np.int64) * (len(pid_uniq) + 1) + pid_codes) * width + second
    lane_codes, lane_keys = pd.factorize(key)
    labels = []
    for k in np.asarray(lane_keys, dtype=np.int64).tolist():
        gpu, rest = divmod(k, (len(pid_uniq) + 1) * width)
        pc, sc = divmod(rest, width)
        pid = str(pid_uniq[pc])
        if gpu:
            sub = str(int(st_uniq[sc])) if sc < len(st_uniq) else str(tid_uniq[sc - len(st_uniq)])
            labels.append(f"GPU {pid} stream {sub}")
        else:
            labels.append(f"CPU {pid} / {tid_uniq[sc - len(st_uniq)]}")
    # one lane per label: a GPU annotation without a stream id (tid 7) and the kernels of stream 7
    # were two lanes with one name, so one tick label hid the other (the kernel row had none)
    label_codes, uniq = pd.factorize(np.asarray(labels, dtype=object))
    lane_codes = label_codes[lane_codes] if n else lane_codes
    lane = np.asarray(uniq, dtype=object)[lane_codes] if n else np.zeros(0, object)
    return ev.assign(lane=lane, lane_code=lane_codes.astype(np.int64), is_gpu=is_gpu, group=group)


def lay_out(
    events: pd.DataFrame,
    rank: int | None = None,
    origin_us: float | None = None,
    max_depth: int = FULL_DEPTH,
    *,
    with_python_free: bool = False,
) -> pd.DataFrame:
    """Once per trace and rank: lanes, colour groups, `start_us` and nesting sub-rows (`sub`), sorted
    by lane and start. `prepare` only slices it per window.

    Why: laying out a 100k-event trace (lane labels, a stack walk per lane) took ~0.4 s, and it was
    redone on every window, filter or click. The sub-row of an event does not depend on the window
    (its enclosing events overlap any window it is in), so it is computed once over the whole rank;
    a lane's layout therefore never jumps when the window or the duration filter changes.
    `with_python_free` adds `sub_nopy`, the sub-row with python frames folded (a second stack
    walk: the dashboard's cached layout has it; `prepare` computes it when asked without it).
    """
    ev = of_rank(events, rank)
    if origin_us is None:
        origin_us = float(ev["ts_us"].min()) if len(ev) else 0.0
    ev = lane_table(ev)
    ev = ev.assign(start_us=ev["ts_us"].to_numpy(float) - origin_us)
    order = np.lexsort((-ev["dur_us"].to_numpy(float), ev["start_us"].to_numpy(), ev["lane_code"].to_numpy()))
    ev = ev.iloc[order]
    depth = np.zeros(len(ev), np.int64)
    lanes = ev["lane_code"].to_numpy()
    s, d = ev["start_us"].to_numpy(), ev["dur_us"].to_numpy()
    bounds = np.flatnonzero(np.r_[True, lanes[1:] != lanes[:-1], True])
    for a, b in itertools.pairwise(bounds):
        depth[a:b] = stack_depth(s[a:b], s[a:b] + d[a:b])
    ev = ev.assign(sub=np.minimum(depth, max_depth))
    if with_python_free:
        ev = ev.assign(sub_nopy=np.minimum(python_free_depth(ev), max_depth))
    ev.attrs = {"origin_us": origin_us, "rank": rank, "max_depth": max_depth}
    return ev


def prepare(
    events: pd.DataFrame,
    view: TimelineView | None = None,
    origin_us: float | None = None,
    *,
    laid: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """Filter (rank, window, min duration) and lay out: columns start_us, y, lane, group, ...

    `laid` is `lay_out(events, view.rank, origin_us, view.max_depth)` when the caller keeps it
    (the dashboard caches it per trace); then a window costs a slice. Sub-rows come from the
    whole rank, so a lane's layout does not jump when the window or the filter changes.
    """
    view = view or TimelineView()
    if laid is None:
        laid = lay_out(events, view.rank, origin_us, view.max_depth, with_python_free=view.hide_python)
    elif view.hide_python and "sub_nopy" not in laid.columns:
        laid = laid.assign(sub_nopy=np.minimum(python_free_depth(laid), laid.attrs.get("max_depth", FULL_DEPTH)))
    origin = laid.attrs["origin_us"]
    ev = laid
    s = ev["start_us"].to_numpy()
    keep = np.ones(len(ev), bool)
    if view.start_us is not None:
        keep &= s + ev["dur_us"].to_numpy() >= view.start_us
    if view.end_us is not None:
        keep &= s <= view.end_us
    if view.min_dur_us > 0:
        keep &= ev["dur_us"].to_numpy() >= view.min_dur_us
    sub_col = "sub"
    if view.hide_python and "sub_nopy" in ev.columns:
        keep &= ev["sub_nopy"].to_numpy() >= 0
        sub_col = "sub_nopy"
    if view.collapsed:
        folded = ev["lane"].isin(list(view.collapsed)).to_numpy()
        keep &= ~folded | (ev[sub_col].to_numpy() == 0)
    if not keep.all():
        ev = ev[keep]
    if sub_col != "sub":
        ev = ev.assign(sub=ev[sub_col].to_numpy())
    codes = ev["lane_code"].to_numpy()
    present, first = np.unique(codes, return_index=True)
    names = ev["lane"].to_numpy()[first]
    rows = np.zeros(int(present.max()) + 1 if len(present) else 0, np.int64)
    np.maximum.at(rows, codes, ev["sub"].to_numpy(np.int64))
    order = sorted(range(len(present)), key=lambda i: (names[i].startswith("GPU"), names[i]))
    base, y0 = {}, 0
    base_of = np.zeros(len(rows), np.int64)
    for i in order:
        base[str(names[i])] = y0
        base_of[present[i]] = y0
        y0 += int(rows[present[i]]) + 1 + 1  # a spacer row between lanes
    ev = ev.assign(y=base_of[codes] + ev["sub"].to_numpy(np.int64))
    ev.attrs = {"lanes": base, "origin_us": origin}
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
    # the host's ProfilerStep spans: a GPU-side step annotation starts after its host span does,
    # so the first step in time is always a host one
    steps = step_spans(events)
    if len(steps):
        first = steps.sort_values("ts_us", kind="stable").iloc[0]
        return float(first["ts_us"]) - origin, float(first["ts_us"] + first["dur_us"]) - origin
    if len(events) <= max_events:
        return 0.0, max(span, 1.0)
    small = events["dur_us"].to_numpy(float) < 0.5 * span
    order = np.argsort(ts[small], kind="stable")[:max_events]
    lo, hi = float(ts[small][order].min()), float(end[small][order].max())
    return lo - origin, max(hi - origin, lo - origin + 1.0)


def min_bar_us(start_us: float, end_us: float, *, plot_px: float = PLOT_PX, min_px: float = MIN_BAR_PX) -> float:
    """The shortest event a window `[start_us, end_us]` draws as a bar of its own when it is over
    budget (shorter ones go into grey grouped bars): `min_px` on screen. It scales with the
    window, so zooming in (a drag on the chart, the slider) brings the short events in."""
    return min_px * max(float(end_us) - float(start_us), 1e-9) / plot_px


def level_of_detail(
    ev: pd.DataFrame,
    budget: int,
    bins: int = 240,
    *,
    window: tuple[float, float] | None = None,
    min_px: float = MIN_BAR_PX,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(events drawn one bar each, aggregate bars) for a prepared window.

    Why: an SVG bar per event stays interactive (hover, click, box select) up to a few hundred
    bars; a 200k-event window is reduced to the `budget` longest events that are at least
    `min_px` wide at this zoom (`window`, µs from origin; default: the events' extent, drawn
    over `PLOT_PX`), plus, per sub-row, one grey bar per run of adjacent 1/`bins` slices of the
    window holding the rest ("1,234 short events: narrow the window"). A bar narrower than a pixel can be neither seen
    nor hovered, yet costs the browser as much as a wide one: in the first ResNet step (4.9 s
    over 1,200 px) 1,062 of the 1,200 longest events were under 0.25 px. Narrowing the window
    (the page's slider or a search hit) shows every event again: level of detail by window.
    """
    if len(ev) <= budget:
        return ev, ev.iloc[:0]
    start = ev["start_us"].to_numpy(float)
    dur = ev["dur_us"].to_numpy(float)
    if window is None:
        lo, hi = float(start.min()), float((start + dur).max())
    else:
        lo, hi = float(window[0]), float(window[1])
    span = max(hi - lo, 1e-9)
    order = np.argsort(-dur, kind="stable")[:budget]
    order = order[dur[order] >= min_bar_us(lo, hi, min_px=min_px)]
    keep = np.zeros(len(ev), bool)
    keep[order] = True
    # GPU work left over becomes busy spans (kernels within a pixel merged), never grey: at the
    # whole-step window a 92 %-busy GPU must read as busy (issue 32)
    gpu = ev["is_gpu"].to_numpy(bool) & ~keep if "is_gpu" in ev.columns else np.zeros(len(ev), bool)
    busy = busy_spans(
        ev["y"].to_numpy()[gpu], start[gpu], start[gpu] + dur[gpu], min_bar_us(lo, hi, min_px=BUSY_GAP_PX)
    ).assign(busy=True)
    rest = ev[~keep & ~gpu]
    s = start[~keep & ~gpu]
    e = s + dur[~keep & ~gpu]
    width = span / bins
    b = np.clip(np.floor((s - lo) / width), -1, bins).astype(np.int64)
    cells = (
        pd.DataFrame({"y": rest["y"].to_numpy(), "b": b, "s": s, "e": e})
        .groupby(["y", "b"], sort=True)
        .agg(start_us=("s", "min"), end_us=("e", "max"), count=("s", "size"))
        .reset_index()
    )
    # a run of adjacent busy bins in one row is one grey bar (a dense row was up to `bins` bars)
    y, bb = cells["y"].to_numpy(), cells["b"].to_numpy()
    run = np.cumsum(np.r_[True, (y[1:] != y[:-1]) | (bb[1:] != bb[:-1] + 1)])
    agg = (
        cells.assign(run=run)
        .groupby("run", sort=True)
        .agg(y=("y", "first"), start_us=("start_us", "min"), end_us=("end_us", "max"), count=("count", "sum"))
        .reset_index(drop=True)
    )
    agg["dur_us"] = agg["end_us"] - agg["start_us"]
    agg = agg.assign(busy=False)
    if len(busy):
        agg = pd.concat([agg, busy[[*agg.columns.drop("busy"), "busy_us", "busy"]]], ignore_index=True)
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
    laid: pd.DataFrame | None = None,
    launch_flows: bool = False,
) -> go.Figure:
    """The timeline of `events` (the `Trace.events` table); arrows from `flow_from` to its kernels;
    with `launch_flows`, a line from each drawn kernel back to its launch (`lanes.window_flows`).

    One kind of timeline at every size (issue 13): SVG bars with names drawn when they fit,
    hover (name, duration, start, input shapes of the linked ET op via `shapes`), click and box
    select, x-only zoom (the y axis is fixed so lanes never hide), `search` (a regex on names)
    highlights its hits and dims the rest, and `level_of_detail` keeps big windows light.
    `laid`: the rank's `lay_out`, when the caller caches it (a window then costs a slice).
    """
    import plotly.graph_objects as go

    view = view or TimelineView()
    ev = prepare(events, view, origin_us, laid=laid)
    origin = ev.attrs["origin_us"]
    lanes = ev.attrs["lanes"]
    fig = go.Figure()
    if view.start_us is not None and view.end_us is not None:
        window = (view.start_us, view.end_us)
    elif len(ev):
        window = (float(ev["start_us"].min()), float((ev["start_us"] + ev["dur_us"]).max()))
    else:
        window = (0.0, 1.0)
    span = window[1] - window[0]
    detail, agg = level_of_detail(ev, view.bar_limit, window=window)
    for tr in timeline_traces(detail, True, search=search, shapes=shapes, span_us=span):
        fig.add_trace(tr)
    for tr in aggregate_traces(agg):
        fig.add_trace(tr)
    flows = 0
    if launch_flows:
        xy, flows = window_flows(ev, detail)
        if xy:
            fig.add_trace(flow_trace(xy))
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
                arrowcolor=HIGHLIGHT,
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
        yaxis=dict(
            tickvals=[-v for v in lanes.values()],
            ticktext=lane_labels(ev, lanes, window, view.collapsed),
            fixedrange=True,
            automargin=True,
        ),
        # legend below the plot: never under the modebar (toolbar) at the top right
        legend=dict(orientation="h", yanchor="top", y=-0.12 if n_rows < 30 else -0.04, xanchor="left", x=0.0),
        meta={
            "origin_us": origin,
            "bars": True,
            "drawn": len(detail),
            "grouped": int(agg["count"].sum()) if len(agg) else 0,
            "min_bar_us": min_bar_us(*window) if len(agg) else 0.0,
            "flows": flows,
        },
    )
    return fig


def lane_labels(
    ev: pd.DataFrame, lanes: dict[str, int], window: tuple[float, float], collapsed: tuple[str, ...] = ()
) -> list[str]:
    """Tick text of each lane: its name; a GPU stream with its busy share of the window (kernels,
    copies and sets merged, so overlaps count once); a folded thread marked so."""
    lo, hi = window
    gpu = ev[ev["cat"].astype(str).isin(GPU_WORK_CATS)] if len(ev) else ev
    busy: dict[str, float] = {}
    if len(gpu):
        s = np.clip(gpu["start_us"].to_numpy(float), lo, hi)
        e = np.clip(gpu["start_us"].to_numpy(float) + gpu["dur_us"].to_numpy(float), lo, hi)
        codes, names = pd.factorize(gpu["lane"])
        spans = busy_spans(codes, s, e, 0.0)
        for code, us in spans.groupby("y")["busy_us"].sum().items():
            busy[str(names[int(code)])] = float(us)
    out = []
    for name in lanes:
        if name in busy and hi > lo:
            out.append(f"{name} · {100.0 * busy[name] / (hi - lo):.0f} % busy")
        elif name in collapsed:
            out.append(f"{name} (folded)")
        else:
            out.append(name)
    return out


def aggregate_traces(agg: pd.DataFrame, *, legend: bool = True) -> list:
    """The bars of `level_of_detail`'s aggregate table: grey groups and GPU busy spans."""
    busy = agg["busy"].to_numpy(bool) if "busy" in agg.columns else np.zeros(len(agg), bool)
    out = []
    if (~busy).any():
        out.append(aggregate_trace(agg[~busy], legend=legend))
    if busy.any():
        out.append(busy_trace(agg[busy], legend=legend))
    return out


def aggregate_trace(agg: pd.DataFrame, *, legend: bool = True):
    """Grey bars standing for many short events (see `level_of_detail`); not selectable ids."""
    import plotly.graph_objects as go

    if "busy" in agg.columns:
        agg = agg[~agg["busy"].to_numpy(bool)]
    counts = agg["count"].to_numpy()
    return go.Bar(
        base=agg["start_us"].to_numpy(),
        x=agg["dur_us"].to_numpy(),
        y=-agg["y"].to_numpy(),
        orientation="h",
        name="grouped short events",
        marker=dict(color=AGGREGATE, line=dict(width=0)),
        showlegend=legend,
        width=0.85,
        customdata=np.stack([np.full(len(agg), None), counts], axis=1),
        hovertemplate="%{customdata[1]:,} short events<br>zoom in (drag) to draw them<extra></extra>",
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
        from engine.user_regex import search_mask  # linear time; a bad regex is plain text

        hits = search_mask(ev["name"], search)
    out = []
    lo = float(ev["start_us"].min()) if len(ev) else 0.0
    hi = float((ev["start_us"] + ev["dur_us"]).max()) if len(ev) else 1.0
    if span_us is None:
        span_us = max(hi - lo, 1e-9)
    px_per_us = PLOT_PX / max(span_us, 1e-9)
    for group, part in ev.groupby("group", sort=True, observed=True):
        color = GROUP_COLORS.get(group, UNKNOWN)
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
            marker["line"] = dict(width=np.where(h, 1.5, 0.0), color=SEARCH_OUTLINE)
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
                textfont=dict(size=9, color=BAR_TEXT),
                hovertemplate=HOVER,
            )
        )
    return out
