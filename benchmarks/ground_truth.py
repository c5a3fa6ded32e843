"""What-ifs checked against real before/after pairs (issue 30): each prediction made from one
trace is compared with a second, real trace of the same program in the changed setup.

    .venv/bin/python benchmarks/ground_truth.py

  kernel_times  tracelens_timesformer H100 <-> MI300X, tracelens_bert_small H100 <-> MI300X: the
                source trace with every GPU task's time taken from the other trace, against the
                other trace's measured step (both directions; target within 10 %)
  device        the same pairs, the source retargeted to the other side's GPU from the catalog;
                next to it the naive prediction "the same step as the source" (target 20 %),
                and the same two figures for the GPU phase alone (naive: the source's GPU phase)
                and per launching operator (time-weighted |error| of its GPU time against the
                other trace's, matched as kernel_times matches: errors do not cancel)
  dataloader    kineto_resnet50_dataloader: nw0 (data loaded in the main process) with the
                DataLoader span inclusive 1000x faster, against nw4 (4 loader workers)
Steps are ProfilerStep host spans: the mean over the trace's steps for the tracelens pairs (one
step each), the median for the dataloader pair (nw4's first step is a warm-up outlier, 215 ms
against ~174 ms; the median ignores it), on both the prediction and the measurement. Beside the step, each row gives the GPU phase (first GPU
task start to last GPU task end in a step), which separates the GPU prediction from host work the
two machines do at different speeds (a prediction keeps the source's host). Nothing is
hard-coded: every figure is computed from /work/shared traces (`MYSTIQUE_SHARED_TRACES`).
Writes benchmarks/results/ground_truth.json.
"""

from __future__ import annotations

import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import harness

from engine import envvars
from engine.analysis.steps import step_spans
from engine.simulate import simulate
from engine.trace import load
from engine.trace.steps import step_ms

if TYPE_CHECKING:
    from benchmarks.report import num, table

SHARED = Path(envvars.get("MYSTIQUE_SHARED_TRACES") or harness.ROOT.parent / "shared" / "traces")
OUT = harness.RESULTS / "ground_truth.json"
TARGETS = {"kernel_times": 0.10, "device": 0.20, "dataloader": 0.15}
PAIRS = {  # name -> ((trace, its catalog device), (trace, its catalog device))
    "timesformer": (
        ("tracelens_timesformer/h100_timesformer.json.gz", "H100"),
        ("tracelens_timesformer/mi300_timesformer.json.gz", "MI300X"),
    ),
    "bert_small": (
        ("tracelens_bert_small/h100_bert_small.json.gz", "H100"),
        ("tracelens_mi300_bert_small/mi300_bert_small.json.gz", "MI300X"),
    ),
}
DATALOADER = (
    "kineto_resnet50_dataloader/nw0_worker0.pt.trace.json.gz",
    "kineto_resnet50_dataloader/nw4_worker0.pt.trace.json.gz",
)
LOADER_RX = r"^enumerate\(DataLoader\)"


def _r3(x: float | None) -> float | None:
    return None if x is None else round(x, 3)


def _spec(*edits: dict) -> dict:
    return {"version": 1, "edits": list(edits)}


def gpu_phase_ms(events, stat: str = "mean") -> float | None:
    """Per ProfilerStep: first GPU task start to last GPU task end among the GPU tasks that start
    in the step (the GPU phase, apart from the host work before the first kernel); mean or median."""
    import numpy as np

    from engine.trace.vocab import GPU_CATS

    st = step_spans(events)
    gpu = events[events["cat"].astype(str).isin(GPU_CATS)]
    ts = gpu["ts_us"].to_numpy(np.float64)
    end = ts + gpu["dur_us"].to_numpy(np.float64)
    out = []
    for a, d in zip(st["ts_us"].to_numpy(np.float64), st["dur_us"].to_numpy(np.float64)):
        m = (ts >= a) & (ts < a + d)
        if m.any():
            out.append(float(end[m].max() - ts[m].min()) / 1e3)
    if not out:
        return None
    return float(np.median(out) if stat == "median" else np.mean(out))


def per_op_error_pct(src, r, other) -> tuple[float, float] | None:
    """Time-weighted per-operator error of a prediction's GPU times, against the other trace's
    measured GPU times of the same launching operator (matched as the kernel_times edit matches
    them): sum over operators of |predicted - measured| / sum of measured, in %; and the same for
    the naive prediction (the source's own times). Unlike the step or the GPU phase, errors of
    opposite sign do not cancel."""
    import numpy as np

    from engine.simulate.config import SimConfig
    from engine.simulate.graph import build_graph
    from engine.simulate.whatif.kernel_times import Side, match

    g = r.graph
    mine = Side(g, src.events, src)
    other_side = Side(build_graph(other.events, SimConfig()), other.events, other)
    measured, _, _ = match(mine, other_side)
    ok = np.isfinite(measured)
    if not ok.any():
        return None
    pred = (r.schedule.task_end(g) - r.schedule.task_start(g))[mine.gpu]
    key = np.where(mine.top >= 0, mine.top, -1 - np.arange(len(mine.top)))[ok]
    _, grp = np.unique(key, return_inverse=True)

    def err(x: np.ndarray) -> float:
        a = np.bincount(grp, weights=x[ok])
        b = np.bincount(grp, weights=measured[ok])
        return round(100 * float(np.abs(a - b).sum() / b.sum()), 1)

    return err(pred), err(mine.dur)


def host_before_gpu_ms(events) -> float | None:
    """Mean over ProfilerSteps of the step's start to its first GPU task's start: the host work
    before the GPU phase (a prediction keeps the source's)."""
    import numpy as np

    from engine.trace.vocab import GPU_CATS

    st = step_spans(events)
    ts = np.sort(events.loc[events["cat"].astype(str).isin(GPU_CATS), "ts_us"].to_numpy(np.float64))
    out = []
    for a, d in zip(st["ts_us"].to_numpy(np.float64), st["dur_us"].to_numpy(np.float64)):
        i = np.searchsorted(ts, a)
        if i < len(ts) and ts[i] < a + d:
            out.append(float(ts[i] - a) / 1e3)
    return round(float(np.mean(out)), 3) if out else None


def _row(kind: str, case: str, measured: float, predicted: float, **extra) -> dict:
    err = predicted / measured - 1
    return {
        "kind": kind,
        "case": case,
        "measured_ms": round(measured, 3),
        "predicted_ms": round(predicted, 3),
        "error_pct": round(100 * err, 2),
        "target_pct": round(100 * TARGETS[kind], 1),
        "pass": bool(abs(err) <= TARGETS[kind]),
        **extra,
    }


def pairs() -> list[dict]:
    rows = []
    for name, sides in PAIRS.items():
        traces = {p: load(str(SHARED / p)) for p, _ in sides}
        measured = {p: simulate(tr).measured_iteration_ms for p, tr in traces.items()}
        for (src, src_dev), (dst, dst_dev) in (sides, sides[::-1]):
            case = f"{name} {src_dev} -> {dst_dev}"
            r = simulate(traces[src], _spec({"kind": "kernel_times", "source": str(SHARED / dst)}))
            kt = r.extra["kernel_times"][0]
            rows.append(
                _row(
                    "kernel_times", case, measured[dst], r.predicted_iteration_ms,
                    matched_fraction=kt["matched_fraction"], gpu_ms_source=kt["gpu_ms_before"],
                    gpu_ms_predicted=kt["gpu_ms_after"], source=src, measured_trace=dst,
                    gpu_phase_measured_ms=_r3(gpu_phase_ms(traces[dst].events)),
                    gpu_phase_predicted_ms=_r3(gpu_phase_ms(r.predicted.events)),
                )
            )  # fmt: skip
            r = simulate(traces[src], _spec({"kind": "device", "target": dst_dev}))
            dev = r.extra["device"][0]
            naive = measured[src] / measured[dst] - 1
            row = _row(
                "device", case, measured[dst], r.predicted_iteration_ms,
                naive_ms=round(measured[src], 3), naive_error_pct=round(100 * naive, 2),
                source_device=dev["source"], source_device_from=dev["source_from"],
                classes={c: {k: v[k] for k in ("model", "ms_before", "ms_after") if k in v} for c, v in dev["classes"].items()},
                source=src, measured_trace=dst,
                gpu_phase_measured_ms=_r3(gpu_phase_ms(traces[dst].events)),
                gpu_phase_predicted_ms=_r3(gpu_phase_ms(r.predicted.events)),
            )  # fmt: skip
            row["closer_than_naive"] = abs(row["error_pct"]) < abs(row["naive_error_pct"])
            row["host_before_gpu_ms"] = {
                "source": host_before_gpu_ms(traces[src].events),
                "measured": host_before_gpu_ms(traces[dst].events),
            }
            # the GPU phase, apart from the host work the two machines do at different speeds: the
            # figure the retarget predicts (naive: the source's own GPU phase)
            gm, gp, gs = row["gpu_phase_measured_ms"], row["gpu_phase_predicted_ms"], gpu_phase_ms(traces[src].events)
            if gm and gp and gs:
                row["gpu_phase_error_pct"] = round(100 * (gp / gm - 1), 2)
                row["gpu_phase_naive_error_pct"] = round(100 * (gs / gm - 1), 2)
                row["gpu_phase_closer_than_naive"] = abs(gp / gm - 1) < abs(gs / gm - 1)
            per_op = per_op_error_pct(traces[src], r, traces[dst])
            if per_op is not None:
                row["per_op_error_pct"], row["per_op_naive_error_pct"] = per_op
            rows.append(row)
    return rows


def dataloader() -> list[dict]:
    nw0, nw4 = (load(str(SHARED / p)) for p in DATALOADER)
    spec = _spec({"kind": "speedup", "name": LOADER_RX, "factor": 1000.0, "inclusive": True})
    r = simulate(nw0, spec)
    loader = nw0.events[nw0.events["name"].astype(str).str.match(LOADER_RX)]
    steps = step_spans(nw0.events)
    return [
        _row(
            "dataloader", "resnet50 nw0, DataLoader inclusive 1000x -> nw4", step_ms(nw4),
            step_ms(r.predicted), statistic="median ProfilerStep span",
            nw0_measured_ms=round(step_ms(nw0), 3),
            loader_ms_per_step=round(float(loader["dur_us"].sum()) / len(steps) / 1e3, 3),
            gpu_phase_measured_ms=_r3(gpu_phase_ms(nw4.events, "median")),
            gpu_phase_predicted_ms=_r3(gpu_phase_ms(r.predicted.events, "median")),
            source=DATALOADER[0], measured_trace=DATALOADER[1],
        )
    ]  # fmt: skip


def main() -> int:
    if not (SHARED / "MANIFEST.json").exists():
        print(f"shared traces not found at {SHARED}", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    rows = pairs() + dataloader()
    out = {
        "rows": rows,
        "targets_pct": {k: 100 * v for k, v in TARGETS.items()},
        "passed": sum(r["pass"] for r in rows),
        "total": len(rows),
        "device_closer_than_naive": sum(bool(r.get("closer_than_naive")) for r in rows if r["kind"] == "device"),
        "device_gpu_phase_closer_than_naive": sum(
            bool(r.get("gpu_phase_closer_than_naive")) for r in rows if r["kind"] == "device"
        ),
        "wall_s": round(time.perf_counter() - t0, 1),
        "machine": {"cpu_count": os.cpu_count(), "platform": platform.platform(), "loadavg_1m": harness.load1()},
    }
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(out, indent=1) + "\n")
    for r in rows:
        print(
            f"{r['kind']:13} {r['case']:48} measured {r['measured_ms']:9.3f}  predicted {r['predicted_ms']:9.3f}  "
            f"error {r['error_pct']:+7.2f} %  target {r['target_pct']:.0f} %  {'pass' if r['pass'] else 'FAIL'}"
            + (f"  (naive {r['naive_error_pct']:+.2f} %)" if "naive_error_pct" in r else "")
            + (
                f"  GPU phase {r['gpu_phase_error_pct']:+.2f} % (naive {r['gpu_phase_naive_error_pct']:+.2f} %)"
                if "gpu_phase_naive_error_pct" in r
                else ""
            )
            + (
                f"  per-op {r['per_op_error_pct']:.1f} % (naive {r['per_op_naive_error_pct']:.1f} %)"
                if "per_op_error_pct" in r
                else ""
            )
        )
    print(f"wrote {OUT} ({out['passed']}/{out['total']} within target, {out['wall_s']} s)")
    return 0


# -- its section of docs/figures.md, beside the code that writes its results. benchmarks/report.py
# runs `docs_section` (and the `_docs_*` helpers) on the results file without importing this file
# (so the report stays standard-library only), giving it the formatters named below.
def docs_section(d: dict) -> list[str]:
    """Predictions made from one real trace, checked against a second real trace of the same
    program in the changed setup: `kernel_times` (GPU durations taken from the other trace) and
    `device` (retarget to the other side's GPU from the catalog, next to the naive "same step as
    the source") on the tracelens H100/MI300X pairs, both directions; the DataLoader span of
    kineto_resnet50_dataloader nw0 inclusive 1000x faster against nw4 (4 loader workers), median
    ProfilerStep span (nw4's first step is a warm-up outlier). Error = predicted / measured - 1. GPU
    phase: first GPU task start to last GPU task end in a step, apart from the host work before it
    (a prediction keeps the source machine's host); per-op error: benchmarks/ground_truth.py."""
    rows = []
    for r in d["rows"]:
        naive = f"{r['naive_error_pct']:+.2f} %" if "naive_error_pct" in r else "–"
        gm, gp = r.get("gpu_phase_measured_ms"), r.get("gpu_phase_predicted_ms")
        phase = f"{num(gm, 1)} / {num(gp, 1)}" if gm and gp else "–"
        gpu_err = (
            f"{r['gpu_phase_error_pct']:+.1f} % ({r['gpu_phase_naive_error_pct']:+.1f} %); "
            f"{r['per_op_error_pct']:.1f} % ({r['per_op_naive_error_pct']:.1f} %)"
            if "gpu_phase_naive_error_pct" in r and "per_op_error_pct" in r
            else "–"
        )
        rows.append(
            [r["kind"], r["case"], num(r["measured_ms"], 3), num(r["predicted_ms"], 3), f"{r['error_pct']:+.2f} %",
             naive, f"± {r['target_pct']:.0f} %", "pass" if r["pass"] else "FAIL", phase, gpu_err]
        )  # fmt: skip
    head = [
        "what-if",
        "case",
        "measured ms",
        "predicted ms",
        "error",
        "naive error",
        "target",
        "",
        "GPU phase ms meas / pred",
        "GPU phase error (naive); per-op error (naive)",
    ]
    out = table(head, rows)
    kt = [r for r in d["rows"] if r["kind"] == "kernel_times"]
    if kt:
        out += [
            "Kernel matching (launching op order, name and input dims): "
            + ", ".join(f"{r['case']} {100 * r['matched_fraction']:.0f} %" for r in kt)
            + " of GPU tasks matched.",
            "",
        ]
    hosts = "; ".join(
        f"{r['case']}: {num(r['host_before_gpu_ms']['source'], 1)} ms on the source, "
        f"{num(r['host_before_gpu_ms']['measured'], 1)} ms measured"
        for r in d["rows"]
        if r["kind"] == "device" and r.get("host_before_gpu_ms")
    )
    out += [
        f"{d['passed']} of {d['total']} within target; the device retarget is closer than the naive "
        f"prediction on {d['device_closer_than_naive']} of {sum(r['kind'] == 'device' for r in d['rows'])} pairs"
        + (
            f" on the whole step, on {d['device_gpu_phase_closer_than_naive']} on the GPU phase"
            if "device_gpu_phase_closer_than_naive" in d
            else ""
        )
        + f". Wall {d['wall_s']} s.",
        "",
        "The whole step keeps the source machine's host (a prediction changes GPU times only); on these "
        "pairs the hosts differ about as much as the GPUs do (timesformer's pipeline decodes and "
        "preprocesses the video on the CPU inside the step, before the first kernel; bert_small is "
        f"host-bound; host time before the first GPU task, {hosts}), so the naive step can land close "
        "by compensation. The GPU phase and the "
        "per-operator error (time-weighted |predicted - measured| of each launching operator's GPU time, "
        "matched as kernel_times matches, where errors of opposite sign do not cancel) show the retarget "
        "itself. Peaks and a roofline cannot know which kernel each vendor's library picks for a shape "
        "(on timesformer a batched matmul with 8 x 8 tiles is 28x slower on the MI300X than on the H100, "
        "and the large bf16 addmms 1.5x slower, against a 1.32x higher MI300X bf16 peak).",
        "",
    ]
    return out


if __name__ == "__main__":
    sys.exit(main())
