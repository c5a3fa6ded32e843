"""Analysis figures (they draw; engine/analysis computes): the per-rank time breakdown bars,
timelines of all ranks side by side, and metric curves under a timeline on the same µs axis.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from engine.figures.style import (
    ALERT,
    BREAKDOWN_COLORS,
    KIND_COLORS,
    KIND_LABELS,
    METRIC_SHORT_LABELS,
    RANK_BREAKDOWN_LABELS,
)

if TYPE_CHECKING:
    import plotly.graph_objects as go


def breakdown_figure(per_rank: pd.DataFrame) -> go.Figure:
    """Stacked bars per rank of a TimeBreakdown's `per_rank()` table: compute, exposed
    communication and idle, which add up to the step (ms)."""
    import plotly.graph_objects as go

    y = [f"rank {r}" for r in per_rank["rank"]]
    fig = go.Figure()
    for key, color in BREAKDOWN_COLORS.items():  # the parts that add up to the step
        name = RANK_BREAKDOWN_LABELS[key]
        fig.add_trace(go.Bar(y=y, x=per_rank[key], name=name, orientation="h", marker_color=color))
    fig.update_layout(
        barmode="stack",
        height=120 + 40 * len(per_rank),
        xaxis_title="ms per step",
        margin=dict(l=10, r=10, t=30, b=30),
        legend=dict(orientation="h", yanchor="bottom", y=1.0, xanchor="left", x=0.0),
    )
    return fig


def rank_timelines(
    events: pd.DataFrame, window_us: float | None = None, bar_limit: int = 1500, path: pd.DataFrame | None = None
) -> go.Figure:
    """One timeline row per rank, each from its own start, sharing the µs axis; `path` (a
    CriticalPath's segments) is highlighted in a "critical path" row on top of each rank's lanes.
    `bar_limit` is the whole figure's event-bar budget, shared by the ranks."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    from engine.figures.critical import bounded_segments
    from engine.figures.timeline import TimelineView, aggregate_traces, level_of_detail, prepare, timeline_traces

    ranks = sorted(int(r) for r in events["rank"].unique())
    fig = make_subplots(
        rows=len(ranks), cols=1, shared_xaxes=True, vertical_spacing=0.04, subplot_titles=[f"rank {r}" for r in ranks]
    )
    total_rows = 0
    per_rank = max(50, bar_limit // max(len(ranks), 1))
    for k, r in enumerate(ranks, start=1):
        view = TimelineView(start_us=0.0 if window_us else None, end_us=window_us, rank=r, bar_limit=per_rank)
        ev = prepare(events, view)
        detail, agg = level_of_detail(ev, per_rank)
        for tr in timeline_traces(detail, legend=k == 1):
            fig.add_trace(tr, row=k, col=1)
        for tr in aggregate_traces(agg, legend=k == 1):
            fig.add_trace(tr, row=k, col=1)
        lanes = ev.attrs["lanes"]
        ticks, labels = [-v for v in lanes.values()], list(lanes.keys())
        on = bounded_segments(path[path["rank"] == r]) if path is not None else None
        if on is not None and len(on):
            origin = float(ev.attrs["origin_us"])
            for kind, part in on.groupby("kind", sort=False):
                fig.add_trace(
                    go.Bar(
                        base=part["start_us"].to_numpy(float) - origin,
                        x=part["dur_us"].to_numpy(float),
                        y=np.full(len(part), 1.5),
                        orientation="h",
                        width=1.2,
                        marker=dict(color=KIND_COLORS.get(str(kind), ALERT), line=dict(color=ALERT, width=1)),
                        name=f"critical path: {KIND_LABELS.get(str(kind), kind)}",
                        legendgroup=f"cp_{kind}",
                        showlegend=k == 1,
                        hovertext=part["name"].astype(str).to_list(),
                        hovertemplate="critical path: %{hovertext}<br>%{x:,.1f} µs<extra></extra>",
                    ),
                    row=k,
                    col=1,
                )
            ticks, labels = [1.5, *ticks], ["critical path", *labels]
        fig.update_yaxes(tickvals=ticks, ticktext=labels, fixedrange=True, row=k, col=1)
        total_rows += int(ev["y"].max()) + 2 if len(ev) else 2
    fig.update_layout(
        barmode="overlay",
        height=max(360, 16 * total_rows + 60 * len(ranks)),
        margin=dict(l=10, r=10, t=40, b=30),
        legend=dict(orientation="h", yanchor="top", y=-0.04, xanchor="left", x=0.0),
    )
    if window_us:
        fig.update_xaxes(range=[0.0, float(window_us)])
    return fig


def timeline_with_metrics(timeline: go.Figure, samples: dict, *, span_us: float) -> go.Figure:
    """`timeline` with one metric panel per sampled metric under it, on the same µs axis.

    `samples` is a MetricsSampler dict ({"t_s": [...], metric: [...]}); sample times are
    placed from 0 over `span_us` of the timeline (the capture samples its own timed run, which
    is as long as the steps it measured; the page says so)."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    t = np.asarray(samples.get("t_s") or [], float)
    metrics = [m for m in samples if m != "t_s" and len(samples[m]) == len(t) and len(t) > 1]
    rows = 1 + len(metrics)
    fig = make_subplots(
        rows=rows,
        cols=1,
        shared_xaxes=True,
        vertical_spacing=0.03,
        row_heights=[0.64] + [0.36 / max(len(metrics), 1)] * len(metrics),
    )
    for tr in timeline.data:
        fig.add_trace(tr, row=1, col=1)
    fig.update_yaxes(timeline.layout.yaxis, row=1, col=1)
    x = (t - t[0]) / (t[-1] - t[0]) * span_us if len(t) > 1 else t
    for k, m in enumerate(metrics, start=2):
        fig.add_trace(
            go.Scatter(x=x, y=samples[m], mode="lines", name=METRIC_SHORT_LABELS.get(m, m), line=dict(width=1.5)),
            row=k,
            col=1,
        )
        fig.update_yaxes(title_text=METRIC_SHORT_LABELS.get(m, m), fixedrange=True, row=k, col=1)
    fig.update_layout(
        barmode="overlay",
        height=int(timeline.layout.height or 400) + 130 * len(metrics),
        margin=dict(l=10, r=10, t=40, b=30),
        legend=dict(orientation="h", yanchor="top", y=-0.04, xanchor="left", x=0.0),
        dragmode="zoom",
    )
    fig.update_xaxes(range=list(timeline.layout.xaxis.range) if timeline.layout.xaxis.range else None)
    return fig
