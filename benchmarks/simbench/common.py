"""Shared helpers of the simulator benchmark: paths, trace loading, captures, noise statistics."""

from __future__ import annotations

import math
import os
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
SAMPLES = ROOT / "sample_traces"
SHARED = ROOT.parent / "shared" / "traces"
RESULTS = ROOT / "benchmarks" / "results" / "simulate.json"
STEPS = 5  # profiled steps per capture


def load(*paths):
    import engine.trace as et

    return et.load(*[str(p) for p in paths], use_cache=False)


def pair(out: Path, model: str):
    """A capture folder's Kineto trace and ET, loaded together."""
    return load(out / f"{model}_kineto.json.gz", out / f"{model}_et.json.gz")


def capture_step(step, cfg: dict, model: str, out: Path, steps: int = STEPS, warmup: int = 3) -> Path:
    """Capture a built sample step like the bundled samples (1 intra-op thread, CPU)."""
    from engine.capture.api import capture

    capture(
        step,
        out_dir=out,
        name=model,
        steps=steps,
        warmup=warmup,
        timing_steps=3,
        device="cpu",
        model_name=model,
        model_config=cfg,
        threads=1,
    )
    return out


def capture_sample(model: str, out: Path, **overrides) -> Path:
    from engine.capture.models import build

    step, cfg = build(model, "cpu", **overrides)
    return capture_step(step, cfg, model, out)


def load1() -> float:
    return os.getloadavg()[0]


def median_ci(d: list[float], conf: float = 0.95) -> tuple[float, float]:
    """Distribution-free CI of the median (sign-test order statistics): no normality assumed,
    robust to the load spikes of a shared machine."""
    s, n = sorted(d), len(d)
    k = 0  # largest k with P(Binom(n, 1/2) <= k - 1) <= (1 - conf) / 2
    while k + 1 <= n // 2 and sum(math.comb(n, i) for i in range(k + 1)) / 2**n <= (1 - conf) / 2:
        k += 1
    return (s[k - 1], s[n - k]) if k else (s[0], s[-1])


def paired(a: list[float], b: list[float]) -> dict:
    """Median per-round difference a - b and its 95 % CI; within noise when the CI contains 0."""
    d = [x - y for x, y in zip(a, b)]
    lo, hi = median_ci(d)
    return {"median_ms": statistics.median(d), "ci95_ms": [lo, hi], "within_noise": lo <= 0 <= hi}
