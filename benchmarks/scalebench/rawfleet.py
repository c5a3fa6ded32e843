"""512 rank traces from raw JSON to a DP-1024 prediction: `mystique simulate FOLDER` (issue 31).

    python benchmarks/scale.py --only rawfleet [--quick]        (quick: 8 ranks)

Input: a folder of N Kineto rank files written as plain JSON by engine.testing.fleet.make_fleet
(hta_trace_diff/control.json.gz, rank 3 of an 8-rank NCCL job: 109k items, 75k complete events,
28 MB of JSON per rank; per-rank perturbed durations), in the scratch folder, deleted after.
Unlike the `fleet` section, which starts from a store written as Parquet, this starts from the
JSON: one fresh `mystique simulate FOLDER --what-if DP-1024 --json` (no `--fleet`: the folder is
over the loader's budget, so it goes rank by rank by itself), with an empty cache, so it
ingests every file (the store build, fanned out over a Dask LocalCluster of one single-threaded
worker process per core) and then simulates. Wall time of the whole command; ingest = wall minus
the simulator's own wall (its JSON's wall_s); peak RSS of the process tree (the command and its
Dask workers, sampled every 0.1 s). `MYSTIQUE_RAWFLEET_RANKS` picks the rank count.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

from engine import envvars

ROOT = Path(__file__).resolve().parents[2]
SHARED = Path(envvars.get("MYSTIQUE_SHARED_TRACES") or ROOT.parent / "shared" / "traces")
TRACE = SHARED / "hta_trace_diff" / "control.json.gz"
RANKS = 512
QUICK_RANKS = 8
DP = {"version": 1, "edits": [{"kind": "data_parallel", "ranks": 1024}]}


def _tree_rss(proc, peak: list[int], stop: threading.Event) -> None:
    import psutil

    try:
        me = psutil.Process(proc.pid)
    except psutil.Error:
        return
    while not stop.is_set():
        total = 0
        try:
            kids = me.children(recursive=True)
        except psutil.Error:
            kids = []
        for p in [me, *kids]:
            try:
                total += p.memory_info().rss
            except psutil.Error:
                pass
        peak[0] = max(peak[0], total)
        stop.wait(0.1)


def run(quick: bool, scratch: Path) -> dict:
    from engine.testing.fleet import make_fleet

    n = int(envvars.get("MYSTIQUE_RAWFLEET_RANKS") or (QUICK_RANKS if quick else RANKS))
    scratch.mkdir(parents=True, exist_ok=True)
    folder = scratch / "job"
    t0 = time.perf_counter()
    files = make_fleet(TRACE, folder, n)
    gen_s = time.perf_counter() - t0
    json_bytes = sum(f.stat().st_size for f in files)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MYSTIQUE_CACHE_DIR": str(scratch / "cache")}
    env.pop("MYSTIQUE_SCHEDULER", None)  # the default: a LocalCluster sized to the machine
    env.pop("MYSTIQUE_LOAD_MAX_BYTES", None)
    if quick:  # a few ranks fit whole tables: a low loader budget sends them the same way
        env["MYSTIQUE_LOAD_MAX_BYTES"] = str(64 << 20)
    cmd = [sys.executable, "-m", "engine.cli.main", "simulate", str(folder), "--what-if", json.dumps(DP), "--json"]
    load0 = os.getloadavg()[0]
    peak, stop = [0], threading.Event()
    try:
        t1 = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        th = threading.Thread(target=_tree_rss, args=(proc, peak, stop), daemon=True)
        th.start()
        out, err = proc.communicate()
        wall = time.perf_counter() - t1
        stop.set()
        th.join()
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        shutil.rmtree(scratch / "cache", ignore_errors=True)
    load1 = os.getloadavg()[0]
    if proc.returncode:
        return {"error": (err.strip().splitlines() or ["?"])[-1][:300], "summary": {"ok": False}}
    data = json.loads(out)
    ingest = wall - float(data["wall_s"])
    res = {
        "input": {"source": os.path.relpath(TRACE, SHARED), "ranks": n, "json_mib": round(json_bytes / 2**20)},
        "generate_s": round(gen_s, 1),
        "wall_s": round(wall, 1),
        "ingest_s": round(ingest, 1),
        "ingest_mib_per_s": round(json_bytes / 2**20 / max(ingest, 1e-9), 1),
        "simulate_s": round(float(data["wall_s"]), 1),
        "peak_rss_tree_mib": round(peak[0] / 2**20),
        "predicted_iteration_ms": data["predicted_iteration_ms"],
        "tasks": data["tasks"],
        "collectives_matched": data["collectives_matched"],
        "routed": "simulated rank by rank from the trace store" in err,
        "cpus": os.cpu_count(),
        "load_average": [round(load0, 2), round(load1, 2)],
    }
    res["summary"] = {
        k: res[k] for k in ("wall_s", "ingest_s", "simulate_s", "peak_rss_tree_mib", "predicted_iteration_ms", "routed")
    } | {"ranks": n}
    return res
