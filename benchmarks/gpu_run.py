"""The GPU run (issue 33): every CUDA measurement in one command, in order of value, under a budget.

    python3 benchmarks/gpu_run.py [--out DIR] [--device cuda|cpu] [--quick] [--budget-s 540]
                                  [--only STEP ...] [--traces DIR] [--work DIR]

On a bare GPU machine (Python 3.12, torch, no network), after installing the wheels that
benchmarks/gpu_wheels.sh staged (docs/gpu_run.md has the exact command). `--device cpu --quick`
runs the same code at tiny sizes on CPU in under a minute (tests/test_gpu_run.py, in `make test`).

Steps, in this order; planned seconds on one H100 (machine start excluded; model sizes in
benchmarks/gpurun/models.py). A step starts only if the budget still holds its planned time,
otherwise it is recorded as skipped with the reason; a step that fails records its error and the
run goes on. Steps 2, 5, 6's large batch and 8 use step 1's captures.

    #  step        what                                                             H100 s
    1  captures    mlp, transformer, resnet_tv (ET + Kineto + NVML metrics) at GPU       75
                   sizes; ddp on 1 rank with NCCL (gloo on CPU)
    2  fidelity    original step (no profiler) vs its replay, 8 interleaved rounds of    90
                   5, SM % / memory / power curves of 100 steps each side
    3  coverage    benchmarks/coverage.py on CUDA over every shared ET                   45
    4  streams     a side-stream GEMM chain overlapping the main one: replay overlap      25
                   vs original (CUDA only)
    5  lumos       simulate the captures unchanged; predict layers x2, batch x2          120
                   (mlp, transformer), GEMMs 2x slower; capture each as ground truth
    6  bound       one MLP at batch 16 and 16384: "GPU 2x faster" predicted for each      30
    7  gpu_tests   pytest -m gpu (its tail kept)                                         60
    8  compare     replay of the mlp capture with its Kineto trace; both traces,         20
                   one step each, in compare_mlp_cuda.tar.gz
                                                                            total       465
                                                               budget (default)         540

Output (--out, default $OUT, else out/gpu_run/): gpu_run.json (rewritten as each step ends),
gpu_run.log and the Compare archive; captures and replays go to --work (a temp folder by
default), which stays on the machine (benchmarks/gpurun/output.py says why so few files).
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

import harness  # noqa: F401  (first: puts the repo root on sys.path)

from benchmarks.gpurun import steps as S
from benchmarks.gpurun.output import Output
from benchmarks.harness import ROOT
from engine import envvars

STEPS = (  # (name, function, planned seconds on an H100)
    ("captures", S.captures, 75),
    ("fidelity", S.fidelity, 90),
    ("coverage", S.coverage, 45),
    ("streams", S.streams, 25),
    ("lumos", S.lumos, 120),
    ("bound", S.bound, 30),
    ("gpu_tests", S.gpu_tests, 60),
    ("compare", S.compare, 20),
)
CARRY = ROOT / ".gpu_carry"  # what benchmarks/gpu_wheels.sh stages (wheels, shared ETs, source commit)


def environment(device: str) -> dict:
    import torch

    env = {
        "device": device,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "argv": sys.argv[1:],
    }
    if device.startswith("cuda") and torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        env.update(gpu=p.name, gpu_memory_gib=round(p.total_memory / 2**30, 1), sm_count=p.multi_processor_count)
        try:
            import pynvml

            pynvml.nvmlInit()
            env["driver"] = pynvml.nvmlSystemGetDriverVersion()
        except Exception as exc:  # noqa: BLE001 - recorded, not fatal
            env["driver"] = f"unknown ({type(exc).__name__})"
    src = CARRY / "source.txt"
    if src.is_file():
        env["source"] = src.read_text().strip()
    else:
        try:  # a copied tree may have no .git, a bare machine no git
            r = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=False)
            env["source"] = r.stdout.strip() or None
        except OSError:
            env["source"] = None
    return env


def default_traces() -> Path | None:
    env = envvars.get("MYSTIQUE_SHARED_TRACES")
    for p in ([Path(env)] if env else []) + [CARRY / "traces", ROOT.parent / "shared" / "traces"]:
        if p.is_dir():
            return p
    return None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None, help="results folder (default $OUT, else out/gpu_run)")
    ap.add_argument("--device", default=None, help="cuda or cpu (default cuda when available)")
    ap.add_argument("--quick", action="store_true", help="tiny sizes and few rounds (the CPU dry run)")
    ap.add_argument("--budget-s", type=float, default=540.0, help="whole-run budget in seconds (default 540)")
    ap.add_argument("--only", nargs="*", default=None, help="run only these steps (captures is added when needed)")
    ap.add_argument(
        "--traces",
        default=None,
        help="shared traces (default $MYSTIQUE_SHARED_TRACES, .gpu_carry/traces, ../shared/traces)",
    )
    ap.add_argument("--work", default=None, help="captures and replays (default a temp folder, removed after)")
    args = ap.parse_args(argv)
    import torch

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device.startswith("cuda") and not torch.cuda.is_available():
        print(f"gpu_run: --device {device} but CUDA is not available", file=sys.stderr)
        return 2
    out_dir = Path(args.out or os.environ.get("OUT") or ROOT / "out" / "gpu_run")
    names = [n for n, _, _ in STEPS]
    only = set(args.only or names)
    if unknown := only - set(names):
        print(f"gpu_run: unknown step(s) {', '.join(sorted(unknown))}; steps: {', '.join(names)}", file=sys.stderr)
        return 2
    if only & {"fidelity", "lumos", "compare"}:
        only.add("captures")
    t_start = time.monotonic()
    deadline = t_start + args.budget_s
    plan = [{"step": n, "planned_h100_s": s} for n, _, s in STEPS]
    out = Output(out_dir, environment(device), plan)
    tmp = None if args.work else tempfile.TemporaryDirectory(prefix="mystique_gpu_run_")
    work = Path(args.work or tmp.name)  # type: ignore[union-attr]
    work.mkdir(parents=True, exist_ok=True)
    traces = Path(args.traces) if args.traces else default_traces()
    ctx = S.Ctx(device=device, quick=args.quick, out=out_dir, work=work, traces=traces, deadline=deadline, log=out.log)
    out.log(f"gpu_run on {device} ({'quick' if args.quick else 'full'}), budget {args.budget_s:.0f} s, out {out_dir}")
    try:
        for name, fn, planned in STEPS:
            if name not in only:
                continue
            left = deadline - time.monotonic()
            need = 0.0 if args.quick else planned
            if left <= need:
                reason = f"budget: {max(left, 0):.0f} s left of {args.budget_s:.0f}, the step plans {planned} s"
                out.record(name, {"status": "skipped", "reason": reason, "planned_s": planned})
                out.log(f"-- {name}: skipped ({reason})")
                continue
            out.log(f"-- {name} (planned {planned} s on an H100, {left:.0f} s left)")
            t0 = time.monotonic()
            try:
                with out.capture_prints():
                    result = fn(ctx)
                status = "skipped" if isinstance(result, dict) and str(result.get("skipped", "")) else "ok"
                entry = {"status": status, "result": result}
            except Exception as exc:  # noqa: BLE001 - the step's error is recorded; the run goes on
                tb = traceback.format_exc()
                out.log(tb)
                entry = {"status": "error", "error": f"{type(exc).__name__}: {exc}"[:500], "traceback": tb[-3000:]}
            entry.update(wall_s=round(time.monotonic() - t0, 1), planned_s=planned)
            out.record(name, entry)
            out.log(f"-- {name}: {entry['status']} in {entry['wall_s']} s")
    finally:
        out.doc["wall_s"] = round(time.monotonic() - t_start, 1)
        out.save()
        out.log(f"gpu_run done in {out.doc['wall_s']} s")
        out.close()
        if tmp is not None:
            tmp.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
