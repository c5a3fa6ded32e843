"""GPU queue length and launch delay over time, one line per stream (engine.analysis.gpu_queue
computes them; this module draws).

Bounded: each stream is cut into at most `bins` equal time bins and a bin keeps its largest queue
length and launch delay (the peaks are what a reader looks for), so the figure holds at most
2 x bins points per stream and at most `max_streams` streams (the busiest ones).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

if TYPE_CHECKING:
    import plotly.graph_objects as go


def binned(lz: pd.DataFrame, bins: int = 500) -> pd.DataFrame:
    """Per (rank, device, stream) and time bin: t_ms (bin start from the first launch of the
    trace), queue_len max, launch_delay_us max."""
    if not len(lz):
        return pd.DataFrame({c: [] for c in ("rank", "device", "stream", "t_ms", "queue_len", "launch_delay_us")})
    t0 = float(lz["launch_ts_us"].min())
    span = max(float(lz["launch_ts_us"].max()) - t0, 1e-9)
    b = np.minimum((lz["launch_ts_us"].to_numpy() - t0) / span * bins, bins - 1).astype(np.int64)
    df = lz.assign(bin=b)
    out = df.groupby(["rank", "device", "stream", "bin"], sort=True).agg(
        queue_len=("queue_len", "max"), launch_delay_us=("launch_delay_us", "max")
    )
    out = out.reset_index()
    out["t_ms"] = out["bin"] * span / bins / 1e3
    return out.drop(columns="bin")


def queue_figure(lz: pd.DataFrame, bins: int = 500, max_streams: int = 8) -> go.Figure:
    """Two panels on one time axis: queue length at each launch, and launch delay (µs)."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.08)
    busiest = lz.groupby(["rank", "device", "stream"]).size().sort_values(ascending=False).head(max_streams)
    pts = binned(lz, bins)
    for r, d, s in busiest.index:
        p = pts[(pts["rank"] == r) & (pts["device"] == d) & (pts["stream"] == s)]
        label = f"rank {r} gpu {d} stream {s}"
        fig.add_trace(go.Scatter(x=p["t_ms"], y=p["queue_len"], mode="lines", name=label, legendgroup=label), 1, 1)
        fig.add_trace(
            go.Scatter(
                x=p["t_ms"], y=p["launch_delay_us"], mode="lines", name=label, legendgroup=label, showlegend=False
            ),
            2,
            1,
        )
    fig.update_yaxes(title_text="queue length", row=1, col=1)
    fig.update_yaxes(title_text="launch delay (µs)", row=2, col=1)
    fig.update_xaxes(title_text="ms from the first launch", row=2, col=1)
    fig.update_layout(height=420, margin=dict(l=10, r=10, t=30, b=30), legend=dict(orientation="h", y=1.08))
    return fig


__all__ = ["binned", "queue_figure"]
