"""Where the time goes, drawn: bar figures of the tables in engine.analysis.selftime.

Tables are separate from figures so the UI can show the same numbers in a sortable
`st.dataframe` (and select rows from it) and tests can check them against the trace.
Long names (kernels) are shown whole in the hover and wrapped, never clipped from the left.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pandas as pd

from engine.figures.style import ACCENT, GPU_IDLE, KERNEL

if TYPE_CHECKING:
    import plotly.graph_objects as go


def short_labels(names: list[str], width: int = 60) -> list[str]:
    """Tick labels: each name's start (what tells kernels apart: `void at::native::...`), cut
    with an ellipsis at `width`, and numbered when two cuts would be equal (Plotly merges
    bars with equal labels). The whole name goes in the hover."""
    out: list[str] = []
    seen: dict[str, int] = {}
    for n in names:
        lab = n if len(n) <= width else n[: width - 1] + "…"
        k = seen.get(lab, 0)
        seen[lab] = k + 1
        out.append(lab if k == 0 else f"{lab} ({k + 1})")
    return out


def bar_figure(
    table: pd.DataFrame, key: str, value: str = "self_us", *, top: int = 20, title: str = "", ids: str | None = None
) -> go.Figure:
    """Horizontal bars of the `top` rows of `table` (largest first); customdata = `ids` column or key."""
    import plotly.graph_objects as go

    t = table.head(top).iloc[::-1]
    if value not in t.columns:
        value = "total_us"
    full = t[key].astype(str).to_list()
    custom = t[ids].to_numpy() if ids and ids in t.columns else t[key].astype(str).to_numpy()
    fig = go.Figure(
        go.Bar(
            x=t[value].to_numpy(float),
            y=short_labels(full),
            orientation="h",
            customdata=custom,
            hovertext=full,
            marker_color=ACCENT,
            hovertemplate="%{hovertext}<br>%{x:,.1f} µs<extra></extra>",
        )
    )
    fig.update_layout(
        height=max(260, 22 * len(t) + 80),
        margin=dict(l=10, r=10, t=40, b=30),
        title=title,
        xaxis_title=value.replace("_us", " (µs)"),
        clickmode="event+select",
    )
    fig.update_yaxes(automargin=True)
    return fig


def idle_figure(idle: pd.DataFrame) -> go.Figure:
    """Stacked busy/idle bars per GPU stream."""
    import plotly.graph_objects as go

    label = ("GPU " + idle["gpu"].astype(str) + " / " + idle["stream"].astype(str)).to_numpy()
    fig = go.Figure(
        [
            go.Bar(y=label, x=idle["busy_us"], name="busy", orientation="h", marker_color=KERNEL),
            go.Bar(y=label, x=idle["idle_us"], name="idle", orientation="h", marker_color=GPU_IDLE),
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
