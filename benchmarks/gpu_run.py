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
from typing import TYPE_CHECKING

import harness  # noqa: F401  (first: puts the repo root on sys.path)

from benchmarks.gpurun import steps as S
from benchmarks.gpurun.output import Output
from benchmarks.harness import ROOT
from engine import envvars

if TYPE_CHECKING:
    from benchmarks.report import pct, table

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


def _docs_fidelity(st: dict) -> list[str]:
    res = st["result"]
    rows = [
        [r["model"], f"{r['original_ms']:.2f}", f"{r['replay_ms']:.2f}", pct(r["error"]), pct(r["noise_iqr"])]
        for r in res["records"]
        if "original_ms" in r
    ]
    return [
        f"**Fidelity** (original step without profiler vs its replay, per recorded step, interleaved): "
        f"geomean {pct(res['geomean_error'])}; targets each ≤ 10 %, geomean ≤ 5 %: "
        f"{'met' if res['met'] else 'not met'}.",
        "",
        *table(["model", "original ms", "replay ms", "error", "original noise (IQR)"], rows),
    ]


def _docs_lumos(st: dict) -> list[str]:
    res = st["result"]
    rows = []
    for name, w in res["whatifs"].items():
        if "predicted_ms" not in w:
            continue
        hc = w.get("host_calibrated") or {}
        rows.append(
            [
                name,
                f"{w['predicted_ms']:.2f}",
                f"{w['measured_ms']:.2f}",
                pct(w["error"], signed=True),
                f"{hc.get('predicted_ms', float('nan')):.2f}",
                f"{hc.get('measured_unprofiled_ms', float('nan')):.2f}",
                pct(hc.get("error"), signed=True) + (" (host factor capped)" if hc.get("unreached") else ""),
            ]
        )
    return [
        "**Lumos check** (simulate the profiled base capture under the what-if, capture the changed "
        "model as the truth): raw = against the changed model's profiled steps; host-calibrated = "
        "the base's host sped up until its simulated step equals its unprofiled one, against the "
        "changed model's unprofiled step (the committed run sped up the host ops' own time only, "
        "capped at 50x; the script now applies the `unprofiled` edit, which shrinks the gaps between "
        "ops too: its figures on captures brought back from the same machine are in the section "
        '"What-if on GPU captures").',
        "",
        *table(
            ["what-if", "predicted ms", "measured ms (profiled)", "error", "calibrated ms", "unprofiled ms", "error"],
            rows,
        ),
    ]


def _docs_headline(d: dict) -> list[str]:
    """The README's few lines: each target and its figure."""
    env, st = d["environment"], d["steps"]

    def res(k: str) -> dict:
        return (st.get(k) or {}).get("result") or {}

    fid, lum, b, sr, cov = res("fidelity"), res("lumos"), res("bound"), res("streams"), res("coverage")
    rows = []
    if fid.get("records"):
        each = ", ".join(f"{r['model']} {pct(r['error'])}" for r in fid["records"] if "error" in r)
        rows.append(
            ["replay vs original step", "each ≤ 10 %, geomean ≤ 5 %", f"{each}; geomean {pct(fid['geomean_error'])}"]
        )
    if cov.get("records"):
        worst = min(r["compute_rate"] for r in cov["records"])
        rows.append(["coverage of the shared ETs on CUDA", "≥ 99 %", f"{len(cov['records'])} ETs, lowest {pct(worst)}"])
    if "overlap_error" in sr:
        rows.append(["side-stream overlap, replay vs original", "within 10 %", pct(sr["overlap_error"], signed=True)])
    if lum.get("whatifs"):
        each = ", ".join(f"{k} {pct(w['error'], signed=True)}" for k, w in lum["whatifs"].items() if "error" in w)
        rows.append(["what-if vs captured truth (profiled)", "each within 10 %", each])
    if "small" in b:
        rows.append(
            [
                '"GPU 2x faster": large / small batch',
                "≤ 0.75x / ≥ 0.9x",
                f"{b['large']['ratio']:.2f}x / {b['small']['ratio']:.2f}x "
                f"(host-calibrated {b['large']['host_calibrated']['ratio']:.2f}x / "
                f"{b['small']['host_calibrated']['ratio']:.2f}x)",
            ]
        )
    gt = res("gpu_tests")
    if gt:
        rows.append(["pytest -m gpu", "passes", gt.get("summary", "")])
    return [
        f"{env.get('gpu')}, torch {env.get('torch')} (CUDA {env.get('cuda')}), source "
        f"`{str(env.get('source'))[:10]}`, {d.get('wall_s')} s in all:",
        "",
        *table(["check", "target", "measured"], rows),
    ]


def docs_section(d: dict) -> list[str]:
    """One command on a GPU machine (docs/gpu_run.md): captures at GPU-busy sizes, the original
    step against its replay, coverage of the shared ETs on CUDA, a side stream's overlap, the
    Lumos what-if check against captured ground truth, GPU- vs host-bound "GPU 2x faster",
    `pytest -m gpu`, and a Compare archive; each step's wall time against its plan."""
    env, steps = d["environment"], d["steps"]
    out = [
        f"{env.get('gpu')} ({env.get('gpu_memory_gib')} GiB, {env.get('sm_count')} SMs, driver "
        f"{env.get('driver')}), torch {env.get('torch')} (CUDA {env.get('cuda')}), Python "
        f"{env.get('python')}, source `{str(env.get('source'))[:10]}`; the whole run {d.get('wall_s')} s.",
        "",
        *table(
            ["step", "status", "wall s", "planned s (H100)"],
            [[k, v["status"], v.get("wall_s"), v.get("planned_s")] for k, v in steps.items()],
        ),
    ]
    if steps.get("fidelity", {}).get("status") == "ok":
        out += _docs_fidelity(steps["fidelity"])
    cov = (steps.get("coverage") or {}).get("result") or {}
    if cov.get("records"):
        out += [
            "**Coverage on CUDA** of the shared ETs (compute ops replayed; collectives need a distributed run):",
            "",
            *table(
                ["trace", "selected", "replayed", "substituted", "skipped", "compute rate"],
                [
                    [r["trace"], r["selected"], r["replayed"], r["substituted"], r["skipped"], pct(r["compute_rate"])]
                    for r in cov["records"]
                ],
            ),
        ]
    sr = (steps.get("streams") or {}).get("result") or {}
    if "original" in sr:
        out += [
            f"**Streams**: kernel overlap between the side stream and the main one per step, original "
            f"{sr['original']['overlap_us']:.0f} µs vs replay {sr['replay']['overlap_us']:.0f} µs: "
            f"{pct(sr['overlap_error'], signed=True)} (target within 10 %: {'met' if sr['met'] else 'not met'}).",
            "",
        ]
    if steps.get("lumos", {}).get("status") == "ok":
        out += _docs_lumos(steps["lumos"])
    b = (steps.get("bound") or {}).get("result") or {}
    if "small" in b:
        rows = [
            [
                f"{x} (batch {b[x]['batch']})",
                f"{b[x]['median_ms']:.2f}",
                pct(b[x]["gpu_busy"]),
                f"{b[x]['ratio']:.3f}",
                f"{(b[x].get('host_calibrated') or {}).get('ratio', float('nan')):.3f}",
            ]
            for x in ("small", "large")
        ]
        out += [
            f'**GPU-bound against host-bound**: "GPU 2x faster" predicted ({b.get("rule")}).',
            "",
            *table(["MLP", "unprofiled step ms", "GPU busy (profiled)", "ratio", "ratio, host-calibrated"], rows),
        ]
    gt = (steps.get("gpu_tests") or {}).get("result") or {}
    if gt:
        out += [f"**pytest -m gpu**: {gt.get('summary')}.", ""]
    return out


if __name__ == "__main__":
    sys.exit(main())
