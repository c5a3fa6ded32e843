"""The critical path drawn across ranks: one lane per rank, the path's pieces as bars coloured by
kind, and a line through the path's hand-offs where it moves from one rank to another (the
rank that arrived last at a collective). Drawing only: engine.simulate.critical_path computes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

if TYPE_CHECKING:
    import plotly.graph_objects as go

KIND_COLORS = {
    "compute": "#7c5cff",
    "communication": "#ff6b6b",
    "launch_host": "#f4a261",
    "sync_wait": "#2a9d8f",
    "host_unrecorded": "#e9c46a",
    "idle": "#adb5bd",
}
HAND_OFF = {"mode": "lines+markers", "name": "hand-off between ranks", "line": {"color": "#e63946", "width": 2}}
KIND_LABELS = {
    "compute": "compute",
    "communication": "communication",
    "launch_host": "launch / host overhead",
    "sync_wait": "sync wait",
    "host_unrecorded": "host (unrecorded)",
    "idle": "idle",
}


def critical_path_figure(segments: pd.DataFrame, *, origin_us: float | None = None, title: str = "") -> go.Figure:
    """Bars of a CriticalPath's `segments` on one lane per rank (µs from `origin_us`, default the
    path's start), with the cross-rank hand-offs joined by a line."""
    import plotly.graph_objects as go

    seg = segments[segments["dur_us"] > 0]
    fig = go.Figure()
    if seg.empty:
        fig.update_layout(title=title or "critical path: empty", height=200)
        return fig
    origin = float(seg["start_us"].min()) if origin_us is None else float(origin_us)
    ranks = sorted(int(r) for r in seg["rank"].unique())
    ylab = {r: f"rank {r}" for r in ranks}
    for kind, color in KIND_COLORS.items():
        part = seg[seg["kind"] == kind]
        if part.empty:
            continue
        fig.add_trace(
            go.Bar(
                base=part["start_us"].to_numpy(float) - origin,
                x=part["dur_us"].to_numpy(float),
                y=[ylab[int(r)] for r in part["rank"]],
                orientation="h",
                name=KIND_LABELS[kind],
                marker_color=color,
                hovertext=part["name"].astype(str).to_list(),
                customdata=np.stack([part["via"].astype(str).to_numpy(), part["dur_us"].to_numpy(float)], axis=1),
                hovertemplate="%{hovertext}<br>%{customdata[1]:,.1f} µs (via %{customdata[0]})<extra></extra>",
                width=0.6,
            )
        )
    hand = seg["rank"].to_numpy()
    moves = np.flatnonzero(hand[1:] != hand[:-1]) + 1
    if len(moves):
        xs, ys = [], []
        for i in moves.tolist():
            a, b = seg.iloc[i - 1], seg.iloc[i]
            xs += [float(a["start_us"] + a["dur_us"]) - origin, float(b["start_us"]) - origin, None]
            ys += [ylab[int(a["rank"])], ylab[int(b["rank"])], None]
        fig.add_trace(go.Scatter(x=xs, y=ys, **HAND_OFF))
    fig.update_layout(
        barmode="overlay",
        title=title,
        height=160 + 60 * len(ranks),
        xaxis_title="µs from the step's start",
        yaxis=dict(categoryorder="array", categoryarray=[ylab[r] for r in reversed(ranks)]),
        margin=dict(l=10, r=10, t=60, b=40),
        legend=dict(orientation="h", yanchor="bottom", y=1.02, xanchor="right", x=1.0),
    )
    return fig


def path_table(top_ops: pd.DataFrame, n: int = 25) -> pd.DataFrame:
    """The table pages show under the figure: the operators that take the most path time."""
    t = top_ops.head(n).copy()
    t["kind"] = t["kind"].map(KIND_LABELS).fillna(t["kind"])
    return t.round({"ms": 3, "share_pct": 1})
