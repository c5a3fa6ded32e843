"""Fleet simulate at 32, 128 and 512 ranks x ~225k events, unchanged and DP-1024 (issue 22).

    python benchmarks/scale.py --only fleet [--quick]       (quick: 4, 8 and 16 ranks)

Input: a trace store of N copies of one real GPU rank with per-rank perturbed durations
(engine.testing.fleet.make_fleet_store): hta_trace_diff/control.json.gz, rank 3 of an 8-rank
NCCL job (75k complete events, 60 NCCL kernels), its span tiled 3x in time (225k events per
rank). Generating the store is not timed. Each (size, what-if) runs `mystique simulate`'s
fleet path (engine.simulate.fleet.simulate_fleet on a LocalCluster, `--scheduler local`) in a
fresh subprocess: wall time of the whole simulate (reading the Parquet, building every graph,
matching, solving), peak RSS of the process tree (the caller plus its Dask workers, sampled
every 0.1 s; the caller's own ru_maxrss beside it), tasks and tasks/s.
Targets: 512 ranks in < 10 min, peak RSS < 12 GB, tasks/s at the largest size within 1.5x of
the smallest; DP-1024 never shortens the iteration. `MYSTIQUE_FLEET_SIZES=32,512` picks sizes.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from engine import envvars

ROOT = Path(__file__).resolve().parents[2]
SHARED = Path(envvars.get("MYSTIQUE_SHARED_TRACES") or ROOT.parent / "shared" / "traces")
TRACE = SHARED / "hta_trace_diff" / "control.json.gz"
TILES = 3
SIZES = (32, 128, 512)
QUICK_SIZES = (4, 8, 16)
DP = {"version": 1, "edits": [{"kind": "data_parallel", "ranks": 1024}]}
WALL_LIMIT_S = 600.0
RSS_LIMIT_MIB = 12 * 1024
RATIO_LIMIT = 1.5


def _child(store: str, spec: str, out: str) -> None:
    """In a fresh process: simulate the fleet, sampling the tree's RSS; write the figures."""
    import resource
    import threading

    import psutil

    from engine.simulate.fleet import simulate_fleet

    me = psutil.Process()
    peak = [0]
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            total = 0
            for p in [me, *me.children(recursive=True)]:
                try:
                    total += p.memory_info().rss
                except psutil.Error:
                    pass
            peak[0] = max(peak[0], total)
            stop.wait(0.1)

    th = threading.Thread(target=sample, daemon=True)
    th.start()
    t0 = time.perf_counter()
    res = simulate_fleet(Path(store), json.loads(spec) if spec != "null" else None, scheduler="local")
    wall = time.perf_counter() - t0
    stop.set()
    th.join()
    Path(out).write_text(
        json.dumps(
            {
                "wall_s": round(wall, 2),
                "build_s": round(res.build_s, 2),
                "solve_s": round(res.solve_s, 2),
                "peak_rss_tree_mib": round(peak[0] / 2**20, 1),
                "peak_rss_main_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
                "tasks": res.tasks,
                "tasks_per_s": round(res.tasks / wall, 1),
                "predicted_iteration_ms": round(res.predicted_iteration_ms, 4),
                "collectives_matched": res.collectives,
                "rounds": res.rounds,
            }
        )
    )


def _measure(store: Path, spec, scratch: Path, tag: str) -> dict:
    out = scratch / f"{tag}.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "benchmarks.scalebench.fleet", "--child", str(store), json.dumps(spec), str(out)]
    p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    if p.returncode != 0:
        return {"error": (p.stderr.strip().splitlines() or ["?"])[-1][:300]}
    return json.loads(out.read_text())


def run(quick: bool, scratch: Path) -> dict:
    from engine.testing.fleet import make_fleet_store

    env_sizes = envvars.get("MYSTIQUE_FLEET_SIZES") or ""
    sizes = tuple(int(x) for x in env_sizes.split(",") if x) if env_sizes else (QUICK_SIZES if quick else SIZES)
    scratch.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("MYSTIQUE_CACHE_DIR", str(scratch / "cache"))
    runs: dict[str, dict] = {}
    for n in sizes:
        folder = scratch / f"fleet{n}"
        t0 = time.perf_counter()
        make_fleet_store(TRACE, n, folder, seed=0, tiles=TILES)
        gen_s = time.perf_counter() - t0
        try:
            for tag, spec in (("unchanged", None), ("dp1024", DP)):
                load0 = os.getloadavg()[0]
                r = _measure(folder, spec, scratch, f"{n}_{tag}")
                r["load_avg_1m"] = [round(load0, 2), round(os.getloadavg()[0], 2)]
                r["store_gen_s"] = round(gen_s, 1)
                runs[f"{n}_{tag}"] = r
                print(f"fleet {n} {tag}: {json.dumps(r)}", flush=True)
        finally:
            shutil.rmtree(folder, ignore_errors=True)
    return {
        "input": {"source": os.path.relpath(TRACE, SHARED), "tiles": TILES},
        "runs": runs,
        "summary": _summary(sizes, runs),
    }


def _summary(sizes, runs: dict) -> dict:
    lo, hi = f"{min(sizes)}_unchanged", f"{max(sizes)}_unchanged"
    ok = [k for k in runs if "error" not in runs[k]]
    out: dict = {f"{k}": {x: runs[k][x] for x in ("wall_s", "peak_rss_tree_mib", "tasks", "tasks_per_s")} for k in ok}
    if lo in ok and hi in ok:
        ratio = runs[lo]["tasks_per_s"] / max(runs[hi]["tasks_per_s"], 1e-9)
        out["tasks_per_s_ratio_smallest_over_largest"] = round(ratio, 2)
        out["ratio_ok"] = ratio <= RATIO_LIMIT
    big = [k for k in ok if k.startswith(f"{max(sizes)}_")]
    out["largest_wall_ok"] = bool(big) and all(runs[k]["wall_s"] < WALL_LIMIT_S for k in big)
    out["largest_rss_ok"] = bool(big) and all(runs[k]["peak_rss_tree_mib"] < RSS_LIMIT_MIB for k in big)
    dp_ok = [
        runs[f"{n}_dp1024"]["predicted_iteration_ms"] >= runs[f"{n}_unchanged"]["predicted_iteration_ms"]
        for n in sizes
        if f"{n}_dp1024" in ok and f"{n}_unchanged" in ok
    ]
    out["dp_never_shorter"] = bool(dp_ok) and all(dp_ok)
    out["errors"] = {k: runs[k]["error"] for k in runs if "error" in runs[k]}
    return out


if __name__ == "__main__" and len(sys.argv) == 5 and sys.argv[1] == "--child":
    _child(sys.argv[2], sys.argv[3], sys.argv[4])
