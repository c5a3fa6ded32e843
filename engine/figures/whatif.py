"""What-if figures: breakdown bars (original vs predicted) and the sharding ranking table."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pandas as pd

if TYPE_CHECKING:
    import plotly.graph_objects as go

BREAKDOWN_KEYS = ("compute", "communication", "exposed_communication", "idle")


def breakdown_bars(
    original: dict[str, float], predicted: dict[str, float], labels=("original", "predicted")
) -> go.Figure:
    """Grouped bars per breakdown component (ms per iteration), original next to predicted."""
    import plotly.graph_objects as go

    fig = go.Figure()
    for lab, d in zip(labels, (original, predicted)):
        fig.add_trace(
            go.Bar(
                name=lab,
                x=list(BREAKDOWN_KEYS),
                y=[float(d.get(k, 0.0)) for k in BREAKDOWN_KEYS],
                text=[f"{float(d.get(k, 0.0)):.2f}" for k in BREAKDOWN_KEYS],
            )
        )
    fig.update_layout(
        barmode="group",
        yaxis_title="ms per iteration",
        height=360,
        margin={"l": 10, "r": 10, "t": 30, "b": 30},
        legend={"orientation": "h", "y": 1.1},
    )
    return fig


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
