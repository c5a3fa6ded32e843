"""Align two utilization time series on a common, normalized time axis.

Why normalize: an original step window and its replay differ in length (that difference is
exactly what the comparison measures), so curves are compared at the same *fraction* of their
window, u = (t - start) / (end - start) in [0, 1], resampled by linear interpolation onto a
shared grid. Each side's window is its `window_s` when recorded (the timed steps), else the span
of its samples.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

GRID_POINTS = 50


def samples_frame(metrics: dict[str, Any] | None) -> pd.DataFrame:
    """The samples of a metrics dict ({"samples": {col: list}, ...}) as a float DataFrame."""
    if not metrics or not metrics.get("samples"):
        return pd.DataFrame()
    cols = metrics["samples"]
    n = min((len(v) for v in cols.values()), default=0)
    return pd.DataFrame(
        {c: pd.to_numeric(pd.Series(v[:n], dtype="object"), errors="coerce").astype("float64") for c, v in cols.items()}
    )


def _window(df: pd.DataFrame, metrics: dict[str, Any]) -> tuple[float, float] | None:
    win = metrics.get("window_s")
    if isinstance(win, (list, tuple)) and len(win) == 2 and float(win[1]) > float(win[0]):
        return float(win[0]), float(win[1])
    if "t_s" in df and len(df) >= 2 and df["t_s"].max() > df["t_s"].min():
        return float(df["t_s"].min()), float(df["t_s"].max())
    return None


def align(
    original: dict[str, Any] | None, replay: dict[str, Any] | None, points: int = GRID_POINTS
) -> tuple[pd.DataFrame, dict[str, dict[str, float]]]:
    """(curves, summary): curves has column `u` then `<metric>_original` / `<metric>_replay` for
    every metric the two sides share; summary maps each shared metric to original/replay means
    over the window and the relative error of the replay mean.
    """
    a, b = samples_frame(original), samples_frame(replay)
    if a.empty or b.empty:
        return pd.DataFrame({"u": []}), {}
    wa, wb = _window(a, original or {}), _window(b, replay or {})
    if wa is None or wb is None:
        return pd.DataFrame({"u": []}), {}
    shared = [c for c in a.columns if c != "t_s" and c in b.columns]
    grid = np.linspace(0.0, 1.0, points)
    out: dict[str, Any] = {"u": grid}
    summary: dict[str, dict[str, float]] = {}
    for col in shared:
        ca, cb = _resample(a, col, wa, grid), _resample(b, col, wb, grid)
        out[f"{col}_original"], out[f"{col}_replay"] = ca, cb
        ma, mb = _nanmean(ca), _nanmean(cb)
        summary[col] = {
            "original_mean": ma,
            "replay_mean": mb,
            "error": abs(mb - ma) / abs(ma) if ma and math.isfinite(ma) and math.isfinite(mb) else math.nan,
        }
    return pd.DataFrame(out), summary


def _resample(df: pd.DataFrame, col: str, window: tuple[float, float], grid: np.ndarray) -> np.ndarray:
    lo, hi = window
    sub = df[["t_s", col]].dropna()
    sub = sub[(sub["t_s"] >= lo) & (sub["t_s"] <= hi)] if len(sub) else sub
    if len(sub) == 0:
        return np.full(len(grid), np.nan)
    u = (sub["t_s"].to_numpy() - lo) / (hi - lo)
    order = np.argsort(u, kind="stable")
    return np.interp(grid, u[order], sub[col].to_numpy()[order])


def _nanmean(x: np.ndarray) -> float:
    x = x[np.isfinite(x)]
    return float(x.mean()) if len(x) else math.nan
