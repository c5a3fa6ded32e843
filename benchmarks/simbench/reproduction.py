"""Reproduction (unchanged traces), speed (tasks/s) and the 1,024-rank data-parallel what-if."""

from __future__ import annotations

import json
import statistics
import time

from benchmarks.simbench.common import ROOT, SAMPLES, SHARED, load, load1


def reproduction() -> dict:
    """Every sample trace and every shared Kineto trace simulated unchanged: predicted vs measured
    iteration (mean ProfilerStep span); traces without a step span are listed and excluded."""
    from engine.simulate import simulate

    # one job per sample folder (a multi-rank sample's Kineto files load together as its ranks);
    # every shared Kineto file on its own (hta_trace_diff's two files are different runs)
    groups = [sorted(d.glob("*_kineto.json.gz")) for d in sorted(SAMPLES.iterdir()) if d.is_dir()]
    groups = [g for g in groups if g]
    if (SHARED / "MANIFEST.json").exists():
        man = json.loads((SHARED / "MANIFEST.json").read_text())
        groups += [[SHARED / m["path"]] for m in man if m["kind"] == "kineto"]
    rows, excluded = [], []
    for files in groups:
        f = files[0]
        r = simulate(load(*files)).to_json()
        name = (
            str(f.parent.relative_to(ROOT))
            if len(files) > 1
            else str(f.relative_to(ROOT.parent if SHARED in f.parents else ROOT))
        )
        if r["measured_iteration_ms"] is None:
            excluded.append({"trace": name, "reason": "no ProfilerStep span", "tasks": r["tasks"]})
            continue
        rows.append(
            {
                "trace": name,
                "measured_ms": r["measured_iteration_ms"],
                "predicted_ms": r["predicted_iteration_ms"],
                "error_pct": r["error_pct"],
                "tasks": r["tasks"],
                "cpu_only": r["cpu_only"],
                "ranks": r["ranks"],
                "edges": r["edges"],
            }
        )
    errs = [abs(r["error_pct"]) for r in rows]
    return {
        "traces": rows,
        "excluded": excluded,
        "mean_abs_error_pct": statistics.mean(errs) if errs else None,
        "max_abs_error_pct": max(errs) if errs else None,
    }


def _largest_shared(k: int = 3) -> list:
    if not (SHARED / "MANIFEST.json").exists():
        return []
    man = json.loads((SHARED / "MANIFEST.json").read_text())
    kin = sorted((m for m in man if m["kind"] == "kineto"), key=lambda m: -m["events"])
    return [(SHARED / m["path"], m["events"]) for m in kin[:k]]


def speed(runs: int = 15) -> dict:
    """Simulated tasks/s on the largest shared Kineto traces (MANIFEST.json, by event count).

    Per run: `build_graph` (task table, points, every dependency rule) then `solve` (the list
    scheduler), timed separately; the trace is loaded once before (loading is not simulation).
    Reported: the scheduler alone and end to end (build + schedule), medians of `runs` runs; and
    `simulate()`'s own `tasks_per_s` (the same quantity, from the CLI's code path)."""
    from engine.simulate import SimConfig, build_graph, simulate, solve

    out = {}
    for f, events in _largest_shared():
        tr = load(f)
        build_graph(tr.events, SimConfig())  # warm imports and caches
        sims, builds, api = [], [], []
        for _ in range(runs):
            t0 = time.perf_counter()
            g = build_graph(tr.events, SimConfig())
            t1 = time.perf_counter()
            s = solve(g)
            t2 = time.perf_counter()
            builds.append(t1 - t0)
            sims.append(t2 - t1)
        for _ in range(3):
            api.append(simulate(tr).tasks_per_s)
        n = g.n_tasks
        b, s_ = statistics.median(builds), statistics.median(sims)
        row = {
            "events": events,
            "tasks": n,
            "rounds": s.rounds,
            "build_s_median": b,
            "schedule_s_median": s_,
            "tasks_per_s_schedule": n / s_,
            "tasks_per_s_build_and_schedule": n / (b + s_),
            "tasks_per_s_build_and_schedule_best": n / (min(builds) + min(sims)),
            "simulate_api_tasks_per_s_median": statistics.median(api),
            "loadavg_1m": load1(),
        }
        out[f.parent.name + "/" + f.name] = row
        print(
            f"  {f.parent.name}/{f.name}: {n} tasks, build {b * 1e3:.1f} ms + schedule {s_ * 1e3:.1f} ms -> "
            f"{row['tasks_per_s_build_and_schedule'] / 1e6:.2f} M tasks/s end to end "
            f"(scheduler alone {row['tasks_per_s_schedule'] / 1e6:.2f} M/s; load {row['loadavg_1m']:.1f})",
            flush=True,
        )
    return out


def dp(ranks=(8, 64, 256, 1024)) -> dict:
    """Data-parallel what-if from one rank's trace (hta_trace_diff/control, rank 3 of 8)."""
    from engine.simulate import simulate

    f = SHARED / "hta_trace_diff" / "control.json.gz"
    if not f.exists():
        return {"skipped": f"{f} not found"}
    t0 = time.perf_counter()
    tr = load(f)
    load_s = time.perf_counter() - t0
    out = {"trace": str(f.relative_to(ROOT.parent)), "load_s": load_s, "runs": {}}
    for n in ranks:
        t0 = time.perf_counter()
        r = simulate(tr, {"version": 1, "edits": [{"kind": "data_parallel", "ranks": n}]})
        wall = time.perf_counter() - t0
        out["runs"][str(n)] = {
            "predicted_iteration_ms": r.predicted_iteration_ms,
            "breakdown": r.breakdown,
            "dp": r.extra["dp"],
            "wall_s": wall,
            "tasks": r.graph.n_tasks,
        }
        print(f"  {n} ranks: {r.predicted_iteration_ms:.2f} ms in {wall:.2f} s", flush=True)
    return out
