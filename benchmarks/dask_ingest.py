"""Per-rank store ingestion fanned out with Dask: 1 worker against 2 (issue 22's Dask must-show).

    python benchmarks/dask_ingest.py [--ranks 64] [--trace PATH] [--out benchmarks/results/dask_ingest.json]

Builds a fleet from one shared real GPU trace (engine.testing.fleet: a copy per rank with
per-rank perturbed durations), then builds its trace store (engine.trace.store.build, no cache)
serially, and through a LocalCluster of 1 and of 2 single-threaded worker processes reached by
its scheduler address (the `--scheduler tcp://...` code path), built by engine.fanout.local_cluster
as `--scheduler local` builds them. Cluster start-up is outside the
timed region (it is paid once per session, not per rank); each configuration is timed once in
interleaved order after one warm-up build, and the stores must be identical (row counts and
the sum of durations per rank). The load average is recorded beside the figures: the machine
is shared.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# benchmarks/distributed.py would shadow the `distributed` package: drop this script's folder
sys.path[:] = [str(ROOT)] + [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
SHARED = Path(os.environ.get("MYSTIQUE_SHARED_TRACES", ROOT.parent / "shared" / "traces"))
DEFAULT_TRACE = SHARED / "tracelens_b200_eager" / "eager_trace.json.gz"


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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=64)
    ap.add_argument("--trace", type=Path, default=DEFAULT_TRACE)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "dask_ingest.json")
    args = ap.parse_args()
    from distributed import Client

    from engine.fanout import local_cluster
    from engine.testing.fleet import make_fleet

    with tempfile.TemporaryDirectory(prefix="dask-ingest-") as tmp:
        os.environ["MYSTIQUE_CACHE_DIR"] = str(Path(tmp) / "cache")
        folder = Path(tmp) / "fleet"
        paths = make_fleet(args.trace, folder, args.ranks)
        json_bytes = sum(p.stat().st_size for p in paths)
        clusters = {w: local_cluster(w) for w in (1, 2)}  # as `--scheduler local` builds them
        try:
            for c in clusters.values():
                Client(c).close()  # workers up before timing
            _build(folder, clusters[2].scheduler_address)  # warm-up: imports in the workers
            _build(folder, clusters[1].scheduler_address)
            load0 = os.getloadavg()[0]
            walls: dict[str, float] = {}
            rows: dict[str, list] = {}
            for name, sched in (
                ("serial", "serial"),
                ("workers_1", clusters[1].scheduler_address),
                ("workers_2", clusters[2].scheduler_address),
            ):
                walls[name], rows[name] = _build(folder, sched)
                print(f"{name}: {walls[name]:.2f} s", file=sys.stderr)
            load1 = os.getloadavg()[0]
        finally:
            for c in clusters.values():
                c.close()
    same = rows["serial"] == rows["workers_1"] == rows["workers_2"]
    events = sum(r[1] for r in rows["serial"])
    result = {
        "input": {"source": os.path.relpath(args.trace, SHARED), "ranks": args.ranks, "events": events,
                  "json_bytes": json_bytes},
        "wall_s": walls,
        "speedup_2_over_1": walls["workers_1"] / walls["workers_2"],
        "identical_stores": same,
        "load_average": [load0, load1],
        "cpus": os.cpu_count(),
    }  # fmt: skip
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
