"""Replay memory: the estimate made before the run vs the measured peak RSS of the run.

For every sample ET (sample_traces/) and every shared ET (../shared/traces, when present) this
replays the trace in a fresh process (CPU, 1 warm-up + 2 measured iterations, profiling on:
the heaviest configuration), with the peak RSS counter (VmHWM) reset right before the replay
so the peak is the replay's own, and records `ReplayResult.memory["rss_bound_bytes"]` (the
upper bound the engine computes before allocating, engine.replay.memory.rss_bound) next to the
measured peak. Prints a Markdown table and writes benchmarks/results/memory.json.

Traces of more than --big-ops nodes (the shared param_resnet ETs: three ResNet-50 training steps
at batch 32 x 224 x 224, 14k nodes, whose replay on one CPU core is minutes of convolution work
per iteration) run a bounded replay: no warm-up, one measured iteration, no profiling, one torch
thread (two threads stall at every barrier on a loaded 2-core machine). Every iteration
allocates the same tensors, so the first should reach the peak; the bound is computed for the
configuration that runs (rss_bound's profiling term is left out with the profiling).

    .venv/bin/python benchmarks/memory.py [--only NAME ...] [--timeout S]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("MYSTIQUE_SHARED_TRACES", ROOT.parent / "shared" / "traces"))

CHILD = r"""
import json, sys, time
import engine.trace as T
from engine.replay import ReplayConfig, replay
from engine.sysinfo import rss_bytes
tr = T.load(sys.argv[1])
ranks = sorted(set(tr.ops["rank"].astype(int).tolist()))
open("/proc/self/clear_refs", "w").write("5")  # reset VmHWM: the peak below is the replay's
rss0 = rss_bytes()
t0 = time.perf_counter()
big = len(tr.ops) > int(sys.argv[3])  # bounded replay (module docstring)
warmup, iters, profile = (0, 1, False) if big else (1, 2, True)
cfg = ReplayConfig(warmup=warmup, iters=iters, profile=profile, out_dir=sys.argv[2], num_threads=1 if big else None)
res = replay(tr, config=cfg, rank=ranks[0])
hwm = [int(l.split()[1]) * 1024 for l in open("/proc/self/status") if l.startswith("VmHWM")][0]
m = res.memory
print(json.dumps({"rss_before": rss0, "peak_rss": hwm, "bound": m["rss_bound_bytes"],
                  "planned_tensors": m["planned_peak_bytes"], "lazy": m["lazy"], "ops": res.coverage["selected"],
                  "replayed": res.coverage["replayed"], "seconds": round(time.perf_counter() - t0, 1),
                  "warmup": warmup, "iters": iters, "profile": profile}))
"""


def traces() -> list[tuple[str, Path]]:
    out = []
    for d in sorted((ROOT / "sample_traces").iterdir()):
        for f in sorted(d.glob("*_et.json*")):
            out.append((f"sample/{f.name.split('_et.json')[0]}", f))
    if SHARED.is_dir():
        for f in sorted(SHARED.rglob("*.json*")):
            name = f.name.lower()
            if (
                "et" in name.replace(".json", "").split("_")[-1:]
                or "_et." in name
                or "chakra" in name
                or name.endswith("_et.json.tar.gz")
            ):
                out.append((f"shared/{f.parent.name}", f))
    return out


def _runs(r: dict) -> str:
    return f"{r.get('warmup', 1)} + {r.get('iters', 2)}" + (", profiled" if r.get("profile", True) else "")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", nargs="*", default=None)
    ap.add_argument("--timeout", type=float, default=1800, help="seconds per trace")
    ap.add_argument("--big-ops", type=int, default=5000, help="ET nodes above which the replay is bounded")
    args = ap.parse_args()
    rows = []
    for name, path in traces():
        if args.only and not any(o in name for o in args.only):
            continue
        with tempfile.TemporaryDirectory() as tmp:
            env = {**os.environ, "PYTHONPATH": str(ROOT), "MYSTIQUE_CACHE_DIR": str(Path(tmp) / "cache")}
            t0 = time.time()
            try:
                p = subprocess.run(
                    [sys.executable, "-c", CHILD, str(path), str(Path(tmp) / "out"), str(args.big_ops)],
                    capture_output=True,
                    text=True,
                    timeout=args.timeout,
                    env=env,
                    cwd=ROOT,
                )
            except subprocess.TimeoutExpired:
                rows.append({"trace": name, "path": str(path), "error": f"timeout after {args.timeout:.0f} s"})
                print(f"{name}: timeout", file=sys.stderr)
                continue
            line = (p.stdout.strip().splitlines() or [""])[-1]
            try:
                r = json.loads(line)
            except json.JSONDecodeError:
                err = (p.stderr.strip().splitlines() or ["?"])[-1]
                rows.append({"trace": name, "path": str(path), "error": err[:200]})
                print(f"{name}: {err[:200]}", file=sys.stderr)
                continue
            r.update(trace=name, path=str(path), holds=r["bound"] >= r["peak_rss"], wall_s=round(time.time() - t0, 1))
            rows.append(r)
            print(f"{name}: bound {r['bound'] / 2**20:.0f} MiB, peak {r['peak_rss'] / 2**20:.0f} MiB", file=sys.stderr)
    out = ROOT / "benchmarks" / "results" / "memory.json"
    if args.only and out.exists():  # a partial run updates its rows and keeps the others
        fresh = {r["trace"] for r in rows}
        kept = [r for r in json.loads(out.read_text()).get("rows", []) if r["trace"] not in fresh]
        order = [n for n, _ in traces()]
        rows = sorted(kept + rows, key=lambda r: order.index(r["trace"]) if r["trace"] in order else len(order))
    mib = lambda b: f"{b / 2**20:,.0f}"  # noqa: E731
    print(
        "| trace | ops | replay (warm-up + iters) | planned tensors MiB | RSS before MiB | estimate (bound) MiB | "
        "measured peak MiB | bound/peak | holds |"
    )
    print("|---|---:|---|---:|---:|---:|---:|---:|:---:|")
    for r in rows:
        if "error" in r:
            print(f"| {r['trace']} | - | - | - | - | - | - | - | not run: {r['error']} |")
            continue
        print(
            f"| {r['trace']} | {r['ops']} | {_runs(r)} | {mib(r['planned_tensors'])} | {mib(r['rss_before'])} | {mib(r['bound'])} | "
            f"{mib(r['peak_rss'])} | {r['bound'] / r['peak_rss']:.2f} | {'yes' if r['holds'] else 'NO'} |"
        )
    out.write_text(json.dumps({"date": time.strftime("%Y-%m-%d %H:%M"), "rows": rows}, indent=2))
    return 0 if all(r.get("holds") for r in rows if "error" not in r) else 1


if __name__ == "__main__":
    sys.exit(main())
