"""Explore's Analysis tables of a trace read through its store, rank by rank (issue 31, item 21).

Why: `app.views.analysis_tables` builds them from a whole events table, which a trace over the
whole-table budget (engine.trace.store.handle) does not have. Here each rank's columns are read
from its own Parquet files and reduced to small tables that add up across ranks:

- the per-(rank, step) breakdown is `engine.analysis.ranks.summarize` (the Ranks page's table:
  the same TimeBreakdown of each rank, cached beside the store);
- the kernel table is `selftime.time_by` of each rank (self time nests within a lane, and a lane
  is one rank's), summed per name; GPU work when any rank has some, else cpu_ops, as
  `selftime.kernel_table` decides;
- kernel classes are `kernels.class_shares` of each rank, summed per class.

Memory: one rank's columns at a time per worker. Ranks fan out with `engine.fanout.map_ranks`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from engine.trace.vocab import GPU_ACTIVITY_CATS, GPU_CATS

_COLS = ["cat", "name", "pid", "tid", "stream", "ts_us", "dur_us"]


@dataclass(frozen=True, kw_only=True)
class _Task:
    store: str
    rank: int
    gpu: bool


def _rank_tables(task: _Task) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(time_by rows, class_shares rows) of one rank. Module-level: pickles to Dask workers."""
    from engine.analysis.selftime import time_by
    from engine.trace.kernels import class_shares
    from engine.trace.store.read import rank_events

    ev = rank_events(task.store, task.rank, _COLS)
    if task.gpu:  # GPU lanes hold GPU rows only: self times need nothing else
        ev = ev[ev["cat"].isin(GPU_ACTIVITY_CATS)]
    return time_by(ev, GPU_CATS if task.gpu else ("cpu_op",)), class_shares(ev)


def _merge_time_by(parts: list[pd.DataFrame]) -> pd.DataFrame:
    t = pd.concat([p for p in parts if len(p)], ignore_index=True) if any(len(p) for p in parts) else parts[0]
    g = t.groupby("name", sort=True).agg(
        kind=("kind", "first"), self_us=("self_us", "sum"), total_us=("total_us", "sum"), count=("count", "sum")
    )
    g["mean_us"] = g["total_us"] / g["count"]
    total = float(g["self_us"].sum())
    g["share_pct"] = 100.0 * g["self_us"] / total if total > 0 else 0.0
    g = g.sort_values("self_us", ascending=False, kind="stable").reset_index()
    return g[["name", "kind", "self_us", "total_us", "count", "mean_us", "share_pct"]]


def _merge_classes(parts: list[pd.DataFrame]) -> pd.DataFrame:
    t = pd.concat([p for p in parts if len(p)], ignore_index=True) if any(len(p) for p in parts) else parts[0]
    if not len(t):
        return pd.DataFrame({"class": [], "kernels": [], "dur_us": [], "share": []})
    g = t.groupby("class", sort=False).agg(kernels=("kernels", "sum"), dur_us=("dur_us", "sum")).reset_index()
    total = float(g["dur_us"].sum())
    g["share"] = g["dur_us"] / total if total > 0 else 0.0
    return g.sort_values(["dur_us", "class"], ascending=[False, True]).reset_index(drop=True)


def analysis_tables(store, *, scheduler: str | None = None, progress=None) -> dict:
    """{"breakdown", "per_rank", "mean", "kernels", "classes"} as app.views.analysis_tables."""
    from engine.analysis import ranks as rk
    from engine.analysis.breakdown import TimeBreakdown
    from engine.analysis.selftime import kernel_columns
    from engine.fanout import map_ranks
    from engine.trace.store.sql import connect

    store = Path(store)
    con = connect(store, memory_bytes=256 << 20)
    try:
        cats = ", ".join(f"'{c}'" for c in GPU_CATS)
        gpu = bool(con.execute(f"SELECT count(*) FROM events WHERE cat IN ({cats})").fetchone()[0])
    finally:
        con.close()
    table = rk.summarize(store, scheduler=scheduler, progress=progress).drop(columns=["step_index"])
    bd = TimeBreakdown(table=table)
    tasks = [_Task(store=str(store), rank=r, gpu=gpu) for r in rk.read.ranks(store)]
    parts = map_ranks(_rank_tables, tasks, scheduler=scheduler, progress=progress)
    return {
        "breakdown": bd.table,
        "per_rank": bd.per_rank(),
        "mean": bd.mean(),
        "kernels": kernel_columns(_merge_time_by([p[0] for p in parts]), gpu),
        "classes": _merge_classes([p[1] for p in parts]),
    }


__all__ = ["analysis_tables"]
