"""Replay fidelity: does the replay of a captured sample take as long as the original step?

    .venv/bin/python benchmarks/fidelity.py [--quick] [--device cpu] [--models mlp cnn ...]
                                            [--fresh] [--rounds R] [--per-round K]

For each sample model: rebuild the live model (engine.capture.models) and time its real
training step without any profiler; replay the committed capture (sample_traces/<m>/, or a
fresh capture into a temp folder with --fresh) with engine.replay; both run in the SAME process,
interleaved in rounds (K original steps, then K replay iterations, R times) so machine-load drift
hits both equally; within a round they alternate step by step. Reported per model:
    original_ms   median of all live steps     captured_ms  the capture meta's median (recorded earlier)
    replay_ms     median of replay iterations  error        |replay - original| / original
                  per recorded step (an ET recorded over N profiler steps replays N per
                  iteration; the original side then runs N steps per sample too)
    paired_error  median of replay_i/original_i - 1 over adjacent pairs (robust to load drift)
    noise         the original's run-to-run noise: IQR/median of its steps, and the spread
                  (max - min)/median of its per-round medians
plus CPU/GPU metrics side by side. Writes benchmarks/results/fidelity.json with one record per
model and `geomean_error` (fraction); fidelity_cuda.json for --device cuda. Targets: geomean <= 5 %, each <= 10 %.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

from harness import ROOT  # first: puts the repo root on sys.path (benchmarks/harness.py)

from engine.compare.fidelity import geomean_error, iqr_over_median, step_errors
from engine.outdir import write_json

if TYPE_CHECKING:
    from benchmarks.report import pct, table

MODELS = ("mlp", "cnn", "transformer", "dlrm")


def _capture_fresh(name: str, device: str, tmp: Path, threads: int) -> Path:
    from engine.capture.api import capture_sample

    capture_sample(name, out_dir=tmp / name, steps=1, warmup=3, timing_steps=10, device=device, threads=threads)
    return tmp / name


def _metric_block(fn, n: int, device: str, curves: bool = False) -> dict:
    """The metrics summary over `n` calls of `fn`; with `curves`, the samples too (SM %, memory,
    power over time on a GPU: `MetricsSampler.to_dict`)."""
    from engine.metrics import MetricsSampler

    with MetricsSampler(interval_s=0.02, device=device) as m:
        for _ in range(n):
            fn()
    return m.to_dict() if curves else m.summary()


def build_model(name: str, device: str, config: dict):
    """(step_fn, config) of sample `name` rebuilt from a capture meta's `model_config`: ours
    (engine.capture.models) or a real-library one (lib_models, whose meta also names the library
    and architecture, which are not sizes)."""
    from engine.capture import lib_models, models

    lib = name in lib_models.LIB_SAMPLES
    drop = {"model", "library", "arch"} if lib else {"model"}
    overrides = {k: (tuple(v) if isinstance(v, list) else v) for k, v in config.items() if k not in drop}
    return (lib_models.build if lib else models.build)(name, device, **overrides)


def run_model(
    name: str,
    *,
    device: str,
    rounds: int,
    per_round: int,
    warmup: int,
    fresh: bool,
    tmp: Path,
    metrics: bool,
    host_gaps: bool = False,
    folder: Path | None = None,
    metric_steps: int | None = None,
    curves: bool = False,
) -> dict:
    """One model's interleaved rounds (module docstring). `folder`: a capture folder to replay
    instead of sample_traces/<name> (its meta's model_config rebuilds the live model);
    `metric_steps` steps per metrics block (default `per_round`), `curves` keeps their samples."""
    import orjson
    import torch

    import engine.trace as T
    from engine.replay import ReplayConfig
    from engine.replay.executor import ReplaySession

    folder = folder or ROOT / "sample_traces" / name
    meta_path = folder / f"{name}_meta.json"
    meta = orjson.loads(meta_path.read_bytes()) if meta_path.is_file() else {}
    threads = int(meta.get("num_threads") or torch.get_num_threads())
    if fresh:
        folder = _capture_fresh(name, device, tmp, threads)
        meta = orjson.loads((folder / f"{name}_meta.json").read_bytes())
    old_threads = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        step_fn, _ = build_model(name, device, meta.get("model_config") or {})
        trace = T.load(folder / f"{name}_et.json.gz", folder / f"{name}_kineto.json.gz")
        sync = (lambda: torch.cuda.synchronize()) if device.startswith("cuda") else (lambda: None)

        def original_step() -> float:
            t0 = time.perf_counter()
            step_fn()
            sync()
            return (time.perf_counter() - t0) * 1e3

        cfg = ReplayConfig(device=device, warmup=0, iters=1, num_threads=threads, metrics=False, host_gaps=host_gaps)
        orig: list[float] = []
        rep: list[float] = []
        orig_rounds: list[float] = []
        rep_rounds: list[float] = []
        with ReplaySession(trace, config=cfg) as session:
            # an ET recorded over N profiler steps replays N steps per iteration: both sides
            # run N steps per sample and are compared per step
            n_steps = session.steps_per_iteration

            def original_steps() -> float:
                return sum(original_step() for _ in range(n_steps)) / n_steps

            for _ in range(warmup):
                original_steps()
                session.run_iteration(measured=False)
            for _ in range(rounds):
                # alternate step by step (ABAB): load changes on a shared machine hit both alike
                o, r = [], []
                for _ in range(per_round):
                    o.append(original_steps())
                    r.append(session.run_iteration(measured=True) / n_steps)
                orig += o
                rep += r
                orig_rounds.append(statistics.median(o))
                rep_rounds.append(statistics.median(r))
            n_m = metric_steps or per_round
            m_orig = _metric_block(original_step, n_m, device, curves) if metrics else {}
            replay_iter = lambda: session.run_iteration(measured=False)  # noqa: E731
            m_rep = _metric_block(replay_iter, n_m, device, curves) if metrics else {}
            res = session.finish()
    finally:
        torch.set_num_threads(old_threads)
    o_med, r_med = statistics.median(orig), statistics.median(rep)
    cov = res.coverage
    return {
        "model": name,
        "device": device,
        "threads": threads,
        "original_ms": round(o_med, 3),
        "captured_ms": meta.get("median_ms"),
        "replay_ms": round(r_med, 3),
        "steps_per_iteration": n_steps,
        **step_errors(orig, rep),
        "min_error": (min(rep) - min(orig)) / min(orig),
        "noise_iqr": iqr_over_median(orig),
        "noise_round_spread": (max(orig_rounds) - min(orig_rounds)) / o_med,
        "replay_noise_iqr": iqr_over_median(rep),
        "original_steps_ms": [round(x, 3) for x in orig],
        "replay_iters_ms": [round(x, 3) for x in rep],
        "coverage": {
            k: cov[k] for k in ("selected", "replayed", "substituted", "skipped", "compute_rate", "by_reason")
        },
        "metrics": {"original": m_orig, "replay": m_rep},
        "trace": str(folder),
        "fresh_capture": fresh,
        "host_gaps": host_gaps,
        "host_tensors_on_cpu": res.config.get("host_tensors_on_cpu"),  # engine/replay/placement.py
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="few rounds (< 60 s on CPU)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--models", nargs="*", default=list(MODELS))
    ap.add_argument("--fresh", action="store_true", help="capture each model fresh instead of using sample_traces")
    ap.add_argument("--rounds", type=int, default=None)
    ap.add_argument("--per-round", type=int, default=None)
    ap.add_argument("--no-metrics", action="store_true")
    ap.add_argument(
        "--host-gaps",
        action="store_true",
        help="replay with the original's CPU gaps between ops (from the profiled Kineto trace)",
    )
    ap.add_argument("--out", default=None, help="default benchmarks/results/fidelity[_cuda].json")
    args = ap.parse_args(argv)
    if args.out is None:
        suffix = "" if args.device == "cpu" else "_" + args.device.split(":")[0]
        args.out = str(ROOT / "benchmarks" / "results" / f"fidelity{suffix}.json")
    rounds = args.rounds or (3 if args.quick else 8)
    per_round = args.per_round or (3 if args.quick else 5)
    warmup = 2 if args.quick else 3

    records = []
    t_start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="mystique_fidelity_") as tmp:
        for name in args.models:
            if name not in MODELS:
                print(f"unknown model {name!r}; choose from {MODELS}", file=sys.stderr)
                return 2
            rec = run_model(
                name,
                device=args.device,
                rounds=rounds,
                per_round=per_round,
                warmup=warmup,
                fresh=args.fresh,
                tmp=Path(tmp),
                metrics=not args.no_metrics,
                host_gaps=args.host_gaps,
            )
            records.append(rec)
            sys.stdout.flush()
    geo = geomean_error(r["error"] for r in records)
    print(
        f"{'model':<12} {'original_ms':>11} {'captured_ms':>11} {'replay_ms':>9} {'error':>7} "
        f"{'paired':>7} {'noise(IQR)':>10} {'noise(rounds)':>13} {'coverage':>9}  cpu% orig/replay"
    )
    for r in records:
        cpu_o = (r["metrics"]["original"].get("cpu_util_pct") or {}).get("mean")
        cpu_r = (r["metrics"]["replay"].get("cpu_util_pct") or {}).get("mean")
        cpu = f"{cpu_o:.0f}/{cpu_r:.0f}" if cpu_o is not None and cpu_r is not None else "-"
        cap = f"{r['captured_ms']:.2f}" if isinstance(r["captured_ms"], (int, float)) else "-"
        print(
            f"{r['model']:<12} {r['original_ms']:>11.2f} {cap:>11} {r['replay_ms']:>9.2f} "
            f"{r['signed_error']:>+7.1%} {r['paired_error']:>+7.1%} {r['noise_iqr']:>10.1%} {r['noise_round_spread']:>13.1%} "
            f"{r['coverage']['compute_rate']:>9.1%}  {cpu}"
        )
    print(f"geomean error: {geo:.2%}   (wall {time.perf_counter() - t_start:.1f} s)")
    out = Path(args.out)
    write_json(
        out,
        {
            "records": records,
            "geomean_error": geo,
            "settings": {
                "rounds": rounds,
                "per_round": per_round,
                "device": args.device,
                "quick": args.quick,
                "fresh": args.fresh,
                "host_gaps": args.host_gaps,
            },
        },
    )
    print(f"wrote {out}")
    return 0


# -- its section of docs/figures.md, beside the code that writes its results. benchmarks/report.py
# runs `docs_section` (and the `_docs_*` helpers) on the results file without importing this file
# (so the report stays standard-library only), giving it the formatters named below.
def docs_section(d: dict) -> list[str]:
    """Each sample's live step (no profiler) and its replay alternate in one process; the paired
    error is the median of per-round differences, which cancels the machine's drift."""
    rows = [
        [
            r["model"],
            f"{r['original_ms']:.2f} ms",
            f"{r['replay_ms']:.2f} ms",
            pct(r["signed_error"], signed=True),
            pct(r["paired_error"], signed=True),
            pct(r["noise_iqr"]),
        ]
        for r in d["records"]
    ]
    s = d.get("settings", {})
    return table(
        ["model", "original step (no profiler)", "replay", "error", "paired error", "original's noise (IQR/median)"],
        rows,
    ) + [
        f"Geomean |error| **{pct(d['geomean_error'], 2)}** (target ≤ 5 %, each ≤ 10 %); {s.get('rounds')} rounds × "
        f"{s.get('per_round')} interleaved steps on {s.get('device', 'cpu')}.",
        "",
    ]


if __name__ == "__main__":
    sys.exit(main())
