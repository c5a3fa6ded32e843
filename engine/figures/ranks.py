"""Per-rank views of a distributed replay: a table and bars of where each rank's time goes, and
the original's ranks side by side with the replay's.

Inputs are plain dicts (`ReplayResult.to_json()`, the `ranks` list documented in the README), so
the dashboard, the CLI and tests share them; plotly is imported lazily.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pandas as pd

from engine.figures.style import PARTS

if TYPE_CHECKING:
    import plotly.graph_objects as go

    from engine.trace.model import Trace


def rank_table(report: dict[str, Any]) -> pd.DataFrame:
    """One row per rank: median iteration, breakdown (ms), coverage, collectives."""
    rows = []
    for r in report.get("ranks") or []:
        b, cov = r.get("breakdown") or {}, r.get("coverage") or {}
        coll = r.get("collectives") or {}
        rows.append(
            {
                "rank": r.get("rank"),
                "recorded_rank": r.get("recorded_rank"),
                "median_ms": r.get("median_ms"),
                **{label: b.get(key) for key, label in PARTS},
                "coverage": (cov.get("replayed", 0) / cov["selected"]) if cov.get("selected") else None,
                "collectives": sum(int(v.get("count", 0)) for v in coll.values()),
                "comm_MiB": round(sum(int(v.get("bytes", 0)) for v in coll.values()) / 2**20, 3),
            }
        )
    return pd.DataFrame(rows)


def rank_bars(report: dict[str, Any]) -> go.Figure:
    """Grouped bars per rank: compute, communication, exposed communication, idle (ms/iteration)."""
    import plotly.graph_objects as go

    t = rank_table(report)
    fig = go.Figure()
    names = [f"rank {r}" for r in t["rank"]] if len(t) else []
    for _, label in PARTS:
        fig.add_trace(go.Bar(x=names, y=t[label] if len(t) else [], name=label))
    fig.update_layout(
        barmode="group",
        title=f"Per-rank time (median of iterations, {report.get('world_size', len(names))} ranks)",
        yaxis_title="ms per iteration",
        height=360,
        margin={"l": 50, "r": 20, "t": 50, "b": 40},
    )
    return fig


def original_rank_ms(trace: Trace, meta_by_rank: dict[int, float] | None = None) -> dict[int, float]:
    """The original's step time per rank: capture meta medians when given (unprofiled), else the
    mean ProfilerStep span of each rank in the trace."""
    if meta_by_rank:
        return dict(meta_by_rank)
    from engine.trace.steps import step_ms_by_rank

    return step_ms_by_rank(trace)


def ranks_side_by_side(original: dict[int, float], report: dict[str, Any]) -> go.Figure:
    """Original vs replay iteration time per rank (the replay's rank r ran recorded rank r)."""
    import plotly.graph_objects as go

    ranks = report.get("ranks") or []
    x = [f"rank {r.get('rank')}" for r in ranks]
    orig = [
        original.get(int(r.get("recorded_rank") if r.get("recorded_rank") is not None else r["rank"])) for r in ranks
    ]
    fig = go.Figure(
        [
            go.Bar(x=x, y=orig, name="original"),
            go.Bar(x=x, y=[r.get("median_ms") for r in ranks], name="replay"),
        ]
    )
    fig.update_layout(
        barmode="group",
        title="Iteration time per rank: original vs replay",
        yaxis_title="ms",
        height=340,
        margin={"l": 50, "r": 20, "t": 50, "b": 40},
    )
    return fig
