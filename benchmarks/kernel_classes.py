"""GPU time per kernel class (engine.trace.kernels) on every shared Kineto trace with GPU work.

Each Kineto file of ../shared/traces (MANIFEST.json kind "kineto") is loaded alone; its GPU tasks
(kernels, memcpy, memset) are classified by name and their summed durations per class divided by
the summed duration of all GPU tasks (overlapping streams count twice). A file without GPU tasks
is listed with none.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/kernel_classes.py [--shared DIR] [--out JSON]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import TYPE_CHECKING

from harness import RESULTS, ROOT  # first: puts the repo root on sys.path

from engine.trace import load
from engine.trace.kernels import KernelClass, class_shares

if TYPE_CHECKING:
    from benchmarks.report import num, pct, table

SHARED = ROOT.parent / "shared" / "traces"


def measure(shared: Path) -> dict:
    manifest = json.loads((shared / "MANIFEST.json").read_text())
    rows = []
    for entry in manifest:
        if entry.get("kind") != "kineto":
            continue
        t0 = time.perf_counter()
        ev = load(shared / entry["path"], use_cache=False).events
        t = class_shares(ev)
        rows.append(
            {
                "trace": entry["path"],
                "gpu_tasks": int(t["kernels"].sum()) if len(t) else 0,
                "gpu_ms": round(float(t["dur_us"].sum()) / 1e3, 3) if len(t) else 0.0,
                "shares": {str(r["class"]): round(float(r["share"]), 4) for _, r in t.iterrows()},
                "tasks": {str(r["class"]): int(r["kernels"]) for _, r in t.iterrows()},
                "load_s": round(time.perf_counter() - t0, 2),
            }
        )
        print(entry["path"], rows[-1]["shares"], flush=True)
    return {"classes": [c.value for c in KernelClass], "traces": rows, "date": time.strftime("%Y-%m-%d")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shared", type=Path, default=SHARED)
    ap.add_argument("--out", type=Path, default=RESULTS / "kernel_classes.json")
    args = ap.parse_args()
    doc = measure(args.shared)
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {args.out}")


# -- its section of docs/figures.md, beside the code that writes its results. benchmarks/report.py
# runs `docs_section` (and the `_docs_*` helpers) on the results file without importing this file
# (so the report stays standard-library only), giving it the formatters named below.
def docs_section(d: dict) -> list[str]:
    """GPU time per kernel class (engine/trace/kernels.py: GEMM across cuBLAS, CUTLASS, hipBLASLt
    `Cijk_`, rocBLAS and Triton matmul; attention apart from GEMM) on every shared Kineto trace:
    each file loaded alone, its GPU tasks' summed durations per class over the summed duration of
    all its GPU tasks (overlapping streams count twice)."""
    classes = [c for c in d["classes"] if any(c in r["shares"] for r in d["traces"])]
    rows = [
        [
            r["trace"],
            num(r["gpu_tasks"]),
            num(r["gpu_ms"], 1),
            *[pct(r["shares"][c]) if c in r["shares"] else "" for c in classes],
        ]
        for r in d["traces"]
    ]
    out = table(["trace", "GPU tasks", "GPU ms", *classes], rows)
    return out + [f"Run {d.get('date')}.", ""]


if __name__ == "__main__":
    main()
