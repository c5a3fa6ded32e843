"""A second opinion on the critical path: Meta's Holistic Trace Analysis (HTA, PyPI `traceinsight`)
against our simulator's, on every shared single-rank Kineto trace with GPU kernels and host events.

    python3 -m venv /tmp/hta && /tmp/hta/bin/pip install --no-deps traceinsight \
        && /tmp/hta/bin/pip install "pandas<3" numpy networkx plotly pyyaml psutil
    .venv/bin/python benchmarks/hta_second_opinion.py --hta-python /tmp/hta/bin/python [--only SUBSTRING]

HTA 0.6.1 fails on some traces under pandas 3 (an int8/int16 column assignment), so it runs in its
own interpreter (`--hta-python`, or MYSTIQUE_HTA_PYTHON), which this script calls once per trace;
without one, HTA must be importable here (`pip install --no-deps --target DIR traceinsight` and
PYTHONPATH=DIR).

Per trace:
  hta    `TraceAnalysis.critical_path_analysis` on the trace's one rank over all its ProfilerStep
         instances (the whole trace when it has none): the share of the path's time per HTA
         `bound_by` class (cpu_bound, gpu_compute_bound, gpu_kernel_kernel_overhead,
         gpu_kernel_launch_overhead, ...); `gpu_bound_pct` = gpu_compute_bound +
         gpu_communication_bound. Beside it HTA's temporal breakdown (GPU idle / compute /
         non-compute share of the GPU's span), which needs no path.
  ours   `engine.simulate.simulate(trace).critical_path` (public API only, so the figures follow
         the simulator's current critical path): the share per `Kind`; `gpu_bound_pct` = compute +
         communication.
  step   the measured step (mean ProfilerStep span), else the simulated window.
The two paths differ by construction: HTA walks the recorded events (a host call that waited for
the GPU is host time on its path unless a sync edge explains it), ours walks the simulated
schedule, where a wait is an edge to the GPU (engine/simulate/waits.py). HTA reads the object form
only, so a file in the array form (the 2021 profiler's top-level JSON list) is handed to it wrapped
as {"traceEvents": [...]} with its legacy categories renamed (Operator -> cpu_op, Kernel -> kernel,
Runtime -> cuda_runtime, ...); a trace HTA still cannot analyse is listed with HTA's error. Without HTA importable the
script says so in one line and exits 2. Writes benchmarks/results/hta_second_opinion.json.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import logging
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

import harness

from engine import envvars

if TYPE_CHECKING:
    from benchmarks.report import num, table


SHARED = Path(envvars.get("MYSTIQUE_SHARED_TRACES") or harness.ROOT.parent / "shared" / "traces")
OUT = harness.RESULTS / "hta_second_opinion.json"
GPU_BOUND_HTA = ("gpu_compute_bound", "gpu_communication_bound")
GPU_BOUND_OURS = ("compute", "communication")
LEGACY_CATS = {
    "Operator": "cpu_op",
    "Kernel": "kernel",
    "Runtime": "cuda_runtime",
    "Memcpy": "gpu_memcpy",
    "Memset": "gpu_memset",
}


def traces() -> list[str]:
    """Single-rank Kineto traces with GPU kernels and host operators, from the shared MANIFEST."""
    man = json.loads((SHARED / "MANIFEST.json").read_text())
    items = man if isinstance(man, list) else man.get("files", [])
    return [
        m["path"] for m in items if m.get("kind") == "kineto" and (m.get("kernels") or 0) > 0 and (m.get("cpu_ops") or 0) > 0
    ]  # fmt: skip


def _pct(parts: dict[str, float]) -> dict[str, float]:
    total = sum(parts.values())
    return {k: round(100 * v / total, 2) for k, v in sorted(parts.items()) if k} if total > 0 else {}


def hta_opinion(path: Path) -> dict:
    """HTA's critical-path shares and temporal breakdown for one trace file."""
    from hta.trace_analysis import TraceAnalysis

    with tempfile.TemporaryDirectory() as d:
        wrapped = _object_form(path, Path(d))
        if not wrapped:
            (Path(d) / path.name).symlink_to(path)
        quiet = io.StringIO()
        t0 = time.perf_counter()
        with contextlib.redirect_stdout(quiet):
            ta = TraceAnalysis(trace_dir=d)
            rank = next(iter(ta.t.traces))
            df = ta.t.traces[rank]
            names = ta.t.symbol_table.get_sym_table()
            steps = [i for i, n in enumerate(names) if str(n).startswith("ProfilerStep")]
            n = int(df["name"].isin(steps).sum())
            annotation, instance = ("ProfilerStep", (0, n - 1)) if n else ("", None)
            out = ta.critical_path_analysis(rank=rank, annotation=annotation, instance_id=instance)
            if out is None:
                raise RuntimeError("HTA's critical_path_analysis returned nothing")
            cp, _ = out
            bd = cp.get_critical_path_breakdown()
            tb = ta.get_temporal_breakdown(visualize=False)
        shares = _pct({str(k): float(v) for k, v in bd.groupby("bound_by")["duration"].sum().items()})
        row = tb.iloc[0]
        return {
            "window": f"{n} ProfilerStep annotation rows" if n else "whole trace (no ProfilerStep)",
            "input": "array form wrapped as {'traceEvents': [...]}, legacy categories renamed"
            if wrapped
            else "the file as it is",
            "path_ms": round(float(bd["duration"].sum()) / 1e3, 3),
            "gpu_bound_pct": round(sum(shares.get(k, 0.0) for k in GPU_BOUND_HTA), 2),
            "bound_by_pct": shares,
            # only cpu_bound / data_loading edges: HTA linked no kernel into its path (on a trace whose
            # GPU is busy, a sign it did not connect the kernels to their launches)
            "gpu_on_path": any(k not in ("cpu_bound", "data_loading") for k in shares),
            "temporal_pct": {
                "idle": float(row["idle_time_pctg"]),
                "compute": float(row["compute_time_pctg"]),
                "non_compute": float(row["non_compute_time_pctg"]),
            },
            "wall_s": round(time.perf_counter() - t0, 2),
        }


def _object_form(path: Path, into: Path) -> bool:
    """HTA reads the object form only: a file in the Trace Event Format's array form (the 2021
    profiler's top-level list) is written into `into` as {"traceEvents": [...]}, the same events,
    its legacy categories (Operator, Kernel, Runtime, Memcpy, Memset) renamed as today's profiler
    writes them."""
    import gzip

    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        head = f.read(64).lstrip()
    if not head.startswith("["):
        return False
    with opener(path, "rt") as f:
        events = json.load(f)
    for e in events:  # the 2021 profiler's categories, as today's profiler names them (HTA knows these)
        if isinstance(e, dict) and e.get("cat") in LEGACY_CATS:
            e["cat"] = LEGACY_CATS[e["cat"]]
    with gzip.open(into / path.name if path.suffix == ".gz" else into / (path.name + ".gz"), "wt") as f:
        json.dump({"traceEvents": events}, f)
    return True


def hta_via(python: str, path: Path) -> dict:
    """hta_opinion(path) in another interpreter (this file run with --hta-only)."""
    r = subprocess.run(
        [python, __file__, "--hta-only", str(path)], capture_output=True, text=True, timeout=1800
    )  # fmt: skip
    lines = r.stdout.strip().splitlines()
    if r.returncode != 0 or not lines:
        tail = (r.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"HTA in {python} exited {r.returncode}: {tail[:200]}")
    return json.loads(lines[-1])


def _hta_version(python: str | None) -> str | None:
    code = "from importlib.metadata import version; print(version('traceinsight'))"
    if python is None:
        return _dist_version()
    r = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=60)
    return r.stdout.strip() or None


def our_opinion(path: Path) -> dict:
    from engine.simulate import simulate
    from engine.trace import load

    t0 = time.perf_counter()
    r = simulate(load(str(path)))
    cp = r.critical_path
    shares = _pct({str(k): float(v) for k, v in cp.by_kind.items()})
    return {
        "step_ms": round(r.measured_iteration_ms or r.predicted_iteration_ms, 3),
        "step_source": "ProfilerStep" if r.measured_iteration_ms else "simulated window",
        "path_ms": round(cp.ms, 3),
        "gpu_bound_pct": round(sum(shares.get(k, 0.0) for k in GPU_BOUND_OURS), 2),
        "by_kind_pct": shares,
        "wall_s": round(time.perf_counter() - t0, 2),
    }


def opinions(path: Path, hta_python: str | None) -> dict:
    """{"ours": ..., "hta": ...} for one trace file; a failure is a result ({"error": one line})."""
    hta = (lambda p: hta_via(hta_python, p)) if hta_python else hta_opinion
    out: dict = {}
    for key, fn in (("ours", our_opinion), ("hta", hta)):
        try:
            out[key] = fn(path)
        except Exception as exc:  # noqa: BLE001 (a per-trace failure is a result, not a crash)
            msg = str(exc).splitlines()[0][:200] if str(exc) else ""
            out[key] = {"error": f"{type(exc).__name__}: {msg}"}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="", help="run the traces whose path contains this")
    ap.add_argument(
        "--hta-python", default=envvars.get("MYSTIQUE_HTA_PYTHON"), help="interpreter that has HTA (traceinsight)"
    )
    ap.add_argument("--hta-only", default=None, help=argparse.SUPPRESS)  # internal: HTA's figures for one file, as JSON
    args = ap.parse_args(argv)
    if args.hta_only:
        logging.disable(logging.WARNING)
        print(json.dumps(hta_opinion(Path(args.hta_only))))
        return 0
    probe = [args.hta_python, "-c", "import hta.trace_analysis"] if args.hta_python else None
    if probe is not None:
        try:
            ok = subprocess.run(probe, capture_output=True, timeout=120).returncode == 0
        except OSError:
            ok = False
        if not ok:
            print(f"HTA is not importable by {args.hta_python}: pip install traceinsight there", file=sys.stderr)
            return 2
    else:
        try:
            import hta.trace_analysis  # noqa: F401 (an availability probe)
        except ImportError as exc:
            print(
                f"HTA is not importable ({exc}): pip install traceinsight, or give --hta-python (this script's docstring)",
                file=sys.stderr,
            )
            return 2
    if not (SHARED / "MANIFEST.json").exists():
        print(f"shared traces not found at {SHARED}", file=sys.stderr)
        return 2
    logging.disable(logging.WARNING)  # HTA logs every parse step
    t0 = time.perf_counter()
    rows = []
    for rel in traces():
        if args.only not in rel:
            continue
        row: dict = {"trace": rel, **opinions(SHARED / rel, args.hta_python)}
        rows.append(row)
        o, h = row["ours"], row["hta"]
        print(
            f"{rel:60} step {o.get('step_ms', '-'):>10}  GPU-bound: ours {o.get('gpu_bound_pct', '-'):>6} %  "
            f"HTA {h.get('gpu_bound_pct', '-'):>6} %" + (f"  HTA error: {h['error']}" if "error" in h else ""),
            flush=True,
        )
    synthetic = [] if args.only else synthetic_rows(args.hta_python)
    out = {
        "rows": rows,
        "synthetic": synthetic,
        "hta_version": _hta_version(args.hta_python),
        "hta_python": "own interpreter (pandas < 3)" if args.hta_python else "this interpreter",
        "wall_s": round(time.perf_counter() - t0, 1),
        "machine": {"cpu_count": os.cpu_count(), "platform": platform.platform(), "loadavg_1m": harness.load1()},
    }
    if args.only:
        print("--only: results not written (a partial run)")
        return 0
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {OUT} ({len(rows)} traces, {out['wall_s']} s)")
    return 0


# The queue's physics (engine.testing.launch_queue): a GPU-bound step whose host's only sign is a
# blocking cudaLaunchKernel (the shared traces have none), and a host-bound one; the truth is the
# GPU's busy share of the step, counted by the physics itself.
SYNTHETIC = {"gpu_bound": {}, "host_bound": {"kernel_us": 10.0}}


def synthetic_rows(hta_python: str | None) -> list[dict]:
    from engine.testing.launch_queue import QueueMachine, queue_trace

    rows = []
    with tempfile.TemporaryDirectory() as d:
        for name, kw in SYNTHETIC.items():
            doc, truth = queue_trace(QueueMachine(**kw))
            p = Path(d) / f"queue_{name}.json"
            p.write_text(json.dumps(doc))
            row: dict = {
                "trace": f"launch queue, {name} (engine.testing.launch_queue)",
                "truth": {
                    "gpu_busy_pct": round(100 * sum(truth.busy_us) / sum(truth.step_us), 2),
                    "blocked_launches": truth.blocked_launches,
                },
                **opinions(p, hta_python),
            }
            rows.append(row)
            print(f"{row['trace']:60} GPU busy {row['truth']['gpu_busy_pct']} %: ours "
                  f"{row['ours'].get('gpu_bound_pct')} %, HTA {row['hta'].get('gpu_bound_pct')} %", flush=True)  # fmt: skip
    return rows


def _dist_version() -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("traceinsight")
    except PackageNotFoundError:
        return None


def docs_section(d: dict) -> list[str]:
    """Our simulator's critical path (engine.simulate, mean over ProfilerStep walks) against Meta's
    HTA (`critical_path_analysis` over all ProfilerStep instances, else the whole trace) on every
    shared single-rank Kineto trace with kernels and host events. GPU-bound: ours compute +
    communication, HTA gpu_compute_bound + gpu_communication_bound, as a share of each path's time.
    HTA walks the recorded events, ours the simulated schedule, where a host call's wait on the GPU
    is an edge (engine/simulate/waits.py); HTA's temporal breakdown (GPU idle share of the GPU's
    span) needs no path."""
    rows = []
    for r in d["rows"]:
        o, h = r.get("ours", {}), r.get("hta", {})
        bound = h.get("bound_by_pct", {})
        rows.append(
            [
                r["trace"],
                num(o.get("step_ms"), 3) if "step_ms" in o else "-",
                f"{num(o.get('path_ms'), 1)} / {num(h.get('path_ms'), 1)}" if "path_ms" in h else "-",
                f"{o['gpu_bound_pct']:.1f} %" if "gpu_bound_pct" in o else o.get("error", "-"),
                f"{h['gpu_bound_pct']:.1f} %" if "gpu_bound_pct" in h else h.get("error", "-"),
                f"{bound['cpu_bound']:.1f} %" if "cpu_bound" in bound else "-",
                f"{h['temporal_pct']['idle']:.1f} %" if "temporal_pct" in h else "-",
                "no kernel on HTA's path" if h.get("gpu_on_path") is False else "",
            ]
        )
    head = ["trace", "step ms", "path ms ours / HTA", "GPU-bound, ours", "GPU-bound, HTA", "HTA cpu_bound",
            "HTA GPU idle (temporal)", "note"]  # fmt: skip
    return (
        table(head, rows)
        + [
            f"HTA (traceinsight) {d.get('hta_version')}, run in {d.get('hta_python', 'this interpreter')}. Our path is "
            "the mean per step; HTA's spans the window it analysed (all steps together, or the whole trace). HTA's "
            "path is built from operators and kernels: host time in Python functions with no operator under them "
            "(a pipeline's preprocessing, a data loader) is not on it, so its GPU-bound share is of a shorter path. "
            "Where HTA's path holds no kernel at all while the GPU is busy (temporal idle well below 100 %), HTA did "
            "not link the kernels to their launches on that trace: its share there says nothing about the step. "
            f"Wall {d['wall_s']} s.",
            "",
        ]
        + _docs_synthetic(d.get("synthetic") or [])
    )


def _docs_synthetic(rows: list[dict]) -> list[str]:
    """The queue's physics (engine.testing.launch_queue), where the truth is known."""
    if not rows:
        return []
    body = []
    for r in rows:
        o, h, t = r.get("ours", {}), r.get("hta", {}), r["truth"]
        body.append(
            [
                r["trace"],
                f"{t['gpu_busy_pct']:.1f} %",
                str(t["blocked_launches"]),
                f"{o['gpu_bound_pct']:.1f} %" if "gpu_bound_pct" in o else o.get("error", "-"),
                f"{h['gpu_bound_pct']:.1f} %" if "gpu_bound_pct" in h else h.get("error", "-"),
                f"{h['bound_by_pct'].get('cpu_bound', 0.0):.1f} %" if "bound_by_pct" in h else "-",
            ]
        )
    head = ["trace", "GPU busy (physics)", "launches that waited", "GPU-bound, ours", "GPU-bound, HTA", "HTA cpu_bound"]
    return (
        [
            "Where the truth is known: a queue's physics played forward (`engine/testing/launch_queue.py`), 3 steps "
            "of 400 launches. On the GPU-bound machine a full launch queue blocks the host's launches; a path that "
            "counts a blocked launch as host work blames the host for the GPU's time."
        ]
        + [""]
        + table(head, body)
        + [""]
    )


if __name__ == "__main__":
    sys.exit(main())
