"""The critical path drawn across ranks: one lane per rank, the path's pieces as bars coloured by
kind, and a line through the path's hand-offs where it moves from one rank to another (the
rank that arrived last at a collective). Drawing only: engine.simulate.critical_path computes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from engine.figures.style import ALERT, KIND_COLORS, KIND_LABELS

if TYPE_CHECKING:
    import plotly.graph_objects as go

# The path has one piece per task it crosses (41,864 on param_resnet's Kineto trace, 312,804 on a
# 239k-event diffusion trace: a 37 MB figure froze the tab). It is drawn as at most this many bars,
# the timeline's level-of-detail budget (engine/figures/timeline.py BAR_LIMIT).
BAR_LIMIT = 400
HAND_OFF = {"mode": "lines+markers", "name": "hand-off between ranks", "line": {"color": ALERT, "width": 2}}


def bounded_segments(segments: pd.DataFrame, limit: int = BAR_LIMIT) -> pd.DataFrame:
    """At most `limit` bars for the path's pieces (in path order, start times rising): each piece
    its own bar when they fit; else adjacent pieces of one kind on one rank within one time bin
    (span / limit, widened until the budget holds) merge; past that, pieces of any kind within a
    bin on one rank, then within a bin on its busiest rank; a bar is coloured by the kind that
    holds most of its time. Rows: rank, kind, name, via, start_us,
    dur_us (the bar's extent: first start to last end), busy_us (the pieces' own time), pieces."""
    seg = segments[segments["dur_us"] > 0].reset_index(drop=True)
    cols = ["rank", "kind", "name", "via", "start_us", "dur_us", "busy_us", "pieces"]
    if len(seg) <= limit:
        return seg.assign(busy_us=seg["dur_us"].astype(float), pieces=1, kind=seg["kind"].astype(str))[cols]
    rank = seg["rank"].to_numpy()
    kind = seg["kind"].astype(str).to_numpy()
    start = seg["start_us"].to_numpy(float)
    end = start + seg["dur_us"].to_numpy(float)
    span = max(float(end.max() - start.min()), 1e-9)
    rank_cut = np.r_[True, rank[1:] != rank[:-1]]
    kind_cut = np.r_[True, kind[1:] != kind[:-1]]
    new = rank_cut
    for cuts in (rank_cut | kind_cut, rank_cut, np.zeros(len(seg), bool)):
        # as fine as the budget allows: by kind and time bin, then by time bin alone
        bins = max(int(limit), 1)
        while bins >= 1:
            b = np.minimum(np.floor((start - start.min()) / (span / bins)).astype(np.int64), bins - 1)
            new = cuts | np.r_[True, b[1:] != b[:-1]]
            if int(new.sum()) <= limit:
                break
            bins //= 2
        if int(new.sum()) <= limit:
            break
    group = np.cumsum(new) - 1
    first = np.flatnonzero(new)
    last = np.r_[first[1:] - 1, len(seg) - 1]
    per = pd.DataFrame({"g": group, "kind": kind, "dur": seg["dur_us"].to_numpy(float)})
    by_kind = per.groupby(["g", "kind"], sort=False)["dur"].sum().reset_index()
    top = by_kind.sort_values(["g", "dur"], ascending=[True, False], kind="stable").drop_duplicates("g")
    busy = per.groupby("g")["dur"].sum().to_numpy()
    per["rank"] = rank
    top_rank = per.groupby(["g", "rank"], sort=False)["dur"].sum().reset_index()
    top_rank = top_rank.sort_values(["g", "dur"], ascending=[True, False], kind="stable").drop_duplicates("g")
    pieces = np.diff(np.r_[first, len(seg)])
    names = seg["name"].astype(str).to_numpy()[first]
    more = np.where(pieces > 1, " (+" + (pieces - 1).astype(str) + " more)", "")
    return pd.DataFrame(
        {
            "rank": top_rank.set_index("g").loc[np.arange(len(first)), "rank"].to_numpy(),
            "kind": top.set_index("g").loc[np.arange(len(first)), "kind"].to_numpy(),
            "name": names.astype(object) + more.astype(object),
            "via": seg["via"].astype(str).to_numpy()[first],
            "start_us": start[first],
            "dur_us": end[last] - start[first],
            "busy_us": busy,
            "pieces": pieces,
        }
    )


def critical_path_figure(segments: pd.DataFrame, *, origin_us: float | None = None, title: str = "") -> go.Figure:
    """Bars of a CriticalPath's `segments` on one lane per rank (µs from `origin_us`, default the
    path's start), with the cross-rank hand-offs joined by a line."""
    import plotly.graph_objects as go

    seg = bounded_segments(segments)
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
                customdata=np.stack([part["via"].astype(str).to_numpy(), part["busy_us"].to_numpy(float)], axis=1),
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
    merged = int((segments["dur_us"] > 0).sum())
    if len(seg) < merged:
        title = f"{title} ({merged:,} pieces drawn as {len(seg):,} bars: hover a bar for its pieces)".strip()
    fig.update_layout(
        barmode="overlay",
        title=title,
        meta={"pieces": merged, "bars": len(seg)},
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
