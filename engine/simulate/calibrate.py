"""Microbenchmarks for the cost model, run on this machine (imports torch lazily; never imported by
engine.simulate itself, so the simulator stays torch-free).

    python -m engine.simulate.calibrate [--device cpu] [--threads 1]

Each measurement is cached by (op, shapes, dtype, device, threads) in
`costmodel.cache_dir()/measurements.json` (`.mystique_cache/costmodel/` unless MYSTIQUE_COSTMODEL_DIR
or MYSTIQUE_CACHE_DIR say otherwise) so re-runs only time new shapes. Per family it
fits the curve of costmodel.py on a training set of shapes and reports the error on held-out
shapes (every third size), and writes `curves_<device>.json`, which the simulator uses when a
trace has too few ops of a family to fit its own curve. Embedding lookups get their own
model `t = a + b * lookups * dim + c * rows * dim + e * lookups + f * max(0, table bytes - knee)`
(lookup traffic, the table-sized dense gradient, per-lookup index work such as the backward's
sort, and the extra cost of tables beyond the caches' reach: costmodel.embedding_features),
fitted separately for forward and backward on tables up to 400k rows.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from engine.simulate.costmodel import cache_dir, fit_curve, fit_embedding

# (m, k, n) of the timed matmuls: small to mid-size, square and skewed
GEMM_SIZES = [
    (64, 64, 64), (128, 256, 128), (256, 256, 256), (256, 512, 512), (384, 256, 768), (512, 512, 512),
    (256, 1024, 512), (768, 256, 1024), (512, 1024, 1024), (1024, 1024, 512), (1024, 1024, 1024), (2048, 512, 1024),
]  # fmt: skip
MEM_SIZES = [2**k for k in range(10, 23)]
EMB_SHAPES = [
    (r, d, lk)
    for r in (2_000, 10_000, 50_000, 100_000, 200_000, 400_000)
    for d in (16, 32, 64)
    for lk in (5_000, 20_000, 40_000)
]


def _time(fn: Callable[[], Any], reps: int = 5, min_ms: float = 2.0) -> float:
    """Median thread-CPU microseconds per call (1 intra-op thread: the work runs on this thread).

    Why CPU time: on a shared machine other processes stretch wall-clock timings at random; the
    thread's CPU time counts only its own cycles. Calls shorter than `min_ms` are looped."""
    fn()
    t0 = time.thread_time()
    fn()
    once = max(time.thread_time() - t0, 1e-6)
    inner = max(1, int(min_ms / 1000 / once))
    ts = []
    for _ in range(reps):
        t0 = time.thread_time()
        for _ in range(inner):
            fn()
        ts.append((time.thread_time() - t0) / inner)
    return statistics.median(ts) * 1e6


def _time_mm(a: Any, b: Any) -> float:
    import torch

    return _time(lambda: torch.mm(a, b))


def _time_add(x: Any, y: Any) -> float:
    import torch

    return _time(lambda: torch.add(x, y))


def _store() -> tuple[Path, dict]:
    p = cache_dir() / "measurements.json"
    try:
        return p, json.loads(p.read_text())
    except (OSError, ValueError):
        return p, {}


def measure(device: str = "cpu", threads: int = 1, progress=None) -> dict[str, list[dict]]:
    import torch

    if threads:
        torch.set_num_threads(threads)
    dev = torch.device(device)
    path, cache = _store()
    out: dict[str, list[dict]] = {"gemm": [], "memory": [], "embedding_fwd": [], "embedding_bwd": []}

    def get(key: str, fn: Callable[..., float]) -> float:
        if key not in cache:
            cache[key] = fn()
        return cache[key]

    for m, k, n in GEMM_SIZES:
        a, b = torch.randn(m, k, device=dev), torch.randn(k, n, device=dev)
        t = get(f"aten::mm|{m}x{k},{k}x{n}|float32|{device}|{threads}|cpu", partial(_time_mm, a, b))
        out["gemm"].append({"work": 2.0 * m * k * n, "t_us": t, "shape": [m, k, n]})
    for s in MEM_SIZES:
        x, y = torch.randn(s, device=dev), torch.randn(s, device=dev)
        t = get(f"aten::add|{s},{s}|float32|{device}|{threads}|cpu", partial(_time_add, x, y))
        out["memory"].append({"work": 12.0 * s, "t_us": t, "shape": [s]})
    g = torch.Generator().manual_seed(0)
    for rows, dim, lk in EMB_SHAPES:
        emb = torch.nn.EmbeddingBag(rows, dim, mode="sum").to(dev)
        idx = torch.randint(0, rows, (lk,), generator=g).to(dev)
        off = torch.arange(0, lk, max(lk // 1024, 1)).to(dev)[:1024]
        key = f"aten::embedding_bag|{rows}x{dim},{lk}|float32|{device}|{threads}|cpu"

        def fwd(emb=emb, idx=idx, off=off) -> float:
            return _time(lambda: emb(idx, off))

        def bwd(emb=emb, idx=idx, off=off, rows=rows) -> float:
            # the op itself, as the trace records it and the replay runs it: through autograd the
            # same backward costs 0.3-0.7 ms more per call (graph and grad bookkeeping), which
            # would charge every extra shard of a plan for work its replay never does
            w = emb.weight.detach()
            out, o2b, bag_size, max_idx = torch.ops.aten._embedding_bag(w, idx, off, False, 0, False, None, False, -1)
            grad = torch.ones_like(out)
            op = torch.ops.aten._embedding_bag_backward
            return _time(lambda: op(grad, idx, off, o2b, bag_size, max_idx, rows, False, 0, False, None, -1))

        out["embedding_fwd"].append({"lookups": lk, "dim": dim, "rows": rows, "t_us": get(key + "|fwd", fwd)})
        out["embedding_bwd"].append({"lookups": lk, "dim": dim, "rows": rows, "t_us": get(key + "|bwd_op", bwd)})
    from engine.outdir import atomic_write

    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, json.dumps(cache, indent=1))
    return out


def calibrate(device: str = "cpu", threads: int = 1, progress=None) -> dict[str, Any]:
    data = measure(device, threads, progress)
    curves: dict[str, Any] = {}
    for fam in ("gemm", "memory"):
        rows = data[fam]
        w = np.array([r["work"] for r in rows])
        t = np.array([r["t_us"] for r in rows])
        held = np.arange(len(w)) % 3 == 2
        p = fit_curve(w[~held], t[~held])
        err = None
        if p is not None:
            err = float(np.mean(np.abs((p[0] + w[held] / p[1]) / t[held] - 1)) * 100)
        full = fit_curve(w, t)
        if full is not None:
            curves[fam] = {"a_us": full[0], "rate_per_us": full[1], "n": len(w), "heldout_err_pct": err}
    emb = {kind: fit_embedding(data[kind]) for kind in ("embedding_fwd", "embedding_bwd")}
    out = {"curves": curves, "embedding": emb, "device": device, "threads": threads}
    cpath = cache_dir() / f"curves_{device.replace(':', '_')}.json"
    from engine.outdir import atomic_write

    atomic_write(cpath, json.dumps(curves, indent=1))
    atomic_write(cache_dir() / f"embedding_{device.replace(':', '_')}.json", json.dumps(emb, indent=1))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="fit the simulator's cost model on microbenchmarks")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    print(json.dumps(calibrate(args.device, args.threads), indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
