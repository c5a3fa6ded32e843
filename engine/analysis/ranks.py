"""Per-rank, per-step summaries of a trace store, and the slow ranks among them (issue 22).

Why: a 512-rank job's events do not fit one process, but its overview does: one row per rank
and step (compute / communication / exposed communication / idle, ms) is a few thousand rows.
Each rank's row set is `TimeBreakdown` (engine.analysis.breakdown: the same definitions and
windows as the Analysis page) of that rank's events read from the store alone, so a rank costs
its own columns and memory, ranks fan out with `engine.fanout.map_ranks` (serial, a local Dask
cluster or a scheduler address), and the table is computed once per store content:

    <store>/summary/ranks.parquet     (written to a temporary sibling and renamed into place)

keyed by the store's content hash and `SUMMARY_VERSION` in its Parquet metadata; a warm open
reads only this file. Steps are the rank's `ProfilerStep#N` host spans (the manifest's
`iterations`), else the rank's whole span as one step.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from engine.analysis.breakdown import COLUMNS, PARTS, TimeBreakdown
from engine.errors import TraceError
from engine.outdir import atomic_fill
from engine.progress import Progress, report
from engine.trace.store import read

SUMMARY_VERSION = "r1"
SUMMARY = Path("summary") / "ranks.parquet"
# The breakdown reads only these columns (work categories, names, threads, times)
NEEDED = ["cat", "name", "pid", "tid", "ts_us", "dur_us"]
# A rank this much slower than the median step is flagged `slower_than_median`. Not "straggler":
# that is the rank the others wait for at collectives (engine/simulate/stragglers.py), and in a
# synchronised job a slow step is as often a rank that waited (docs/analysis.md).
SLOW_RANK_MIN_PCT = 2.0


@dataclass(frozen=True, kw_only=True)
class _Task:
    """One rank of one store: a fan-out item (pickles to Dask workers)."""

    store: str
    rank: int


def _rank_rows(task: _Task) -> pd.DataFrame:
    """The TimeBreakdown rows of one rank, from its store files only. Module-level: pickles."""
    ev = read.rank_events(task.store, task.rank, NEEDED)
    t = TimeBreakdown.from_events(ev).table
    t.insert(2, "step_index", np.arange(len(t), dtype=np.int64))
    return t


def rank_steps(store, rank: int) -> pd.DataFrame:
    """One rank's per-step rows (COLUMNS of TimeBreakdown plus `step_index`, 0.. in time order)."""
    return _rank_rows(_Task(store=str(store), rank=int(rank)))


def _key(store: Path) -> str:
    return f"{SUMMARY_VERSION}|{read.manifest(store).get('content_hash', store.name)}"


def cached(store) -> pd.DataFrame | None:
    """The store's summary table when it was built for this content and version, else None."""
    import pyarrow.parquet as pq

    store = Path(store)
    p = store / SUMMARY
    if not p.is_file():
        return None
    try:
        meta = pq.read_schema(p).metadata or {}
        if meta.get(b"mystique_summary", b"").decode() != _key(store):
            return None
        return pq.read_table(p).to_pandas()
    except (OSError, ValueError):  # a damaged file is rebuilt
        return None


def summarize(
    store, *, scheduler: str | None = None, progress: Progress | None = None, use_cache: bool = True
) -> pd.DataFrame:
    """Per (rank, step) rows of every rank of `store` (computed once, then read from the cache).

    Columns: rank, step, step_index, start_us, step_ms, compute_ms, communication_ms,
    exposed_communication_ms, idle_ms, basis. One fan-out task per rank on `scheduler`."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from engine.fanout import map_ranks, resolve

    store = Path(store)
    mode = resolve(scheduler)
    if not read.is_store(store):
        raise TraceError("not a trace store folder (no manifest.json)", store)
    if use_cache and (hit := cached(store)) is not None:
        report(progress, 1.0, "rank summaries cached")
        return hit
    ranks = read.ranks(store)
    if not ranks:
        raise TraceError("the trace store holds no events", store)
    parts = map_ranks(_rank_rows, [_Task(store=str(store), rank=r) for r in ranks], scheduler=mode, progress=progress)
    cols = [*COLUMNS[:2], "step_index", *COLUMNS[2:]]
    table = pd.concat([p for p in parts if len(p)], ignore_index=True) if any(len(p) for p in parts) else None
    table = pd.DataFrame(columns=cols) if table is None else table[cols]
    table["step"] = table["step"].astype(str)
    table["basis"] = table["basis"].astype(str)
    arrow = pa.Table.from_pandas(table, preserve_index=False)
    arrow = arrow.replace_schema_metadata({**(arrow.schema.metadata or {}), b"mystique_summary": _key(store).encode()})
    out = store / SUMMARY
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise TraceError(f"cannot write the rank summaries: {exc.strerror or exc}", out) from None
    atomic_fill(out, lambda fh: pq.write_table(arrow, fh), "cannot write the rank summaries: {}")
    return table


def per_rank(table: pd.DataFrame) -> pd.DataFrame:
    """One row per rank: steps and means over its steps (ms), as `TimeBreakdown.per_rank`."""
    if table.empty:
        return pd.DataFrame(columns=["rank", "steps", "step_ms", *PARTS, "basis"])
    return TimeBreakdown(table=table.drop(columns=["step_index"], errors="ignore")).per_rank()


def stragglers(table: pd.DataFrame) -> pd.DataFrame:
    """Slow ranks: ranks sorted by step time, slowest first, with their lateness against the median rank.

    Per rank (means over its steps): step_ms, vs_median_ms (step_ms - the median over ranks of
    the same step, averaged over steps), vs_median_pct, compute_vs_median_ms (compute is where a
    slow rank's time goes: in a synchronised job the others wait for it in collectives, so
    their exposed communication grows, not its), slowest_steps (steps in which it was the
    slowest rank), slower_than_median (vs_median_pct >= SLOW_RANK_MIN_PCT)."""
    cols = ["rank", "steps", "step_ms", "vs_median_ms", "vs_median_pct", "compute_ms", "compute_vs_median_ms"]
    cols += ["exposed_communication_ms", "idle_ms", "slowest_steps", "slower_than_median"]
    if table.empty:
        return pd.DataFrame(columns=cols)
    t = table[["rank", "step_index", "step_ms", "compute_ms", "exposed_communication_ms", "idle_ms"]].copy()
    g = t.groupby("step_index")
    t["d_step"] = t["step_ms"] - g["step_ms"].transform("median")
    t["d_comp"] = t["compute_ms"] - g["compute_ms"].transform("median")
    t["slowest"] = (t["step_ms"] == g["step_ms"].transform("max")) & (g["step_ms"].transform("size") > 1)
    r = t.groupby("rank", sort=True)
    out = r[["step_ms", "compute_ms", "exposed_communication_ms", "idle_ms"]].mean()
    out["steps"] = r.size()
    out["vs_median_ms"] = r["d_step"].mean()
    out["compute_vs_median_ms"] = r["d_comp"].mean()
    out["slowest_steps"] = r["slowest"].sum().astype(int)
    med = float(out["step_ms"].median())
    out["vs_median_pct"] = 100.0 * out["vs_median_ms"] / med if med > 0 else 0.0
    out["slower_than_median"] = (out["vs_median_pct"] >= SLOW_RANK_MIN_PCT) & (len(out) > 1)
    out = out.reset_index()[cols]
    return out.sort_values(
        ["step_ms", "compute_ms", "rank"], ascending=[False, False, True], kind="stable"
    ).reset_index(drop=True)


def step_grid(table: pd.DataFrame, part: str) -> pd.DataFrame:
    """`part` (a column: step_ms or one of PARTS) as a rank x step_index grid (NaN where a rank
    has fewer steps)."""
    if table.empty:
        return pd.DataFrame()
    return table.pivot_table(index="rank", columns="step_index", values=part, aggfunc="first").sort_index()


__all__ = ["SUMMARY", "SUMMARY_VERSION", "cached", "per_rank", "rank_steps", "step_grid", "stragglers", "summarize"]
