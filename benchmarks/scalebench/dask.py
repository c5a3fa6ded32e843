"""Per-rank store ingestion fanned out with Dask: 1 worker against 2 (issue 22's Dask target).

    python benchmarks/scale.py --only dask [--quick]

Builds a fleet of 64 ranks (quick: 16) from one shared real GPU trace (engine.testing.fleet: a
JSON copy per rank with per-rank perturbed durations), then builds its trace store
(engine.trace.store.build, no cache) serially and through LocalClusters of 1 and of 2
single-threaded worker processes reached by their scheduler address: the `--scheduler
tcp://...` code path, the clusters built by engine.fanout.local_cluster as `--scheduler local`
builds them. Cluster start-up is outside the timed region (paid once per session, not per
rank); after one warm-up build per cluster, the three configurations are timed in interleaved
rounds and the median of each is reported. The stores must be identical (rows and summed
durations per rank). Target: 2 workers >= 1.6x faster than 1 on this 2-core machine.
A CPU-scaling control runs first: the same pure-Python loop in 1 and in 2 processes, which
says how much two processes can gain here at all (vCPUs can share a physical core).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import statistics
import time
from pathlib import Path

from engine import envvars

ROOT = Path(__file__).resolve().parents[2]
SHARED = Path(envvars.get("MYSTIQUE_SHARED_TRACES") or ROOT.parent / "shared" / "traces")
TRACE = SHARED / "tracelens_b200_eager" / "eager_trace.json.gz"
TARGET = 1.6


def _spin(n: int) -> int:
    s = 0
    for i in range(n):
        s += i * i % 7
    return s


def cpu_scaling(n: int = 6_000_000) -> float:
    """Throughput of 2 processes over 1 on a pure-Python loop (2.0 = two real cores)."""
    ctx = mp.get_context("spawn")
    with ctx.Pool(2) as pool:
        pool.map(_spin, [1000, 1000])  # both up
        t0 = time.perf_counter()
        pool.apply(_spin, (n,))
        one = time.perf_counter() - t0
        t0 = time.perf_counter()
        pool.map(_spin, [n, n], chunksize=1)
        two = time.perf_counter() - t0
    return 2 * one / two


def _build(folder: Path, scheduler: str) -> tuple[float, list]:
    from engine.trace.store.ingest import build
    from engine.trace.store.sql import connect

    t0 = time.perf_counter()
    store = build(folder, use_cache=False, scheduler=scheduler)
    wall = time.perf_counter() - t0
    con = connect(store)
    try:
        rows = con.execute("SELECT rank, count(*), sum(dur_us) FROM events GROUP BY rank ORDER BY rank").fetchall()
    finally:
        con.close()
    return wall, rows


def run(quick: bool, scratch: Path, rounds: int = 3) -> dict:
    from distributed import Client

    from engine.fanout import local_cluster
    from engine.testing.fleet import make_fleet

    ranks = 16 if quick else 64
    scratch.mkdir(parents=True, exist_ok=True)
    os.environ["MYSTIQUE_CACHE_DIR"] = str(scratch / "cache")
    scaling = cpu_scaling()
    folder = scratch / "fleet"
    paths = make_fleet(TRACE, folder, ranks)
    json_bytes = sum(p.stat().st_size for p in paths)
    clusters = {w: local_cluster(w) for w in (1, 2)}  # as `--scheduler local` builds them
    walls: dict[str, list[float]] = {"serial": [], "workers_1": [], "workers_2": []}
    rows: dict[str, list] = {}
    try:
        for c in clusters.values():
            Client(c).close()  # workers up before timing
        for c in clusters.values():
            _build(folder, c.scheduler_address)  # warm-up: imports in the workers
        load0 = os.getloadavg()[0]
        for _ in range(1 if quick else rounds):
            for name, sched in (
                ("serial", "serial"),
                ("workers_1", clusters[1].scheduler_address),
                ("workers_2", clusters[2].scheduler_address),
            ):
                wall, rows[name] = _build(folder, sched)
                walls[name].append(wall)
        load1 = os.getloadavg()[0]
    finally:
        for c in clusters.values():
            c.close()
    med = {k: statistics.median(v) for k, v in walls.items()}
    same = rows["serial"] == rows["workers_1"] == rows["workers_2"]
    speedup = med["workers_1"] / med["workers_2"]
    events = sum(r[1] for r in rows["serial"])
    return {
        "input": {"source": os.path.relpath(TRACE, SHARED), "ranks": ranks, "events": events, "json_bytes": json_bytes},
        "wall_s": walls,
        "median_s": med,
        "speedup_2_over_1": speedup,
        "cpu_scaling_2_over_1": scaling,
        "identical_stores": same,
        "load_average": [load0, load1],
        "cpus": os.cpu_count(),
        "summary": {
            "ranks": ranks,
            "speedup_2_over_1": round(speedup, 2),
            "cpu_scaling_2_over_1": round(scaling, 2),
            "identical_stores": same,
            "speedup_ok": speedup >= TARGET,
        },
    }
