"""Capture the GPU before/after pairs of sample_traces/h200_pairs/ on a GPU machine.

    python3 benchmarks/gpu_pairs.py [--out DIR]       (on the GPU machine; DIR default $OUT)

Seven captures at the GPU run's sizes (benchmarks/gpurun/models.py): mlp and its batch x2;
transformer, its batch x2 and its layers x2; an MLP at batch 16 and 16384. 5 warm-up, 20 timed
(the meta's unprofiled `median_ms`), 3 profiled steps each. Kineto trace and meta only go into
`caps_h200.tar.gz` (about 1 MB; the ETs stay on the machine); unpack it into
sample_traces/h200_pairs/. About 20 s on an H200 after the wheels are installed (docs/gpu_run.md).
"""

from __future__ import annotations

import argparse
import os
import sys
import tarfile
import tempfile
import time

import harness  # noqa: F401  (first: puts the repo root on sys.path)

from benchmarks.gpurun.models import BOUND, SIZES


def jobs() -> dict[str, tuple[str, dict]]:
    m, t, b = SIZES["full"]["mlp"], SIZES["full"]["transformer"], BOUND["full"]
    small_large = {k: {"batch": b[k], "widths": b["widths"], "classes": b["classes"]} for k in ("small", "large")}
    return {
        "mlp": ("mlp", m),
        "mlp_batch_x2": ("mlp", {**m, "batch": 2 * m["batch"]}),
        "transformer": ("transformer", t),
        "transformer_batch_x2": ("transformer", {**t, "batch": 2 * t["batch"]}),
        "transformer_layers_x2": ("transformer", {**t, "layers": 2 * t["layers"]}),
        "bound_small": ("mlp", small_large["small"]),
        "bound_large": ("mlp", small_large["large"]),
    }


def main(argv=None) -> int:
    from engine.capture.api import capture_sample

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.environ.get("OUT") or ".", help="where caps_h200.tar.gz goes")
    ap.add_argument("--device", default="cuda")
    a = ap.parse_args(argv)
    work = tempfile.mkdtemp(prefix="gpu_pairs_")
    t0 = time.time()
    with tarfile.open(os.path.join(a.out, "caps_h200.tar.gz"), "w:gz") as tar:
        for label, (model, cfg) in jobs().items():
            folder = os.path.join(work, label)
            r = capture_sample(
                model, overrides=cfg, out_dir=folder, name=model, steps=3, warmup=5, timing_steps=20, device=a.device
            )
            print(label, round(r.median_ms, 3), flush=True)
            for suffix in ("kineto.json.gz", "meta.json"):
                tar.add(os.path.join(folder, f"{model}_{suffix}"), f"{label}/{model}_{suffix}")
    print("done", round(time.time() - t0, 1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
