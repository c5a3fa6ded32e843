"""Simulator figures (issue 12): reproduction, what-if vs fresh captures, sharding ranking, speed.

    .venv/bin/python benchmarks/simulate.py [--only reproduction whatif sharding speed dp] [--rounds 3]

  reproduction  every sample trace and every Kineto trace in ../shared/traces simulated unchanged:
                predicted vs measured iteration (mean ProfilerStep span); traces without a step
                span are listed and excluded
  whatif        fresh CPU captures on this machine (1 thread, 3 profiled steps): transformer 2x
                layers and MLP/transformer batch x2, each predicted from a base capture taken in
                the same round (base and variant back to back, so machine load hits both), over
                --rounds rounds; error of the prediction vs the variant's measured iteration
  sharding      DLRM sample, plans table/row/column/greedy over 2, 3, 4 and 8 ranks: predicted
                slowest-rank embedding time (simulator) vs replay of each composed plan
  speed         scheduler throughput (tasks/s) on the largest shared traces, median of 7 runs
  dp            1,024-rank data-parallel what-if from the one-rank trace hta_trace_diff/control
Writes benchmarks/results/simulate.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
SAMPLES = ROOT / "sample_traces"
SHARED = ROOT.parent / "shared" / "traces"
RESULTS = ROOT / "benchmarks" / "results" / "simulate.json"


def _load(*paths):
    import engine.trace as et

    return et.load(*[str(p) for p in paths], use_cache=False)


def reproduction() -> dict:
    from engine.simulate import simulate

    files = sorted(SAMPLES.glob("*/*_kineto.json.gz"))
    if (SHARED / "MANIFEST.json").exists():
        man = json.loads((SHARED / "MANIFEST.json").read_text())
        files += [SHARED / m["path"] for m in man if m["kind"] == "kineto"]
    rows, excluded = [], []
    for f in files:
        r = simulate(_load(f)).to_json()
        name = str(f.relative_to(ROOT.parent if SHARED in f.parents else ROOT))
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


def _capture(model: str, out: Path, **overrides) -> Path:
    from engine.capture.api import capture
    from engine.capture.models import build

    step, cfg = build(model, "cpu", **overrides)
    capture(
        step,
        out_dir=out,
        name=model,
        steps=STEPS,
        warmup=3,
        timing_steps=3,
        device="cpu",
        model_name=model,
        model_config=cfg,
        threads=1,
    )
    return out


STEPS = 5


def _step_stats(events) -> dict:
    from engine.simulate.result import step_spans

    d = step_spans(events)["dur_us"].to_numpy() / 1000.0
    return {
        "mean": float(d.mean()),
        "median": float(statistics.median(d)),
        "min": float(d.min()),
        "steps": [round(x, 3) for x in d],
    }


def _pair(out: Path, model: str):
    return _load(out / f"{model}_kineto.json.gz", out / f"{model}_et.json.gz")


WHATIFS = {
    # name: (model, variant overrides, spec edits)
    "transformer_layers_x2": (
        "transformer",
        {"layers": 4},
        [{"kind": "layers", "module": r"blocks\.\d+", "copies": 1}],
    ),
    "mlp_batch_x2": ("mlp", {"batch": 512}, [{"kind": "batch", "scale": 2.0, "size": 256}]),
    "transformer_batch_x2": (
        "transformer",
        {"batch": 6},
        [{"kind": "batch", "scale": 2.0, "size": 3, "multiples": [128]}],
    ),
}


def whatif(rounds: int = 5) -> dict:
    # captures are kept (MYSTIQUE_SIM_CAPTURES or a temp dir) so a re-run can re-predict them
    import os

    from engine.simulate import simulate

    tmp = Path(os.environ.get("MYSTIQUE_SIM_CAPTURES") or tempfile.mkdtemp(prefix="simwhatif_"))
    out: dict = {}
    for name, (model, over, edits) in WHATIFS.items():
        per = []
        for i in range(rounds):
            base_dir, var_dir = tmp / f"{name}_{i}_base", tmp / f"{name}_{i}_var"
            if not (var_dir / f"{model}_kineto.json.gz").exists():
                _capture(model, base_dir)
                _capture(model, var_dir, **over)
            base = _pair(base_dir, model)
            var = _pair(var_dir, model)
            pred = simulate(base, {"version": 1, "edits": edits})
            b, v, p = _step_stats(base.events), _step_stats(var.events), _step_stats(pred.predicted.events)
            # median over the recorded steps: robust to a step that another process slowed down
            per.append(
                {
                    "base_ms": b["median"],
                    "predicted_ms": p["median"],
                    "measured_ms": v["median"],
                    "error_pct": 100 * (p["median"] / v["median"] - 1),
                    "error_pct_of_means": 100 * (p["mean"] / v["mean"] - 1),
                    "error_pct_of_min": 100 * (p["min"] / v["min"] - 1),
                    "measured_ratio": v["median"] / b["median"],
                    "predicted_ratio": p["median"] / b["median"],
                    "steps": {"base": b["steps"], "variant": v["steps"], "predicted": p["steps"]},
                    "loadavg_1m": __import__("os").getloadavg()[0],
                    "report": {k: v for k, v in pred.extra.items() if k != "assumptions"},
                }
            )
            q = per[-1]
            print(
                f"  {name} round {i}: base {q['base_ms']:.1f} predicted {q['predicted_ms']:.1f} measured "
                f"{q['measured_ms']:.1f} ms ({q['error_pct']:+.1f} %, load {q['loadavg_1m']:.1f})",
                flush=True,
            )
        errs = [p["error_pct"] for p in per]
        out[name] = {
            "rounds": per,
            "median_error_pct": statistics.median(errs),
            "mean_abs_error_pct": statistics.mean(abs(e) for e in errs),
            "ratio_error_pct": 100
            * (
                statistics.median(p["predicted_ratio"] for p in per)
                / statistics.median(p["measured_ratio"] for p in per)
                - 1
            ),
            "spec": {"version": 1, "edits": edits},
            "variant": over,
        }
    return out


def speed(runs: int = 7) -> dict:
    from engine.simulate import SimConfig, build_graph, solve

    out = {}
    cand = [
        SHARED / "param_resnet/resnet_kineto.json.gz",
        SHARED / "hta_trace_diff/control.json.gz",
        SHARED / "hta_trace_diff/test.json.gz",
    ]
    for f in cand:
        if not f.exists():
            continue
        tr = _load(f)
        sims, builds = [], []
        for _ in range(runs):
            t0 = time.perf_counter()
            g = build_graph(tr.events, SimConfig())
            t1 = time.perf_counter()
            s = solve(g)
            t2 = time.perf_counter()
            builds.append(t1 - t0)
            sims.append(t2 - t1)
        n = g.n_tasks
        out[f.parent.name + "/" + f.name] = {
            "tasks": n,
            "rounds": s.rounds,
            "schedule_s_median": statistics.median(sims),
            "tasks_per_s_schedule": n / statistics.median(sims),
            "build_s_median": statistics.median(builds),
            "tasks_per_s_build_and_schedule": n / (statistics.median(sims) + statistics.median(builds)),
        }
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="*", default=None)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args(argv)
    sections = {"reproduction": reproduction, "whatif": lambda: whatif(args.rounds), "speed": speed}
    for extra in ("sharding", "dp"):
        fn = globals().get(extra)
        if fn is not None:
            sections[extra] = fn
    results = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    for name, fn in sections.items():
        if args.only and name not in args.only:
            continue
        t0 = time.perf_counter()
        print(f"== {name}", flush=True)
        results[name] = fn()
        results[name + "_wall_s"] = round(time.perf_counter() - t0, 1)
        print(json.dumps(results[name], indent=1, default=str)[:4000], flush=True)
    import os
    import platform

    results["machine"] = {"cpu_count": os.cpu_count(), "platform": platform.platform(), "loadavg": os.getloadavg()}
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=1, default=str))
    print(f"wrote {RESULTS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
