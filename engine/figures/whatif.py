"""What-if figures: breakdown bars (original vs predicted) and the sharding ranking table."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pandas as pd

from engine.analysis.breakdown import ADDITIVE
from engine.figures.style import BREAKDOWN_COLORS, PART_LABELS, SENSITIVITY_LABELS

if TYPE_CHECKING:
    import plotly.graph_objects as go

BREAKDOWN_KEYS = ADDITIVE  # stacked: they add up to the step


def breakdown_bars(
    original: dict[str, float], predicted: dict[str, float], labels=("measured", "predicted")
) -> go.Figure:
    """Stacked bars (ms per step) of two TimeBreakdown JSONs: compute, exposed communication and
    idle add up to each bar's step; the total communication (exposed + hidden) is in the hover."""
    import plotly.graph_objects as go

    fig = go.Figure()
    for k in BREAKDOWN_KEYS:
        vals = [float(d.get(k, 0.0)) for d in (original, predicted)]
        comm = [float(d.get("communication_ms", 0.0)) for d in (original, predicted)]
        fig.add_trace(
            go.Bar(
                name=PART_LABELS[k],
                x=list(labels),
                y=vals,
                text=[f"{v:.2f}" for v in vals],
                marker_color=BREAKDOWN_COLORS[k],
                customdata=comm,
                hovertemplate="%{x}: %{y:.3f} ms<br>communication in all: %{customdata:.3f} ms<extra></extra>",
            )
        )
    steps = [float(d.get("step_ms", 0.0)) for d in (original, predicted)]
    fig.add_trace(
        go.Scatter(
            x=list(labels),
            y=steps,
            mode="text",
            text=[f"step {v:.3f} ms" for v in steps],
            textposition="top center",
            showlegend=False,
        )
    )
    fig.update_layout(
        barmode="stack",
        yaxis_title="ms per step",
        height=380,
        margin={"l": 10, "r": 10, "t": 30, "b": 30},
        legend={"orientation": "h", "y": 1.1},
    )
    return fig


def breakdown_table(result: dict) -> pd.DataFrame:
    """One row per part (ms per step): measured (the trace) and predicted, from `simulate --json`."""
    keys = ("step_ms", "compute_ms", "communication_ms", "exposed_communication_ms", "idle_ms")
    m, p = result.get("measured_breakdown") or {}, result.get("breakdown") or {}
    return pd.DataFrame(
        {"part": [k[:-3] for k in keys], "measured": [m.get(k) for k in keys], "predicted": [p.get(k) for k in keys]}
    )


def sharding_table(report: dict) -> pd.DataFrame:
    """One row per (ranks, plan) from a sharding edit's report, best plan first per rank count."""
    rows = []
    for n, plans in (report.get("ranking") or {}).items():
        for i, p in enumerate(plans):
            rows.append(
                {
                    "ranks": int(n),
                    "rank": i + 1,
                    "plan": p["plan"],
                    "slowest rank ms": round(p["slowest_rank_ms"], 3),
                    "predicted step ms": round(p["predicted_step_ms"], 3),
                    "per-rank ms": ", ".join(f"{x:.2f}" for x in p["per_rank_ms"]),
                }
            )
    return pd.DataFrame(rows)


def sensitivity_table(block: dict | None) -> pd.DataFrame:
    """The `sensitivity` block of simulate's JSON as the "what should I optimise" table: one row
    per category, the step's change in ms and %, most helpful first; categories without tasks
    last, with no figure."""
    rows = []
    for cat, v in ((block or {}).get("categories") or {}).items():
        rows.append(
            {
                "speed-up of": SENSITIVITY_LABELS.get(cat, cat),
                "tasks": v["tasks"],
                "step change ms": v["delta_ms"],
                "step change %": v["delta_pct"],
            }
        )
    df = pd.DataFrame(rows, columns=["speed-up of", "tasks", "step change ms", "step change %"])
    return df.sort_values("step change ms", na_position="last", kind="stable").reset_index(drop=True)
