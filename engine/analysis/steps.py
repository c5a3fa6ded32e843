"""Step windows: the `ProfilerStep#N` host spans every per-step analysis measures."""

from __future__ import annotations

import pandas as pd

from engine.trace import columns as _cols
from engine.trace.vocab import GPU_ACTIVITY_CATS, STEP_PREFIX


def step_spans(events: pd.DataFrame) -> pd.DataFrame:
    """ProfilerStep#N host spans, one row per step and rank: rank, name, ts_us, dur_us (time order).

    Why host only: Kineto also writes a GPU-side `ProfilerStep#N` annotation on the stream
    lanes; the step is the host's span (the iteration the trace measured)."""
    if events is None or len(events) == 0:
        return pd.DataFrame({"rank": [], "name": [], "ts_us": [], "dur_us": []})
    m = _cols.where(events["name"], lambda s: s.startswith(STEP_PREFIX)) & ~_cols.isin(events["cat"], GPU_ACTIVITY_CATS)
    cols = [c for c in ("rank", "name", "ts_us", "dur_us") if c in events.columns]
    out = events.loc[m, cols]
    if "rank" not in out.columns:
        out = out.assign(rank=0)
    return out.sort_values(["rank", "ts_us"], kind="stable")


def iteration_ms(events: pd.DataFrame) -> float | None:
    """Mean ProfilerStep span in ms over all steps and ranks, None when the trace has none."""
    st = step_spans(events)
    if st.empty:
        return None
    return float(st["dur_us"].mean()) / 1000.0
