"""`mystique capture MODEL|--all-samples --out DIR`: capture a sample workload (ET + Kineto + meta).

Each model is written to `DIR/<model>/<model>_{et.json.gz,kineto.json.gz,meta.json}`; the meta
file records the exact command that regenerates it.

`--json` keys, one object per model (a list with --all-samples):

    model, median_ms, step_ms   the sample and its unprofiled step times (ms)
    et, kineto, meta            the three files written
    metrics_summary             sampled CPU / RSS / GPU metrics (engine.metrics)
    background_load_cores       cores other processes kept busy while timing
  a multi-rank sample (--world-size N): {name, world_size, ranks: [per rank], job_median_ms}
"""

from __future__ import annotations

import argparse
import json
import shlex
from pathlib import Path
from typing import Any

from engine.cli.common import print_json, progress_bar
from engine.errors import TraceError


def register(subparsers) -> None:
    from engine.capture.api import add_session_arguments  # lazy: the API module pulls in the metrics sampler

    p = subparsers.add_parser(
        "capture",
        help="capture a sample workload: ET + Kineto + step times + metrics",
        description=__doc__.splitlines()[0],
    )
    p.add_argument(
        "model",
        nargs="?",
        help="sample model: mlp, cnn, transformer, dlrm; real libraries: gpt2_hf, resnet_tv; "
        "multi-rank: ddp, dlrm_a2a, dlrm_tbe",
    )
    p.add_argument(
        "--world-size", type=int, default=2, help="ranks of a multi-rank sample (one process each, gloo; default 2)"
    )
    p.add_argument(
        "--all-samples",
        action="store_true",
        help="capture the four single-process sample models (mlp, cnn, transformer, dlrm)",
    )
    p.add_argument("--out", required=True, help="output folder (one sub-folder per model)")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="change a field of the sample's config (repeatable), e.g. --set batch=4096 --set widths=1024,4096,4096: "
        "sizes for a bigger machine; the fields are those of the meta's model_config; VALUE is JSON or a "
        "comma-separated list",
    )
    add_session_arguments(p)
    p.add_argument("--json", action="store_true", help="print the results as JSON")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from engine.capture.api import capture_sample, session_arguments
    from engine.capture.models import SAMPLE_MODELS

    if args.all_samples == bool(args.model):
        raise TraceError("give exactly one of MODEL or --all-samples")
    if args.threads < 0:
        raise TraceError(f"--threads must be >= 0, got {args.threads}")
    from engine.capture.dist_models import DIST_SAMPLES

    overrides = parse_sets(args.set)
    if overrides and (args.all_samples or args.model in DIST_SAMPLES):
        raise TraceError("--set changes one single-process sample's config: give one MODEL (not a multi-rank one)")
    if args.model in DIST_SAMPLES:
        return _run_dist(args)
    names = list(SAMPLE_MODELS) if args.all_samples else [args.model]
    if args.device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            raise TraceError(f"device {args.device!r} requested but CUDA is not available")
    out = Path(args.out)
    results = []
    for name in names:
        sets = "".join(f" --set {shlex.quote(item)}" for item in args.set)
        command = f"mystique capture {name} --out {args.out}{sets} {_session_flags(args)}"
        with progress_bar(f"capture {name}", enabled=not args.json) as cb:
            res = capture_sample(
                name, overrides=overrides, out_dir=out / name, progress=cb, command=command, **session_arguments(args)
            )
        results.append(
            {
                "model": name,
                "median_ms": round(res.median_ms, 3),
                "step_ms": [round(x, 3) for x in res.step_ms],
                **res.paths(),
                "metrics_summary": res.meta["metrics"].get("summary", {}),
                "background_load_cores": res.meta["metrics"].get("background_load_cores"),
            }
        )
        if not args.json:
            sizes = ", ".join(f"{Path(p).name} {Path(p).stat().st_size / 1024:.0f} KiB" for p in res.paths().values())
            print(f"{name}: median step {res.median_ms:.2f} ms over {len(res.step_ms)} steps -> {sizes}")
            load = res.meta["metrics"].get("background_load_cores")
            cores, threads = res.meta.get("cpu_count") or 1, res.meta.get("num_threads") or 1
            if load is not None and load + threads > cores + 0.2:
                print(
                    f"  warning: other processes kept {load:.2f} of {cores} cores busy while timing "
                    f"{threads} thread(s): the step times are likely inflated (re-capture on a quiet machine)"
                )
    if args.json:
        print_json(results if args.all_samples else results[0])
    return 0


def _run_dist(args: argparse.Namespace) -> int:
    """A multi-rank sample: one process per rank, files `<model>_rank<r>_*` in OUT/<model>/."""
    from engine.capture.api import session_arguments
    from engine.capture.distributed import capture_distributed

    if args.world_size < 1:
        raise TraceError(f"--world-size must be >= 1, got {args.world_size}")
    with progress_bar(f"capture {args.model} x{args.world_size}", enabled=not args.json) as cb:
        res = capture_distributed(
            args.model,
            world_size=args.world_size,
            out_dir=Path(args.out) / args.model,
            name=args.model,
            progress=cb,
            command=f"mystique capture {args.model} --world-size {args.world_size} --out {args.out} "
            + _session_flags(args),
            **session_arguments(args),
        )
    if args.json:
        print_json(res)
    else:
        per = ", ".join(f"rank {r['rank']} {r['median_ms']:.2f} ms" for r in res["ranks"])
        print(
            f"{args.model}: {args.world_size} ranks, median step {per}; job (slowest rank) {res['job_median_ms']:.2f} ms"
        )
    return 0


def parse_sets(items: list[str]) -> dict[str, Any]:
    """`--set FIELD=VALUE` flags -> config overrides. VALUE is JSON (`64`, `0.01`, `[512, 1024]`) or
    a comma-separated list of JSON numbers (`512,1024`); anything else stays a string, which the
    config's own rules then refuse by field name."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, text = item.partition("=")
        if not sep or not key.strip():
            raise TraceError(f"--set takes FIELD=VALUE, got {item!r}")
        try:
            value = json.loads(text)
        except json.JSONDecodeError:
            try:
                value = [json.loads(x) for x in text.split(",")] if "," in text else text
            except json.JSONDecodeError:
                value = text
        out[key.strip()] = value
    return out


def _session_flags(args: argparse.Namespace) -> str:
    """The capture-phase flags as typed, for the command recorded in the meta files."""
    return (
        f"--steps {args.steps} --warmup {args.warmup} --timing-steps {args.timing_steps} "
        f"--device {args.device} --threads {args.threads}"
    )
