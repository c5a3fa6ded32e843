"""Shared helpers of the simulator benchmark: paths, trace loading, captures. The noise
statistics are the engine's (engine.compare.fidelity), the paths and load the harness's."""

from __future__ import annotations

from pathlib import Path

from benchmarks.harness import ROOT, SAMPLES, load1
from engine.compare.fidelity import median_ci
from engine.compare.fidelity import paired_difference as paired

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


__all__ = ["ROOT", "SAMPLES", "capture_sample", "capture_step", "load", "load1", "median_ci", "pair", "paired"]
