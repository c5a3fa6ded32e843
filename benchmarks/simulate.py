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
from typing import TYPE_CHECKING

import harness  # noqa: F401  (first: puts the repo root on sys.path)

from benchmarks.simbench import tables
from benchmarks.simbench.common import RESULTS
from benchmarks.simbench.reproduction import dp, reproduction, speed
from benchmarks.simbench.sharding import sharding
from benchmarks.simbench.whatif import costmodel, whatif

if TYPE_CHECKING:
    from benchmarks.report import num, table


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


# -- its section of docs/figures.md, beside the code that writes its results. benchmarks/report.py
# runs `docs_section` (and the `_docs_*` helpers) on the results file without importing this file
# (so the report stays standard-library only), giving it the formatters named below.
def docs_section(d: dict) -> list[str]:
    """Reproduction of unchanged traces, what-ifs checked against real re-captures, sharding plans
    checked against replays of each plan (thread CPU time, interleaved rounds), speed on the largest
    shared traces."""
    out: list[str] = []
    rep = d.get("reproduction")
    if rep:
        out += ["**Reproduction** (the unchanged trace simulated):", ""]
        out += table(
            ["trace", "measured ms", "predicted ms", "error", "tasks"],
            [
                [r["trace"], num(r["measured_ms"]), num(r["predicted_ms"]), f"{r['error_pct']:+.2f} %", num(r["tasks"])]
                for r in rep["traces"]
            ],
        )
        out += [f"Mean |error| {rep['mean_abs_error_pct']:.2f} %, max {rep['max_abs_error_pct']:.2f} %.", ""]
    wi = d.get("whatif")
    if wi:
        out += ["**What-if against a real re-capture** (predicted vs measured ratio variant / base):", ""]
        # fmt: off
        out += table(
            ["case", "variant", "predicted ratio", "measured ratio (thread CPU)", "error (CPU)", "error (wall)"],
            [[k, json.dumps(v.get("variant")), f"{v['predicted_ratio']:.3f}", f"{v['measured']['ratio_cpu']:.3f}",
              f"{v['error_pct_cpu']:+.1f} %", f"{v['error_pct_wall']:+.1f} %"] for k, v in wi.items()],
        )
        # fmt: on
    sh = d.get("sharding")
    if sh:
        out += ["**Sharding plans**: the what-if's pick vs the measured fastest plan:", ""]
        rows = []
        for case, c in sh["cases"].items():
            pred = " < ".join(
                f"{p} {c['predicted_ms'][p]:.2f}" for p in sorted(c["predicted_ms"], key=c["predicted_ms"].get)
            )
            meas = " < ".join(
                f"{p} {c['measured_cpu_ms'][p]:.2f}" for p in sorted(c["measured_cpu_ms"], key=c["measured_cpu_ms"].get)
            )
            rows.append([case, pred, meas, c.get("pick"), c.get("fastest")])
        out += table(["case", "predicted ms", "measured thread CPU ms", "pick", "fastest"], rows)
        out += [
            f"{sh['n_cases']} cases, {sh['rounds']} interleaved rounds each: fastest plan picked "
            f"{sh['hit_within_noise_pct']:.0f} % within noise, {sh['strict_hit_pct']:.0f} % strictly; plan pairs "
            f"ordered correctly {sh['pairwise_order_pct']:.0f} %.",
            "",
        ]
    sp = d.get("speed")
    if sp:
        out += ["**Speed** (warm; medians):", ""]
        # fmt: off
        out += table(
            ["trace", "events", "tasks", "graph build ms", "schedule ms", "tasks/s build + schedule",
             "tasks/s scheduler alone", "load"],
            [[k, num(v["events"]), num(v["tasks"]), num(1e3 * v["build_s_median"], 1),
              num(1e3 * v["schedule_s_median"], 1), f"{v['tasks_per_s_build_and_schedule'] / 1e6:.2f} M",
              f"{v['tasks_per_s_schedule'] / 1e6:.2f} M", num(v.get("loadavg_1m"), 1)] for k, v in sp.items()],
        )
        # fmt: on
    dp = d.get("dp")
    if dp:
        out += [f"**Data-parallel what-if** from one rank of `{dp['trace']}`:", ""]
        runs = sorted(dp["runs"].items(), key=lambda kv: int(kv[0]))
        # fmt: off
        out += table(
            ["DP ranks", "predicted ms", "communication ms", "exposed comm ms"],
            [[n, num(r["predicted_iteration_ms"]), num(r["breakdown"]["communication"]),
              num(r["breakdown"]["exposed_communication"])] for n, r in runs],
        )
        # fmt: on
    cm = d.get("costmodel")
    if cm:
        errs = {k: v.get("heldout_err_pct") for k, v in cm.get("microbench", {}).get("curves", {}).items()}
        errs.update({k: v.get("heldout_err_pct") for k, v in cm.get("microbench", {}).get("embedding", {}).items()})
        out += [
            "**Cost model** (`python -m engine.simulate.calibrate`), held-out error per family: "
            + ", ".join(f"{k} {num(v, 1)} %" for k, v in errs.items() if v is not None)
            + ".",
            "",
        ]
    return out


if __name__ == "__main__":
    sys.exit(main())
