"""Composition figures: round trip, batch scaling, layer repetition, embedding sharding plans,
tensor parallelism.

    .venv/bin/python benchmarks/compose_scaling.py [--rounds 7] [--only round_trip mlp_batch ...]

Every figure replays composed benchmarks (exported, then reloaded with engine.trace.load, as a
user would run them) with engine.replay on CPU, 1 thread (the captures' count). Variants of one
figure are prepared once and run *alternately*, one iteration each per round (in reversed order
every other round), so machine-load
drift hits them equally; each figure is the median over rounds.
  round_trip   original sample vs compose(all ops, repeat 1, scale 1): ratio (target |r-1| <= 3 %)
  mlp_batch    MLP batch x2 vs x1 (target 1.6-2.4x)
  layer_repeat one transformer decoder layer repeated k = 1, 2, 4: time / (k * time(k=1)) (target +-10 %)
  dlrm_plans   DLRM embeddings on 2 and 4 ranks: per-rank replay time per plan; slowest rank of
               greedy vs the naive table-wise round-robin; lookups per rank add up to the original
  tp_linear    MLP split tensor-parallel (Megatron column/row pairs) over 2 and 4 ranks: rank-0
               compute time / unsharded time, pairs and all_reduce bytes
Writes benchmarks/results/compose_scaling.json. Timings on a shared 2-core machine are noisy.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

from harness import ROOT  # first: puts the repo root on sys.path (benchmarks/harness.py)

from engine.compose.measure import dlrm_plans, layer_repeat, mlp_batch, round_trip, tp_linear

if TYPE_CHECKING:
    from benchmarks.report import num, table

FIGURES = {
    "round_trip": round_trip,
    "mlp_batch": mlp_batch,
    "layer_repeat": layer_repeat,
    "dlrm_plans": dlrm_plans,
    "tp_linear": tp_linear,
}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--only", nargs="*", choices=sorted(FIGURES), default=None)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "compose_scaling.json"))
    args = ap.parse_args(argv)
    results: dict = {
        "rounds": args.rounds,
        "device": "cpu",
        "threads": 1,
        "time_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    with tempfile.TemporaryDirectory() as d:
        for name in args.only or list(FIGURES):
            t0 = time.perf_counter()
            kw = {"rounds": args.rounds, "tmp": Path(d)}
            if name == "dlrm_plans":
                kw["rounds"] = max(3, args.rounds - 2)
            results[name] = FIGURES[name](**kw)
            results[name]["wall_s"] = round(time.perf_counter() - t0, 1)
            results[name]["time_utc"] = results["time_utc"]
            _print(name, results[name])
    out = Path(args.out)
    if args.only and out.exists():  # --only updates its figures and keeps the others
        old = json.loads(out.read_text())
        for k in FIGURES:  # figures kept from an earlier run keep that run's time
            if isinstance(old.get(k), dict):
                old[k].setdefault("time_utc", old.get("time_utc"))
        results = {**old, **results}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2))
    print(f"wrote {args.out}")
    return 0


def _print(name: str, r: dict) -> None:
    if name == "round_trip":
        print(
            f"round trip (mlp, all ops): original {r['original']['median_ms']:.2f} ms, composed "
            f"{r['composed']['median_ms']:.2f} ms, ratio {r['ratio']:.3f} (paired {r['paired_ratio']:.3f})"
        )
    elif name == "mlp_batch":
        print(
            f"MLP batch x2: x1 {r['x1']['median_ms']:.2f} ms, x2 {r['x2']['median_ms']:.2f} ms, ratio {r['ratio']:.2f} "
            f"(paired {r['paired_ratio']:.2f})"
        )
    elif name == "layer_repeat":
        ms = ", ".join(f"{k}: {v['median_ms']:.2f} ms" for k, v in r.items() if k.startswith("k"))
        lin = ", ".join(f"{k}: {v:.3f}" for k, v in r["linearity"].items())
        pl = ", ".join(f"{k}: {v:.3f}" for k, v in r["paired_linearity"].items())
        print(f"transformer layer repeat: {ms}; time/(k*t1): {lin} (paired {pl})")
    elif name == "tp_linear":
        for k, v in r.items():
            if k.startswith("tp") and k != "tp1":
                print(
                    f"{r['model']} tensor parallel {k}: rank 0 {v['median_ms']:.2f} ms vs unsharded "
                    f"{r['tp1']['median_ms']:.2f} ms, ratio {v['ratio']:.2f} (paired {v['paired_ratio']:.2f}); "
                    f"{v['pairs']} linear pairs, {v['collectives']} all_reduce ({v['comm_bytes']:,} B)"
                )
    elif name == "dlrm_plans":
        for n, info in r.items():
            if not n.endswith("_ranks"):
                continue
            for plan, v in info.items():
                if isinstance(v, dict):
                    print(
                        f"DLRM {n} {plan:7s}: rank ms {v['rank_ms']}, slowest {v['slowest_ms']:.2f}, lookups "
                        f"{v['lookups_per_rank']} (sum {sum(v['lookups_per_rank'])} / {v['original_lookups']})"
                    )
            print(f"DLRM {n}: greedy slowest / naive slowest = {info['greedy_vs_naive']:.3f}")


# -- its section of docs/figures.md, beside the code that writes its results. benchmarks/report.py
# runs `docs_section` (and the `_docs_*` helpers) on the results file without importing this file
# (so the report stays standard-library only), giving it the formatters named below.
def docs_section(d: dict) -> list[str]:
    """Composed benchmarks replayed on CPU against their originals, interleaved rounds in ABBA
    order."""
    out = [f"{d.get('rounds')} interleaved rounds, device {d.get('device')}, {d.get('threads')} thread(s).", ""]
    rows = []
    if "round_trip" in d:
        rt = d["round_trip"]
        rows.append(
            ["round trip: composed / original", f"{rt['paired_ratio']:.3f}", f"{rt['ratio']:.3f}", "within 3 %"]
        )
    if "mlp_batch" in d:
        mb = d["mlp_batch"]
        rows.append(["MLP batch ×2 / ×1", f"{mb['paired_ratio']:.2f}", f"{mb['ratio']:.2f}", "1.6–2.4"])
    if "layer_repeat" in d:
        lr = d["layer_repeat"]
        for k in sorted(lr.get("linearity", {})):
            rows.append(
                [
                    f"transformer layer repeated {k[1:]}×: t / (k · t₁)",
                    f"{lr['paired_linearity'][k]:.3f}",
                    f"{lr['linearity'][k]:.3f}",
                    "within 10 %",
                ]
            )
    for k, v in sorted((k, v) for k, v in d.get("tp_linear", {}).items() if isinstance(v, dict) and "ratio" in v):
        rows.append(
            [
                f"tensor parallel degree {k[2:]}: rank-0 compute / unsharded",
                f"{v['paired_ratio']:.2f}",
                f"{v['ratio']:.2f}",
                f"1/{k[2:]}",
            ]
        )
    out += table(["measurement", "paired (median of per-round ratios)", "ratio of medians", "target"], rows)
    plans = {k: v for k, v in d.get("dlrm_plans", {}).items() if isinstance(v, dict) and "greedy_vs_naive" in v}
    if plans:
        out += ["DLRM embedding sharding, slowest rank ms per plan:", ""]
        names = [p for p in ("table", "row", "column", "greedy") if any(p in v for v in plans.values())]
        out += table(
            ["ranks", *names, "greedy / table-wise"],
            [
                [k.split("_")[0], *(num(v[p]["slowest_ms"]) for p in names), f"{v['greedy_vs_naive']:.2f}"]
                for k, v in plans.items()
            ],
        )
    return out


if __name__ == "__main__":
    sys.exit(main())
