"""Replay memory: the estimate made before the run vs the measured peak RSS of the run.

For every sample ET (sample_traces/), the TBE sample with TorchRec-sized tables (its weights
grown 40x to 256 MB: FBGEMM's own tables and optimizer state, issue 26), every shared ET
(../shared/traces, when present) and the 2-rank samples run distributed (the launcher's per-rank
estimate, engine.replay.budget, against the largest rank's own ru_maxrss) this
replays the trace in a fresh process (CPU, 1 warm-up + 2 measured iterations, profiling on:
the heaviest configuration), with the peak RSS counters (VmHWM, ru_maxrss) reset right before
the replay so the peak is the replay's own, and records `ReplayResult.memory["rss_bound_bytes"]` (the
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
from typing import TYPE_CHECKING

from engine import envvars

if TYPE_CHECKING:
    from benchmarks.report import num, table

ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(envvars.get("MYSTIQUE_SHARED_TRACES") or ROOT.parent / "shared" / "traces")

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
import resource
hwm = [int(l.split()[1]) * 1024 for l in open("/proc/self/status") if l.startswith("VmHWM")][0]
maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # reset with VmHWM above
m = res.memory
print(json.dumps({"rss_before": rss0, "peak_rss": max(hwm, maxrss), "bound": m["rss_bound_bytes"],
                  "resident": m.get("resident_bytes", 0),
                  "planned_tensors": m["planned_peak_bytes"], "lazy": m["lazy"], "ops": res.coverage["selected"],
                  "replayed": res.coverage["replayed"], "seconds": round(time.perf_counter() - t0, 1),
                  "warmup": warmup, "iters": iters, "profile": profile}))
"""


BIG_TBE_NUMEL = 64_000_000  # 256 MB of fp32 embedding weights (the sample's tables are 6 MB)


def big_tbe(folder: Path) -> Path:
    """The TBE sample's rank 0 with its tables grown to TorchRec-like size (the weights' numel is
    rewritten in every op that records it): the rows where FBGEMM's own memory dominates."""
    import gzip

    src = ROOT / "sample_traces" / "dlrm_tbe" / "dlrm_tbe_rank0_et.json.gz"
    out = folder / "dlrm_tbe_big_rank0_et.json"
    out.write_text(gzip.decompress(src.read_bytes()).decode().replace("1600000", str(BIG_TBE_NUMEL)))
    return out


DIST = r"""
import json, sys
from engine.replay import ReplayConfig
from engine.replay.distributed import DistConfig, replay_distributed
cfg = ReplayConfig(warmup=1, iters=2, profile=True, out_dir=sys.argv[1])
res = replay_distributed(sys.argv[2:], config=cfg, dist=DistConfig(), out_dir=sys.argv[1])
b = res.memory["world_budget"]
ranks = [json.load(open(r["replay_json"])) for r in res.ranks]
print(json.dumps({"rss_before": b["baseline_bytes"], "bound": max(b["per_rank_bytes"].values()),
                  "peak_rss": max(d["memory"]["peak_rss_bytes"] for d in ranks),
                  "planned_tensors": max(d["memory"]["planned_peak_bytes"] for d in ranks),
                  "resident": max(d["memory"].get("resident_bytes", 0) for d in ranks),
                  "ops": res.coverage["selected"], "replayed": res.coverage["replayed"],
                  "warmup": 1, "iters": 2, "profile": True, "lazy": False}))
"""


def traces() -> list[tuple[str, Path]]:
    out = []
    for d in sorted((ROOT / "sample_traces").iterdir()):
        for f in sorted(d.glob("*_et.json*")):
            out.append((f"sample/{f.name.split('_et.json')[0]}", f))
    out.append(("sample/dlrm_tbe_rank0 tables x40", Path("BIG_TBE")))  # built in the run's temp folder
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
    # distributed: the pre-launch per-rank estimate (engine.replay.budget) against the largest
    # peak RSS a rank measured (its own ru_maxrss, the whole rank process)
    for d in ("ddp", "dlrm_a2a", "dlrm_tbe"):
        files = sorted((ROOT / "sample_traces" / d).glob("*_rank*_et.json*"))
        out.append((f"distributed/{d} (2 ranks, per rank)", Path("DIST:" + ",".join(map(str, files)))))
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
            if str(path) == "BIG_TBE":
                path = big_tbe(Path(tmp))
            if str(path).startswith("DIST:"):
                cmd = [sys.executable, "-c", DIST, str(Path(tmp) / "out"), *str(path)[5:].split(",")]
            else:
                cmd = [sys.executable, "-c", CHILD, str(path), str(Path(tmp) / "out"), str(args.big_ops)]
            try:
                p = subprocess.run(
                    cmd,
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


# -- its section of docs/figures.md, beside the code that writes its results. benchmarks/report.py
# runs `docs_section` (and the `_docs_*` helpers) on the results file without importing this file
# (so the report stays standard-library only), giving it the formatters named below.
def docs_section(d: dict) -> list[str]:
    """Each ET replayed in a fresh process with the peak-RSS counter reset just before; the bound is
    what the engine computes before allocating (`engine.replay.memory.rss_bound`)."""
    mib = 2**20
    rows = [
        [
            r["trace"],
            num(r["ops"]),
            num(r["planned_tensors"] / mib, 0),
            num(r["rss_before"] / mib, 0),
            num(r["bound"] / mib, 0),
            num(r["peak_rss"] / mib, 0),
            f"{r['bound'] / r['peak_rss']:.2f}",
            num(r["holds"]),
        ]
        for r in d["rows"]
        if "error" not in r
    ]
    return table(
        [
            "trace",
            "ops",
            "planned tensors MiB",
            "RSS before MiB",
            "estimate (bound) MiB",
            "measured peak MiB",
            "bound/peak",
            "holds",
        ],
        rows,
    ) + [
        f"Run {d.get('date')}: `ReplayResult.memory['rss_bound_bytes']` against the replay's peak RSS (VmHWM / ru_maxrss reset before the replay; distributed rows: the pre-launch per-rank estimate against the largest rank's ru_maxrss).",
        "",
    ]


if __name__ == "__main__":
    sys.exit(main())
