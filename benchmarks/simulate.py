"""Simulator figures (issue 12): reproduction, what-if vs fresh captures, sharding ranking, speed.

    .venv/bin/python benchmarks/simulate.py [--only reproduction whatif sharding speed dp costmodel]
                                            [--rounds 3] [--shard-rounds 31] [--no-fresh]

  reproduction  every sample trace and every Kineto trace in ../shared/traces simulated unchanged:
                predicted vs measured iteration (mean ProfilerStep span); traces without a step
                span are listed and excluded
  whatif        transformer 2x layers, MLP/transformer batch x2: predicted ratio (bundled sample,
                edited / unchanged) vs the measured ratio of fresh profiled captures on this
                machine, in wall-clock and in thread CPU time (rounds start when load <= 2);
                plus --rounds fresh base + variant captures, the variant predicted from the base
  sharding      DLRM configurations (sample + captured variants with table-size and pooling
                skew) x 2 and 4 ranks x plans table/row/column/greedy: predicted ranking vs the
                replay of each composed plan (interleaved rounds); strict and within-noise hits
  speed         simulated tasks/s on the largest shared Kineto traces: scheduler alone and end
                to end (graph build + schedule; trace loading excluded)
  dp            1,024-rank data-parallel what-if from the one-rank trace hta_trace_diff/control
  costmodel     held-out error per cost family (microbenchmarks here; in-trace fits)
Writes benchmarks/results/simulate.json (sections not run keep their previous figures); `--tables`
prints the README tables from it. Run it at normal priority; the load average is recorded next to
every timing.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time

import harness  # noqa: F401  (first: puts the repo root on sys.path)

from benchmarks.simbench import tables
from benchmarks.simbench.common import RESULTS
from benchmarks.simbench.reproduction import dp, reproduction, speed
from benchmarks.simbench.sharding import sharding
from benchmarks.simbench.whatif import costmodel, whatif


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="*", default=None)
    ap.add_argument("--rounds", type=int, default=3, help="fresh-capture rounds per what-if")
    ap.add_argument("--shard-rounds", type=int, default=31, help="interleaved replay rounds per sharding case")
    ap.add_argument("--no-fresh", action="store_true", help="skip the fresh-capture what-if rounds")
    ap.add_argument("--whatifs", nargs="*", default=None, help="only these what-ifs (merged into earlier results)")
    ap.add_argument("--tables", action="store_true", help="print the README tables from the results JSON and exit")
    args = ap.parse_args(argv)
    if args.tables:
        print(tables.render(json.loads(RESULTS.read_text())))
        return 0
    results = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    sections = {
        "reproduction": reproduction,
        "whatif": lambda: {
            **(results.get("whatif", {}) if args.whatifs else {}),
            **whatif(args.rounds, fresh=not args.no_fresh, names=args.whatifs),
        },
        "speed": speed,
        "sharding": lambda: sharding(rounds=args.shard_rounds),
        "dp": dp,
        "costmodel": costmodel,
    }
    for name, fn in sections.items():
        if args.only and name not in args.only:
            continue
        t0 = time.perf_counter()
        print(f"== {name} (load {os.getloadavg()[0]:.1f})", flush=True)
        results[name] = fn()
        results[name + "_wall_s"] = round(time.perf_counter() - t0, 1)
        print(json.dumps(results[name], indent=1, default=str)[:3000], flush=True)
    results["machine"] = {"cpu_count": os.cpu_count(), "platform": platform.platform(), "loadavg": os.getloadavg()}
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=1, default=str))
    print(f"wrote {RESULTS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
