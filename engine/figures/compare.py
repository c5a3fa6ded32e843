"""Comparison figures: original vs replay (or trace A vs trace B) on aligned scales.

Timelines of the two sides are stacked with a shared x axis, each measured from its own start
(or its first ProfilerStep), so equal x means "the same time into the step". Bars and curves
read the tables of `engine.compare` (Comparison / TraceDiff), never the files.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pandas as pd

from engine.figures.style import ACCENT, HIGHLIGHT, METRIC_LABELS
from engine.figures.timeline import (
    TimelineView,
    aggregate_traces,
    lane_labels,
    level_of_detail,
    prepare,
    timeline_traces,
)

if TYPE_CHECKING:
    import plotly.graph_objects as go


def aligned_timelines(
    events_a: pd.DataFrame,
    events_b: pd.DataFrame,
    labels: tuple[str, str] = ("original", "replay"),
    *,
    window_us: float | None = None,
    min_dur_us: float = 0.0,
    origins_us: tuple[float | None, float | None] = (None, None),
    bar_limit: int = 3000,
    notes: tuple[str, str] = ("", ""),
) -> go.Figure:
    """Two timelines stacked on one time axis (µs from each side's origin), first `window_us` µs;
    `notes` follow each side's title (e.g. which step it is aligned at)."""
    from plotly.subplots import make_subplots

    view = TimelineView(
        start_us=0.0 if window_us else None, end_us=window_us, min_dur_us=min_dur_us, bar_limit=bar_limit
    )
    prepared = [prepare(e, view, o) for e, o in zip((events_a, events_b), origins_us)]
    fig = make_subplots(
        rows=2,
        cols=1,
        shared_xaxes=True,
        vertical_spacing=0.06,
        subplot_titles=[f"{lab}: {len(p):,} events{n}" for lab, p, n in zip(labels, prepared, notes)],
    )
    for row, ev in enumerate(prepared, start=1):
        if window_us:
            window = (0.0, float(window_us))
        elif len(ev):
            window = (float(ev["start_us"].min()), float((ev["start_us"] + ev["dur_us"]).max()))
        else:
            window = (0.0, 1.0)
        # the level of detail over the events' own extent (as before): the window's own scale draws
        # several times more bars, and the What-if page's budget has no room for them
        detail, agg = level_of_detail(ev, bar_limit // 2)
        for tr in timeline_traces(detail, legend=row == 1):
            fig.add_trace(tr, row=row, col=1)
        for tr in aggregate_traces(agg, legend=row == 1):
            fig.add_trace(tr, row=row, col=1)
        lanes = ev.attrs["lanes"]
        fig.update_yaxes(
            tickvals=[-v for v in lanes.values()],
            ticktext=lane_labels(ev, lanes, window),
            automargin=True,
            row=row,
            col=1,
        )
    rows = sum(int(p["y"].max()) + 2 if len(p) else 2 for p in prepared)
    fig.update_layout(
        barmode="overlay",
        height=max(420, 16 * rows + 140),
        margin=dict(l=10, r=10, t=40, b=30),
        # below the plot, never under the modebar
        legend=dict(orientation="h", yanchor="top", y=-0.16, xanchor="left", x=0.0),
    )
    fig.update_yaxes(fixedrange=True)
    fig.update_xaxes(title_text="µs from each aligned start" if any(notes) else "µs from start", row=2, col=1)
    if window_us:
        # the window limits the axis too, not only which events are drawn (issue 13 problem 9)
        fig.update_xaxes(range=[0.0, float(window_us)])
    return fig


def step_alignment(events: pd.DataFrame, step: int = 0, at: str = "step") -> tuple[float, float, str] | None:
    """(origin µs, window µs, note) that aligns a trace at its `step`-th ProfilerStep: its start
    (`at="step"`) or the first GPU work inside it (`at="gpu"`, so two GPUs' kernels line up
    when their hosts prepare the step for different times); None when the trace has no step."""
    from engine.trace.steps import step_spans
    from engine.trace.vocab import GPU_CATS

    spans = step_spans(events)
    if spans.empty:
        return None
    if "rank" in spans.columns and spans["rank"].nunique() > 1:
        spans = spans[spans["rank"] == spans["rank"].min()]
    sp = spans.iloc[min(step, len(spans) - 1)]
    t0, t1 = float(sp["ts_us"]), float(sp["ts_us"] + sp["dur_us"])
    note = f" · aligned at {sp['name']}"
    if at == "gpu":
        ts = events["ts_us"].to_numpy(float)
        work = events["cat"].astype(str).isin(GPU_CATS).to_numpy() & (ts >= t0) & (ts <= t1)
        if work.any():
            end = float((ts[work] + events["dur_us"].to_numpy(float)[work]).max())
            first = float(ts[work].min())
            return first, max(end, t1) - first, note + "'s first GPU work"
    return t0, t1 - t0, note


def time_by_bars(
    table: pd.DataFrame,
    key: str,
    a_col: str,
    b_col: str,
    labels: tuple[str, str] = ("original", "replay"),
    *,
    top: int = 20,
    title: str = "",
) -> go.Figure:
    """Grouped horizontal bars of `a_col` vs `b_col` per `key` for the `top` rows (by max of both)."""
    import plotly.graph_objects as go

    t = table.copy()
    t["_m"] = t[[a_col, b_col]].max(axis=1)
    t = t.nlargest(top, "_m").iloc[::-1]
    full = t[key].astype(str).tolist()
    # never clip a (kernel) name: wrap it over lines, and hover shows it whole
    y = [wrap_label(n) for n in full]
    lines = sum(max(1, lab.count("<br>") + 1) for lab in y)
    hover = "%{customdata}<br>%{x:,.1f} µs<extra>%{fullData.name}</extra>"
    sides = ((a_col, labels[0], ACCENT), (b_col, labels[1], HIGHLIGHT))
    fig = go.Figure(
        [
            go.Bar(y=y, x=t[col].to_numpy(float), name=name, orientation="h", marker_color=color, customdata=full)
            for col, name, color in sides
        ]
    )
    fig.update_traces(hovertemplate=hover)
    fig.update_layout(
        barmode="group",
        height=max(300, 22 * lines + 14 * len(t) + 120),
        title=title,
        xaxis_title="µs",
        yaxis=dict(automargin=True, tickfont=dict(size=10)),
        margin=dict(l=10, r=10, t=40, b=30),
        # legend under the title on the left: never under the modebar at the top right
        legend=dict(orientation="h", yanchor="bottom", y=1.0, xanchor="left", x=0.0),
    )
    return fig


def wrap_label(name: str, width: int = 56) -> str:
    """`name` in lines of at most `width` characters (Plotly tick labels break at <br>)."""
    if len(name) <= width:
        return name
    return "<br>".join(name[i : i + width] for i in range(0, len(name), width))


def metric_curves(curves: pd.DataFrame, labels: tuple[str, str] = ("original", "replay")) -> go.Figure:
    """One panel per shared metric: original and replay curves on the normalized step axis `u`."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    metrics = sorted({c.rsplit("_", 1)[0] for c in curves.columns if c.endswith("_original")})
    if not metrics:
        fig = go.Figure()
        fig.update_layout(title="no metric shared by both sides", height=200)
        return fig
    fig = make_subplots(
        rows=len(metrics),
        cols=1,
        shared_xaxes=True,
        subplot_titles=[METRIC_LABELS.get(m, m) for m in metrics],
        vertical_spacing=0.08,
    )
    for i, m in enumerate(metrics, start=1):
        for suffix, lab, color in (("original", labels[0], ACCENT), ("replay", labels[1], HIGHLIGHT)):
            fig.add_trace(
                go.Scatter(
                    x=curves["u"],
                    y=curves[f"{m}_{suffix}"],
                    name=lab,
                    legendgroup=lab,
                    showlegend=i == 1,
                    line=dict(color=color),
                ),
                row=i,
                col=1,
            )
    fig.update_xaxes(title_text="fraction of the step window", row=len(metrics), col=1)
    fig.update_layout(height=220 * len(metrics) + 80, margin=dict(l=10, r=10, t=40, b=30))
    return fig
