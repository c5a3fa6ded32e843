"""Figures of the rank overview (issue 22): small-multiple heat maps over ranks x steps, and the
per-rank breakdown bars. Inputs are the tables of `engine.analysis.ranks` (a few thousand rows
for 512 ranks), so a figure is small whatever the job's event count; plotly is imported lazily.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pandas as pd

from engine.analysis import ranks as rk
from engine.figures.style import PANELS, SCALE

if TYPE_CHECKING:
    import plotly.graph_objects as go


def step_heatmaps(table: pd.DataFrame, height: int | None = None) -> go.Figure:
    """One heat map per part (step, compute, exposed communication, idle; ms), side by side over
    the same rank x step grid: a slow rank is a bright row, a slow step a bright column."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=1, cols=len(PANELS), shared_yaxes=True, subplot_titles=[t for _, t in PANELS])
    labels = _step_labels(table)
    for i, (col, title) in enumerate(PANELS, 1):
        grid = rk.step_grid(table, col)
        fig.add_trace(
            go.Heatmap(
                z=grid.to_numpy(),
                x=[labels.get(int(c), str(c)) for c in grid.columns],
                y=[int(r) for r in grid.index],
                colorscale=SCALE,
                showscale=False,
                name=title,
                hovertemplate=f"rank %{{y}} · %{{x}}<br>{title} %{{z:.3f}} ms<extra></extra>",
            ),
            row=1,
            col=i,
        )
    n = int(table["rank"].nunique()) if len(table) else 0
    fig.update_yaxes(title_text="rank", autorange="reversed", row=1, col=1)
    fig.update_layout(
        height=height or int(min(900, max(300, 120 + 3 * n))),
        margin={"l": 50, "r": 10, "t": 40, "b": 40},
        title=None,
    )
    return fig


def _step_labels(table: pd.DataFrame) -> dict[int, str]:
    """step_index -> its label: the step name when every rank names that step alike (a
    ProfilerStep#N), else "step i"."""
    if table.empty:
        return {}
    names = table.groupby("step_index")["step"].agg(lambda s: s.iloc[0] if s.nunique() == 1 else None)
    return {int(i): (str(n) if n is not None else f"step {i}") for i, n in names.items()}


def rank_bars(per_rank: pd.DataFrame, height: int = 320) -> go.Figure:
    """Stacked bars per rank (ms per step): compute + exposed communication + idle = the step."""
    import plotly.graph_objects as go

    fig = go.Figure()
    x = per_rank["rank"].astype(int).tolist() if len(per_rank) else []
    for col, title in PANELS[1:]:
        fig.add_trace(go.Bar(x=x, y=per_rank[col] if len(per_rank) else [], name=title))
    fig.update_layout(
        barmode="stack",
        height=height,
        xaxis_title="rank",
        yaxis_title="ms per step (mean)",
        margin={"l": 50, "r": 10, "t": 20, "b": 40},
        legend={"orientation": "h", "y": 1.1},
        bargap=0.05,
    )
    return fig


__all__ = ["PANELS", "rank_bars", "step_heatmaps"]
