"""What-ifs from a profiled GPU trace with and without the profiler's host overhead taken out,
against the changed model captured as the truth.

    .venv/bin/python benchmarks/unprofiled.py

sample_traces/h200_pairs/: seven captures on an NVIDIA H200 (our capture code, torch 2.11, 3
profiled steps; each meta's `median_ms` is the same step timed without the profiler). For each
change (mlp batch x2, transformer batch x2, transformer layers x2) the base capture is simulated
under the edit, raw and after the `unprofiled` edit (engine/simulate/whatif/unprofiled.py, with
the base's unprofiled step), and compared with the changed model's own unprofiled step. And
"GPU 2x faster" on an MLP at batch 16 and 16384, raw and unprofiled. Writes
benchmarks/results/unprofiled.json.
"""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING

from harness import ROOT  # first: puts the repo root on sys.path

import engine.trace as T
from engine.simulate import simulate

if TYPE_CHECKING:
    from benchmarks.report import pct, table

PAIRS = ROOT / "sample_traces" / "h200_pairs"
CHANGES = {  # changed capture -> (base capture, the edit that predicts it)
    "mlp_batch_x2": ("mlp", {"kind": "batch", "scale": 2.0, "size": 1536}),
    "transformer_batch_x2": ("transformer", {"kind": "batch", "scale": 2.0, "size": 6, "multiples": [512]}),
    "transformer_layers_x2": ("transformer", {"kind": "layers", "module": r"blocks\.\d+", "copies": 1}),
}
GPU_2X = {"kind": "speedup", "category": "gpu", "factor": 2.0}


def capture(label: str):
    folder = PAIRS / label
    meta = json.loads(next(folder.glob("*_meta.json")).read_text())
    return T.load(next(folder.glob("*_kineto.json.gz")), use_cache=False), float(meta["median_ms"])


def predict(trace, *edits: dict) -> tuple[float, dict]:
    r = simulate(trace, {"version": 1, "edits": list(edits)} if edits else None)
    return r.predicted_iteration_ms, r.extra.get("unprofiled") or {}


def main() -> int:
    changes = []
    for changed, (base_label, edit) in CHANGES.items():
        base, base_ms = capture(base_label)
        _, truth = capture(changed)
        raw, _ = predict(base, edit)
        cal, rep = predict(base, {"kind": "unprofiled", "step_ms": base_ms}, edit)
        changes.append(
            {
                "change": changed,
                "base_unprofiled_ms": base_ms,
                "base_profiled_simulated_ms": rep.get("profiled_step_ms"),
                "host_factor": rep.get("host_factor"),
                "truth_ms": truth,
                "raw_ms": raw,
                "raw_error": raw / truth - 1,
                "unprofiled_ms": cal,
                "unprofiled_error": cal / truth - 1,
            }
        )
    bound = []
    for label in ("bound_small", "bound_large"):
        tr, ms = capture(label)
        unprof = {"kind": "unprofiled", "step_ms": ms}
        r0, _ = predict(tr)
        r1, _ = predict(tr, GPU_2X)
        c1, rep = predict(tr, unprof, GPU_2X)
        bound.append(
            {
                "capture": label,
                "unprofiled_ms": ms,
                "profiled_simulated_ms": r0,
                "raw_ratio": r1 / r0,
                "unprofiled_ratio": c1 / ms,
                "host_factor": rep.get("host_factor"),
            }
        )
    meta = json.loads(next((PAIRS / "mlp").glob("*_meta.json")).read_text())
    out = {"device": (meta.get("metrics") or {}).get("gpu_name"), "changes": changes, "gpu_2x": bound}
    path = ROOT / "benchmarks" / "results" / "unprofiled.json"
    path.write_text(json.dumps(out, indent=2) + "\n")
    for c in changes:
        print(
            f"{c['change']:<24} truth {c['truth_ms']:7.2f} ms  raw {c['raw_ms']:7.2f} ({c['raw_error']:+.1%})  "
            f"unprofiled {c['unprofiled_ms']:7.2f} ({c['unprofiled_error']:+.1%})"
        )
    for b in bound:
        print(f"{b['capture']:<24} GPU 2x: raw {b['raw_ratio']:.3f}x, unprofiled {b['unprofiled_ratio']:.3f}x")
    print(f"wrote {path}")
    return 0


def docs_section(d: dict) -> list[str]:
    """Each change predicted from the base capture's profiled trace, raw and after the
    `unprofiled` edit (the profiler's host overhead taken out against the base's unprofiled
    step), against the changed model captured and timed without the profiler; and "GPU 2x
    faster" on a host-bound and a GPU-bound MLP, raw and unprofiled (ratio to the unprofiled step)."""
    rows = [
        [
            c["change"],
            f"{c['truth_ms']:.2f}",
            f"{c['raw_ms']:.2f}",
            pct(c["raw_error"], signed=True),
            f"{c['unprofiled_ms']:.2f}",
            pct(c["unprofiled_error"], signed=True),
            f"{c['host_factor']:.3f}",
        ]
        for c in d["changes"]
    ]
    brow = [
        [b["capture"], f"{b['unprofiled_ms']:.2f}", f"{b['profiled_simulated_ms']:.2f}", f"{b['raw_ratio']:.3f}",
         f"{b['unprofiled_ratio']:.3f}"]
        for b in d["gpu_2x"]
    ]  # fmt: skip
    return [
        f"Captures on {d.get('device')} (`sample_traces/h200_pairs/`).",
        "",
        *table(["change", "truth ms", "raw ms", "raw error", "unprofiled ms", "error", "host factor"], rows),
        *table(
            ["GPU 2x faster", "unprofiled step ms", "profiled, simulated ms", "raw ratio", "unprofiled ratio"], brow
        ),
    ]


if __name__ == "__main__":
    sys.exit(main())
