"""The Fleet page's figures: jobs as points (a 2-D projection of their signatures) and the fleet's
class mix against the suite's. Pure functions of tables: they draw, they don't analyse (the
projection and the clusters are computed by the caller, engine.fleet)."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

from engine.figures.style import SUITE, SUITE_OUTLINE

MAX_POINTS = 5000
"""Points drawn at most (a larger fleet is sampled evenly, picks always kept)."""


def jobs_scatter(points: pd.DataFrame) -> go.Figure:
    """`points`: job, x, y, cluster (int), pick (bool), weight (float; 0 for non-picks), step_ms."""
    if len(points) > MAX_POINTS:
        keep = points["pick"] | (points.index.to_series() % (len(points) // MAX_POINTS + 1) == 0)
        points = points[keep]
    fig = go.Figure()
    for c, grp in points[~points["pick"]].groupby("cluster", sort=True):
        fig.add_trace(
            go.Scattergl(
                x=grp["x"],
                y=grp["y"],
                mode="markers",
                name=f"cluster {c}",
                marker={"size": 8, "opacity": 0.7},
                customdata=grp[["job", "step_ms"]].to_numpy(),
                hovertemplate="%{customdata[0]}<br>%{customdata[1]:.2f} ms/step<extra>cluster " + str(c) + "</extra>",
            )
        )
    picks = points[points["pick"]]
    fig.add_trace(
        go.Scatter(
            x=picks["x"],
            y=picks["y"],
            mode="markers+text",
            name="suite",
            text=[f"{w:.0%}" for w in picks["weight"]],
            textposition="top center",
            marker={"size": 16, "symbol": "star", "color": SUITE, "line": {"width": 1, "color": SUITE_OUTLINE}},
            customdata=picks[["job", "weight"]].to_numpy(),
            hovertemplate="%{customdata[0]}<br>weight %{customdata[1]:.1%}<extra>suite</extra>",
        )
    )
    fig.update_layout(
        height=460,
        margin={"l": 10, "r": 10, "t": 30, "b": 10},
        xaxis_title="signature PC 1",
        yaxis_title="signature PC 2",
        legend={"orientation": "h"},
    )
    return fig


def mix_bars(fleet: dict[str, float], suite: dict[str, float]) -> go.Figure:
    """The fleet's and the suite's time shares per class, side by side (classes with any share)."""
    keys = [k for k in fleet if fleet[k] > 0 or suite.get(k, 0) > 0]
    fig = go.Figure(
        [
            go.Bar(name="fleet", x=keys, y=[fleet[k] for k in keys]),
            go.Bar(name="suite", x=keys, y=[suite.get(k, 0.0) for k in keys]),
        ]
    )
    fig.update_layout(
        barmode="group",
        height=360,
        margin={"l": 10, "r": 10, "t": 30, "b": 10},
        yaxis_tickformat=".0%",
        legend={"orientation": "h"},
    )
    return fig
