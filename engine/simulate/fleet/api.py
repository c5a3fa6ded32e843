"""`simulate_fleet(store, spec)`: per-rank programs fanned out, collectives matched, all solved.

Stages (each reports progress; Ctrl-C or a raising progress callback cancels):
1. one fan-out task per rank (engine.fanout.map_ranks: serial, LocalCluster or tcp://): read
   the rank's columns from its Parquet, build its graph, apply the spec's events- and
   graph-stage edits (e.g. data_parallel), save its program (program.py) in a work folder;
2. match the ranks' collective tasks (engine.simulate.collectives.match_groups: rank-independent
   name and occurrence index, vectorised; the members' trace must show them ending together);
3. estimate the memory of the solve and refuse in one line when it cannot fit;
4. solve all ranks together (solve.py) and reduce to per-rank figures.

Why the results equal engine.simulate.simulate on the same ranks: a rank's graph built alone
is the rank's part of the whole-fleet graph (every rule but collectives is per rank), the
points' times are shifted to the fleet's earliest event, and a barrier's value is the latest
member arrival that the whole-graph edges impose (tests/test_fleet_sim.py compares them).
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from engine.errors import TraceError
from engine.progress import Progress, report
from engine.simulate.fleet.program import RankJob, build_program, store_ranks
from engine.simulate.fleet.solve import FleetSolver, RankState

# bytes the solve holds per point (d, T, front-side copies) and per edge (src, dst, w, src lane,
# plus the sort's temporaries), measured on the hta fleet and rounded up
POINT_BYTES = 24
EDGE_BYTES = 40


@dataclass(kw_only=True)
class FleetResult:
    """Per-rank predictions of a fleet (arrays indexed like `ranks`) and the run's costs."""

    ranks: np.ndarray
    step_ms: np.ndarray  # mean predicted ProfilerStep span per rank (whole span when no steps)
    measured_step_ms: np.ndarray  # the trace's own mean step span per rank (NaN without steps)
    wait_ms: np.ndarray  # time the rank's collectives waited for the last member
    last_count: np.ndarray  # collective instances this rank arrived at last
    tasks: int
    collectives: int  # matched instances
    unmatched: int  # collective tasks left with their own timing
    wall_s: float
    build_s: float
    solve_s: float
    rounds: int
    warnings: list[str] = field(default_factory=list)
    report: dict[str, Any] = field(default_factory=dict)

    @property
    def predicted_iteration_ms(self) -> float:
        """The fleet's iteration: the slowest rank's step."""
        return float(np.max(self.step_ms)) if len(self.step_ms) else 0.0

    @property
    def tasks_per_s(self) -> float:
        return self.tasks / self.wall_s if self.wall_s > 0 else 0.0

    def stragglers(self, top: int = 5) -> list[dict]:
        """Ranks that most often arrived last at a collective (the others waited for them)."""
        order = np.lexsort((self.wait_ms, -self.last_count))
        o = [int(i) for i in order if self.last_count[i] > 0][:top]
        return [
            {
                "rank": int(self.ranks[i]),
                "last_at": int(self.last_count[i]),
                "wait_ms": round(float(self.wait_ms[i]), 3),
                "step_ms": round(float(self.step_ms[i]), 3),
            }
            for i in o
        ]

    def to_json(self) -> dict:
        return {
            "ranks": len(self.ranks),
            "predicted_iteration_ms": round(self.predicted_iteration_ms, 4),
            "step_ms": {str(int(r)): round(float(s), 4) for r, s in zip(self.ranks, self.step_ms)},
            "tasks": self.tasks,
            "collectives_matched": self.collectives,
            "collective_tasks_unmatched": self.unmatched,
            "wall_s": round(self.wall_s, 3),
            "build_s": round(self.build_s, 3),
            "solve_s": round(self.solve_s, 3),
            "tasks_per_s": round(self.tasks_per_s, 1),
            "stragglers": self.stragglers(),
            "warnings": self.warnings,
            "report": self.report,
        }


def is_store(path: Path) -> bool:
    """Whether `path` is a trace store folder (manifest.json and events/ partitions)."""
    p = Path(path)
    return p.is_dir() and (p / "manifest.json").is_file() and (p / "events").is_dir()


def simulate_fleet(
    store: Path,
    spec: Any = None,
    *,
    config=None,
    scheduler: str | None = None,
    progress: Progress | None = None,
    work_dir: Path | None = None,
) -> FleetResult:
    """Predict every rank of the trace store at `store` under `spec` (see the module doc)."""
    from engine.fanout import map_ranks, resolve
    from engine.simulate.config import SimConfig
    from engine.simulate.whatif import WhatIfSpec

    t0 = time.perf_counter()
    store = Path(store)
    if not is_store(store):
        raise TraceError("is not a trace store folder (manifest.json and events/)", store)
    mode = resolve(scheduler)
    cfg = config or SimConfig()
    wspec = spec if isinstance(spec, WhatIfSpec) else WhatIfSpec.parse(spec or {"version": 1, "edits": []})
    warnings: list[str] = []
    late = [type(e).__name__ for e in wspec.edits if type(e).stage == "result"]
    if late:
        warnings.append(f"result-stage edit(s) {', '.join(late)} are not applied by the fleet simulator")
    ranks = store_ranks(store)
    if not ranks:
        raise TraceError("the store holds no events", store)
    manifest = json.loads((store / "manifest.json").read_text())
    worlds = [s.get("world_size") for s in manifest.get("sources", []) if s.get("world_size")]
    world = int(max(worlds)) if worlds else len(ranks)
    all_cols = any(type(e).stage == "events" for e in wspec.edits)
    own_work = work_dir is None
    work = Path(tempfile.mkdtemp(prefix="mystique-fleet-")) if work_dir is None else Path(work_dir)
    try:
        jobs = [
            RankJob(
                store=store,
                rank=r,
                out=work / f"rank{r}.npz",
                spec=wspec,
                config=cfg,
                world_size=world,
                all_columns=all_cols,
            )
            for r in ranks
        ]
        report(progress, 0.0, f"building {len(ranks)} rank graphs on {mode}")
        sub = None if progress is None else (lambda f, msg: report(progress, 0.5 * f, msg))
        done = map_ranks(build_program, jobs, scheduler=mode, progress=sub)
        build_s = time.perf_counter() - t0
        for d in done:
            warnings.extend(f"rank {d['rank']}: {w}" for w in d["warnings"][:3])
        check_memory(done)
        report(progress, 0.5, "matching collectives")
        t1 = time.perf_counter()
        res = _solve(done, progress)
        solve_s = time.perf_counter() - t1
    finally:
        if own_work:
            shutil.rmtree(work, ignore_errors=True)
    report(progress, 1.0, "done")
    rep: dict[str, Any] = {}
    for d in done:
        for k, v in d["report"].items():
            rep.setdefault(k, v)  # one rank's report stands for the edit (e.g. dp's ring model)
    return FleetResult(
        ranks=np.asarray(ranks),
        tasks=int(sum(d["tasks"] for d in done)),
        wall_s=time.perf_counter() - t0,
        build_s=build_s,
        solve_s=solve_s,
        warnings=warnings + res.pop("warnings"),
        report=rep,
        **res,
    )


def check_memory(done: list[dict]) -> None:
    """Refuse in one line when the solve's arrays exceed the simulation's memory limit
    (engine.simulate.budget: half the memory available now, or $MYSTIQUE_SIM_MAX_BYTES)."""
    from engine.simulate.budget import limit_bytes

    points = sum(d["points"] + d["collectives"] for d in done)
    edges = sum(d["edges"] + d["collectives"] for d in done)
    need = points * POINT_BYTES + edges * EDGE_BYTES
    limit, _ = limit_bytes()
    if need > limit:
        raise TraceError(
            f"the fleet's schedule needs ~{need / 2**30:.2f} GiB ({points:,} points, {edges:,} edges over "
            f"{len(done)} ranks), over the limit of {limit / 2**30:.2f} GiB (half the available memory, "
            "or MYSTIQUE_SIM_MAX_BYTES)"
        )


def _solve(done: list[dict], progress) -> dict:
    """Match, solve and reduce: the FleetResult fields that depend on the schedule."""
    from engine.simulate.collectives import match_groups

    progs = [dict(np.load(d["path"])) for d in done]
    nr = len(progs)
    t0 = min(float(p["t0_us"][0]) for p in progs)
    counts = np.array([len(p["c_sp"]) for p in progs])
    c_rank = np.repeat(np.arange(nr), counts)
    c_local = np.concatenate([np.arange(c) for c in counts]) if nr else np.zeros(0, np.int64)
    names = np.concatenate([p["c_name"].astype(str) for p in progs]) if counts.sum() else np.zeros(0, str)
    c_ts = np.concatenate([p["c_ts"] for p in progs])
    c_end = np.concatenate([p["c_end"] for p in progs])
    c_dur = np.concatenate([p["c_dur"] for p in progs])
    ranks_with_tasks = int(sum(1 for p in progs if int(p["n_tasks"][0]) > 0))
    if ranks_with_tasks >= 2 and len(names):
        members, gstart = match_groups(
            c_rank,
            names.astype(object),
            c_ts,
            ranks_with_tasks,
            pg=np.concatenate([p["c_pg"].astype(str) for p in progs]).astype(object),
            seq=np.concatenate([p["c_seq"] for p in progs]),
            comms=np.concatenate([p["c_comms"] for p in progs]),
        )
    else:
        members, gstart = np.zeros(0, np.int64), np.zeros(0, np.int64)
    if len(members):
        sizes = np.diff(np.append(gstart, len(members)))
        spread = np.maximum.reduceat(c_end[members], gstart) - np.minimum.reduceat(c_end[members], gstart)
        ok = spread <= np.maximum(0.02 * np.maximum.reduceat(c_dur[members], gstart), 200.0)
        members = members[np.repeat(ok, sizes)]
        gstart = np.concatenate([[0], np.cumsum(sizes[ok])])[:-1]
    warnings: list[str] = []
    unmatched = len(names) - len(members)
    if unmatched and ranks_with_tasks >= 2:
        warnings.append(
            f"{unmatched} collective task(s) had no counterpart on every rank that ended with them; "
            "they keep their own timing"
        )
    n_inst = len(gstart)
    sizes = np.diff(np.append(gstart, len(members))) if n_inst else np.zeros(0, np.int64)
    m_gid = np.repeat(np.arange(n_inst), sizes)
    m_rank, m_comm = c_rank[members], c_local[members]
    # the transfer is the shortest member's kernel (collectives.py): its duration for all members
    ep_d = np.concatenate([p["pt_d"][p["c_ep"]] for p in progs]) if len(names) else np.zeros(0)
    pure = np.minimum.reduceat(ep_d[members], gstart) if n_inst else np.zeros(0)
    m_ext = np.zeros(len(members), np.int64)
    states = []
    for r, p in enumerate(progs):
        sel = np.flatnonzero(m_rank == r)
        sel = sel[np.argsort(m_comm[sel], kind="stable")]
        m_ext[sel] = np.arange(len(sel))
        c = m_comm[sel]
        p["pt_d"][p["c_ep"][c]] = pure[m_gid[sel]]
        states.append(RankState(int(done[r]["rank"]), p, p["c_sp"][c], float(p["t0_us"][0]) - t0))
        for key in ("pt_d", "e_src", "e_dst", "e_w"):  # the state holds its own copies
            del p[key]
    solver = FleetSolver(states, progs, m_rank, m_comm, m_ext, m_gid, n_inst)
    rounds = solver.run(progress)
    # per-rank figures
    step = np.zeros(nr)
    measured = np.full(nr, np.nan)
    for r, (p, st) in enumerate(zip(progs, states)):
        T = st.T[: st.npts]
        if len(p["st_sp"]):
            step[r] = float(np.mean(T[p["st_ep"]] - T[p["st_sp"]])) / 1000.0
            measured[r] = float(np.mean(p["st_dur"])) / 1000.0
        elif len(T):
            step[r] = float(np.nanmax(T) - np.nanmin(T)) / 1000.0
    wait = np.zeros(nr)
    last = np.zeros(nr, np.int64)
    if len(members):
        val = solver.value[m_gid]
        arr = solver.arrival
        fin = np.isfinite(arr) & np.isfinite(val)
        np.add.at(wait, m_rank[fin], (val - arr)[fin] / 1000.0)
        is_last = fin & (arr == val)
        np.add.at(last, m_rank[is_last], 1)
    if not any(len(p["st_sp"]) for p in progs):
        warnings.append("no ProfilerStep span in the trace: a rank's step is its whole simulated span")
    return {
        "step_ms": step,
        "measured_step_ms": measured,
        "wait_ms": wait,
        "last_count": last,
        "collectives": n_inst,
        "unmatched": int(unmatched) if ranks_with_tasks >= 2 else 0,
        "rounds": rounds,
        "warnings": warnings,
    }
