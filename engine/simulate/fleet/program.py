"""One rank's "program": its task graph reduced to numpy arrays, built alone from the store.

Why per rank: a rank's graph needs only its own events (every inferred edge but the collective
ones stays inside a rank: launches, syncs, event waits and thread hand-offs are matched by
rank), so each rank is read from its Parquet file, built, edited and reduced by one fan-out
task (engine.fanout.map_ranks) and only arrays come back: points per lane (`lane_ptr`, `pt_d`),
the intra-rank edges, and the rank's collective tasks with what cross-rank matching needs. No
per-event Python object outlives the task, and the whole-fleet events table never exists.

A program is saved as one `.npz` (uncompressed) in the run's work folder; `build_program`
returns a small summary (counts, warnings) to the caller.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

if TYPE_CHECKING:
    from engine.trace.model import TraceMeta

# Columns the graph builder and the rules read (TASK_COLUMNS and edges.py); the rest of the
# store's columns are read only when an events-stage edit (e.g. layers) is in the spec.
GRAPH_COLUMNS = (
    "cat",
    "name",
    "pid",
    "tid",
    "ts_us",
    "dur_us",
    "stream",
    "correlation",
    "pg_name",
    "coll_seq",
    "comms_id",
)
_STRINGS = ("cat", "name", "pid", "tid", "pg_name")


@dataclass(frozen=True, kw_only=True)
class RankJob:
    """One fan-out task: rank `rank` of the store at `store`, its program written to `out`."""

    store: Path
    rank: int
    out: Path
    spec: Any  # a WhatIfSpec (picklable frozen edits) or None
    config: Any  # SimConfig
    world_size: int
    all_columns: bool = False


def rank_files(store: Path, rank: int) -> list[Path]:
    """The rank's events Parquet parts, in source order."""
    files = list((Path(store) / "events" / f"rank={rank}").glob("src=*/part.parquet"))
    return sorted(files, key=lambda p: int(p.parent.name[4:]))


def store_ranks(store: Path) -> list[int]:
    """Ranks present in a store folder (its `events/rank=R` partitions), ascending."""
    ev = Path(store) / "events"
    ranks = [int(p.name[5:]) for p in ev.glob("rank=*") if p.name[5:].lstrip("-").isdigit()]
    return sorted(ranks)


def read_rank_events(store: Path, rank: int, columns=GRAPH_COLUMNS) -> pd.DataFrame:
    """The rank's events as the loader types them (categorical strings, nullable integers,
    `rank` int32), only `columns` (None: every stored column), in file order."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    files = rank_files(store, rank)
    if not files:
        from engine.errors import TraceError

        raise TraceError(f"the store has no events of rank {rank}", store)
    cols = None if columns is None else list(columns)
    tabs = []
    for f in files:
        schema = pq.read_schema(f)
        want = None if cols is None else [c for c in cols if c in schema.names]
        strs = [c for c in _STRINGS if c in schema.names and (want is None or c in want)]
        tabs.append(pq.read_table(f, columns=want, read_dictionary=strs))
    tab = pa.concat_tables(tabs, promote_options="permissive") if len(tabs) > 1 else tabs[0]
    mapper = {pa.int64(): pd.Int64Dtype()}.get
    df = tab.to_pandas(types_mapper=mapper)
    for c in _STRINGS:
        if c in df.columns and not isinstance(df[c].dtype, pd.CategoricalDtype):
            df[c] = df[c].astype("category")
    df.insert(0, "rank", np.full(len(df), rank, np.int32))
    return df


def build_graph_of(events: pd.DataFrame, spec, cfg, meta: TraceMeta):
    """(graph, edit context) of one events table with the spec's events- and graph-stage edits,
    as engine.simulate.simulate builds them."""
    from engine.simulate.budget import check_tasks
    from engine.simulate.graph import build_graph
    from engine.simulate.whatif import apply_edits
    from engine.trace.model import Trace

    empty = pd.DataFrame()
    trace = Trace(ops=empty, tensors=empty, events=events, flows=empty, meta=meta)
    ctx = apply_edits(spec, trace, cfg, stage="events")
    check_tasks(len(ctx.events), "simulate")
    g = build_graph(ctx.events, cfg)
    ctx.graph = g
    if "_scale" in g.tasks:
        g.scale_tasks(g.tasks["_scale"].fillna(1.0).to_numpy(np.float64))
    apply_edits(spec, trace, cfg, stage="graph", ctx=ctx)
    return g, ctx


def reduce_graph(g) -> dict[str, np.ndarray]:
    """The arrays of a one-rank graph the fleet solver needs (see the module doc)."""
    from engine.simulate.collectives import collective_ids, comm_mask
    from engine.trace.steps import host_mask, step_mask

    t = g.tasks
    npts = len(g.pt_d)
    sp = t["sp"].to_numpy(np.int64)
    ep = t["ep"].to_numpy(np.int64)
    o = np.argsort(g.e_dst, kind="stable")
    idt = np.int32 if npts < (1 << 31) - 1 else np.int64
    lane_first = np.zeros(npts + 1, bool)
    lane_first[g.lane_ptr[:-1]] = True
    ci = np.flatnonzero(comm_mask(g)) if len(t) else np.zeros(0, np.int64)
    names = g.text("name")
    c_sp = sp[ci]
    lau = g.launcher[ci]
    cats = g.text("cat")
    step = step_mask(names, host_mask(cats))
    si = np.flatnonzero(step)
    ts = t["ts_us"].to_numpy(np.float64)
    dur = t["dur_us"].to_numpy(np.float64)
    ids = collective_ids(t, ci)
    return {
        "c_pg": np.asarray(ids.get("pg", np.full(len(ci), "", object)), dtype=str),
        "c_seq": ids.get("seq", np.full(len(ci), -1, np.int64)),
        "c_comms": ids.get("comms", np.full(len(ci), -1, np.int64)),
        "lane_ptr": g.lane_ptr.astype(np.int64),
        "pt_d": g.pt_d.astype(np.float64),
        "e_src": g.e_src[o].astype(idt),
        "e_dst": g.e_dst[o].astype(idt),
        "e_w": g.e_w[o].astype(np.float64),
        "t0_us": np.array([g.t0_us]),
        "n_tasks": np.array([len(t)]),
        "c_sp": c_sp,
        "c_ep": ep[ci],
        "c_pred": np.where(lane_first[c_sp], -1, c_sp - 1),
        "c_pred_w": g.pt_d[c_sp],
        "c_lau": np.where(lau >= 0, sp[np.maximum(lau, 0)], -1),
        "c_lau_w": g.launch_w[ci].astype(np.float64),
        "c_name": np.asarray([names.values[k] for k in names.codes[ci]], dtype=str),
        "c_ts": ts[ci],
        "c_end": ts[ci] + dur[ci],
        "c_dur": dur[ci],
        "st_sp": sp[si],
        "st_ep": ep[si],
        "st_dur": dur[si],
    }


def build_program(job: RankJob) -> dict:
    """Read, build, edit and reduce one rank; write `job.out` (.npz); a summary of it.
    Module-level so that it pickles to Dask workers."""
    from engine.simulate.config import SimConfig
    from engine.simulate.whatif import WhatIfSpec

    cfg = job.config or SimConfig()
    spec = job.spec if job.spec is not None else WhatIfSpec.parse({"version": 1, "edits": []})
    events = read_rank_events(job.store, job.rank, None if job.all_columns else GRAPH_COLUMNS)
    meta: TraceMeta = {"world_size": job.world_size, "rank": job.rank}
    g, ctx = build_graph_of(events, spec, cfg, meta)
    arrays = reduce_graph(g)
    from engine.outdir import atomic_fill

    job.out.parent.mkdir(parents=True, exist_ok=True)
    atomic_fill(job.out, lambda fh: np.savez(fh, **arrays))  # type: ignore[arg-type]
    return {
        "rank": job.rank,
        "path": str(job.out),
        "events": len(events),
        "tasks": int(g.n_tasks),
        "points": len(g.pt_d),
        "edges": len(g.e_src),
        "lanes": len(g.lane_ptr) - 1,
        "collectives": len(arrays["c_sp"]),
        "warnings": list(g.warnings) + list(ctx.warnings),
        "report": {k: v for k, v in ctx.report.items() if k != "assumptions"},
    }
