"""Timeline lanes (issue 32): python frames that fold away, busy spans for GPU rows, launch flows.

Split from timeline.py (which lays out and draws bars) because these answer questions about the
lanes themselves:
- `python_free_depth`: the sub-row of each non-python event when python frames are hidden, so
  `aten::` ops and runtime calls rise to the top of their thread instead of hiding under 40
  rows of `python_function` frames (a TimeSformer thread nests 53 deep).
- `busy_spans`: a GPU row over the bar budget is drawn as merged busy spans in the kernel's
  colour (a 92 %-busy GPU reads as busy at the whole-step window), never as one grey
  "grouped" bar.
- `window_flows`: lines from each drawn kernel back to the runtime call that launched it
  (linked by `correlation`), for the visible window, capped.
"""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd

from engine.figures.style import FLOW_LINE, GROUP_COLORS
from engine.trace.vocab import GPU_CATS, RUNTIME_CATS

# Launch lines drawn for one window: one SVG path, but past a few hundred they are a hatch.
WINDOW_FLOW_LIMIT = 300
# Kernels closer than this many pixels on screen merge into one busy span.
BUSY_GAP_PX = 1.0
BUSY_NAME = "GPU busy (merged kernels)"
FLOW_NAME = "launch → kernel"


def stack_depth(start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Nesting depth of intervals sorted by start (a stack of open ends)."""
    out: list[int] = []
    stack: list[float] = []
    pop, push, put = stack.pop, stack.append, out.append
    for s, e in zip(start.tolist(), end.tolist()):
        while stack and stack[-1] <= s:
            pop()
        put(len(stack))
        push(e)
    return np.asarray(out, np.int64)


def python_free_depth(laid: pd.DataFrame) -> np.ndarray:
    """Nesting depth of each event of a `lay_out` table (sorted by lane, start, -dur) among the
    non-python events of its lane; -1 for python frames."""

    n = len(laid)
    out = np.full(n, -1, np.int64)
    if n == 0:
        return out
    keep = laid["group"].to_numpy() != "python"
    idx = np.flatnonzero(keep)
    if len(idx) == 0:
        return out
    lanes = laid["lane_code"].to_numpy()[idx]
    s = laid["start_us"].to_numpy(float)[idx]
    e = s + laid["dur_us"].to_numpy(float)[idx]
    bounds = np.flatnonzero(np.r_[True, lanes[1:] != lanes[:-1], True])
    for a, b in itertools.pairwise(bounds):
        out[idx[a:b]] = stack_depth(s[a:b], e[a:b])
    return out


def busy_spans(y: np.ndarray, start: np.ndarray, end: np.ndarray, gap_us: float) -> pd.DataFrame:
    """Per row `y`, intervals merged where the next starts within `gap_us` of the run's end:
    columns y, start_us, end_us, dur_us, count, busy_us (the union of the intervals, so overlaps
    on one row are not counted twice)."""
    cols = ["y", "start_us", "end_us", "dur_us", "count", "busy_us"]
    if len(y) == 0:
        return pd.DataFrame(columns=cols)
    order = np.lexsort((start, y))
    y, s, e = y[order], start[order], end[order]
    out = []
    bounds = np.flatnonzero(np.r_[True, y[1:] != y[:-1], True])
    for a, b in itertools.pairwise(bounds):
        rs, re_ = s[a:b], np.maximum.accumulate(e[a:b])
        # a new span where this interval starts more than gap_us after everything before it ended
        new = np.r_[True, rs[1:] > re_[:-1] + gap_us]
        # busy time: the union of intervals (the part of each interval past the previous ends)
        prev_end = np.r_[-np.inf, re_[:-1]]
        own = np.clip(re_ - np.maximum(rs, prev_end), 0.0, None)
        run = np.cumsum(new) - 1
        k = int(run[-1]) + 1
        first = np.flatnonzero(new)
        last = np.r_[first[1:] - 1, len(rs) - 1]
        span = pd.DataFrame(
            {
                "y": np.full(k, y[a]),
                "start_us": rs[first],
                "end_us": re_[last],
                "count": np.bincount(run, minlength=k),
                "busy_us": np.bincount(run, weights=own, minlength=k),
            }
        )
        out.append(span)
    res = pd.concat(out, ignore_index=True)
    res["dur_us"] = res["end_us"] - res["start_us"]
    return res[cols]


def busy_trace(spans: pd.DataFrame, *, legend: bool = True):
    """Merged kernel spans in the kernel colour; hover: how many kernels, how busy."""
    import plotly.graph_objects as go

    dur = spans["dur_us"].to_numpy(float)
    busy = spans["busy_us"].to_numpy(float)
    pct = np.where(dur > 0, 100.0 * busy / np.maximum(dur, 1e-12), 100.0)
    return go.Bar(
        base=spans["start_us"].to_numpy(float),
        x=dur,
        y=-spans["y"].to_numpy(),
        orientation="h",
        name=BUSY_NAME,
        marker=dict(color=GROUP_COLORS["kernel"], opacity=0.75, line=dict(width=0)),
        showlegend=legend,
        width=0.85,
        customdata=np.stack([np.full(len(spans), None), spans["count"].to_numpy(), busy, pct], axis=1),
        hovertemplate=(
            "%{customdata[1]:,} kernels · busy %{customdata[2]:,.1f} µs (%{customdata[3]:.1f} %)"
            "<br>zoom in (drag) to draw each<extra></extra>"
        ),
    )


def window_flows(ev: pd.DataFrame, drawn: pd.DataFrame, limit: int = WINDOW_FLOW_LIMIT) -> tuple[list, int]:
    """(x, y) of lines from launch to kernel for the GPU work in `drawn` (bars of their own) whose
    launch is in the window `ev` (both from `prepare`), the longest `limit` first; and how many
    such pairs the window has. Segments are separated by None (one Scatter trace)."""
    if "correlation" not in ev.columns or len(drawn) == 0:
        return [], 0
    gpu = drawn[drawn["cat"].astype(str).isin(GPU_CATS) & drawn["correlation"].notna()]
    if len(gpu) == 0:
        return [], 0
    launch = ev[ev["cat"].astype(str).isin(RUNTIME_CATS) & ev["correlation"].notna()]
    launch = launch.drop_duplicates("correlation")[["correlation", "start_us", "y"]]
    pairs = gpu[["correlation", "start_us", "y", "dur_us"]].merge(launch, on="correlation", suffixes=("", "_l"))
    total = len(pairs)
    if total == 0:
        return [], 0
    pairs = pairs.nlargest(limit, "dur_us") if total > limit else pairs
    n = len(pairs)
    xs = np.empty(3 * n, dtype=object)
    ys = np.empty(3 * n, dtype=object)
    xs[0::3], xs[1::3], xs[2::3] = pairs["start_us_l"].to_numpy(float), pairs["start_us"].to_numpy(float), None
    ys[0::3], ys[1::3], ys[2::3] = -pairs["y_l"].to_numpy(float), -pairs["y"].to_numpy(float), None
    return [xs.tolist(), ys.tolist()], total


def flow_trace(xy: list):
    import plotly.graph_objects as go

    return go.Scatter(
        x=xy[0],
        y=xy[1],
        mode="lines",
        name=FLOW_NAME,
        line=dict(color=FLOW_LINE, width=1),
        hoverinfo="skip",
        showlegend=True,
    )
