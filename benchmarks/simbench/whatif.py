"""What-if predictions vs fresh captures on this machine, and the cost model's held-out errors."""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

from benchmarks.simbench.common import SAMPLES, capture_sample, load1, pair
from engine import envvars

WHATIFS = {
    # name: (model, variant overrides, spec edits)
    "transformer_layers_x2": (
        "transformer",
        {"layers": 4},
        [{"kind": "layers", "module": r"blocks\.\d+", "copies": 1}],
    ),
    "mlp_batch_x2": ("mlp", {"batch": 512}, [{"kind": "batch", "scale": 2.0, "size": 256}]),
    "transformer_batch_x2": (
        "transformer",
        {"batch": 6},
        [{"kind": "batch", "scale": 2.0, "size": 3, "multiples": [128]}],
    ),
}


def quiet(max_load: float = 2.0, max_wait_s: float = 60.0) -> float:
    """Wait (up to `max_wait_s`) until the 1-minute load is at most `max_load`; the load seen."""
    t0 = time.monotonic()
    while load1() > max_load and time.monotonic() - t0 < max_wait_s:
        time.sleep(5)
    return load1()


def _step_stats(events) -> dict:
    from engine.simulate.result import step_spans

    d = step_spans(events)["dur_us"].to_numpy() / 1000.0
    return {"mean": float(d.mean()), "median": float(statistics.median(d)), "steps": [round(x, 3) for x in d]}


class _Timed:
    """A sample step that records its thread CPU time and its wall-clock time (the capture calls
    it like the step)."""

    def __init__(self, step):
        self.step, self.model, self.cpu_ms, self.wall_ms = step, step.model, [], []

    def __call__(self):
        t0, w0 = time.thread_time(), time.perf_counter()
        out = self.step()
        self.cpu_ms.append((time.thread_time() - t0) * 1000)
        self.wall_ms.append((time.perf_counter() - w0) * 1000)
        return out


def _measured_ratio(model: str, over: dict, rounds: int, steps: int = 5) -> dict:
    """Ground truth: the variant's and the base's *profiled* steps (captured exactly like the
    samples: ET + Kineto + module labels, 1 intra-op thread), base and variant alternating (ABBA),
    each round started when the machine is quiet (load <= 2, waited for up to 60 s).

    Two clocks: wall-clock (what a user sees; other processes on this shared 2-core machine can
    stretch it) and thread CPU time (only the cycles the step ran; robust to load). Profiled
    steps, because the trace the prediction starts from was profiled too."""
    from engine.capture.api import capture
    from engine.capture.models import build

    tmp = Path(tempfile.mkdtemp(prefix="simcpu_"))
    cpu: dict[str, list[float]] = {"base": [], "variant": []}
    wall: dict[str, list[float]] = {"base": [], "variant": []}
    loads = []
    for i in range(rounds):
        loads.append(quiet())
        for k in ["base", "variant"] if i % 2 == 0 else ["variant", "base"]:
            step, cfg = build(model, "cpu", **(over if k == "variant" else {}))
            timed = _Timed(step)
            capture(
                timed,
                out_dir=tmp / f"{k}{i}",
                name=model,
                steps=steps,
                warmup=2,
                timing_steps=1,
                device="cpu",
                model_name=model,
                model_config=cfg,
                threads=1,
            )
            cpu[k].extend(timed.cpu_ms[-steps:])
            wall[k].extend(timed.wall_ms[-steps:])
    med = {c: {k: statistics.median(v) for k, v in d.items()} for c, d in (("cpu", cpu), ("wall", wall))}
    return {
        "base_cpu_ms": med["cpu"]["base"],
        "variant_cpu_ms": med["cpu"]["variant"],
        "ratio_cpu": med["cpu"]["variant"] / med["cpu"]["base"],
        "base_wall_ms": med["wall"]["base"],
        "variant_wall_ms": med["wall"]["variant"],
        "ratio_wall": med["wall"]["variant"] / med["wall"]["base"],
        "steps_each": len(cpu["base"]),
        "loadavg_1m_at_rounds": loads,
    }


def whatif(rounds: int = 3, measure_rounds: int = 4, fresh: bool = True, names=None) -> dict:
    """Predicted/measured ratio of each what-if, on two clocks.

    prediction: the bundled sample trace (a quiet capture) simulated with the edit, over the same
    trace simulated unchanged; ground truth: `_measured_ratio` (wall-clock and thread CPU time).
    error = predicted_ratio / measured_ratio - 1 (= the error of "base measured x predicted
    ratio"). With `fresh`, also `rounds` fresh base + variant captures back to back: the
    variant's median ProfilerStep (wall-clock) predicted from the fresh base capture."""
    from engine.simulate import simulate

    out: dict = {}
    tmp = Path(envvars.get("MYSTIQUE_SIM_CAPTURES") or tempfile.mkdtemp(prefix="simwhatif_"))
    for name, (model, over, edits) in WHATIFS.items():
        if names and name not in names:
            continue
        sample = pair(SAMPLES / model, model)
        base = simulate(sample)
        pred = simulate(sample, {"version": 1, "edits": edits})
        p_ratio = pred.predicted_iteration_ms / base.predicted_iteration_ms
        gt = _measured_ratio(model, over, measure_rounds)
        entry = {
            "spec": {"version": 1, "edits": edits},
            "variant": over,
            "sample_step_ms": base.predicted_iteration_ms,
            "predicted_variant_ms": pred.predicted_iteration_ms,
            "predicted_ratio": p_ratio,
            "measured": gt,
            "error_pct_wall": 100 * (p_ratio / gt["ratio_wall"] - 1),
            "error_pct_cpu": 100 * (p_ratio / gt["ratio_cpu"] - 1),
            "report": {k: v for k, v in pred.extra.items() if k != "assumptions"},
            "loadavg_1m": load1(),
        }
        print(
            f"  {name}: predicted ratio {p_ratio:.3f}; measured wall-clock {gt['ratio_wall']:.3f} -> "
            f"{entry['error_pct_wall']:+.1f} %, thread CPU {gt['ratio_cpu']:.3f} -> {entry['error_pct_cpu']:+.1f} % "
            f"(load at rounds {', '.join(f'{x:.1f}' for x in gt['loadavg_1m_at_rounds'])})",
            flush=True,
        )
        if fresh:
            per = []
            for i in range(rounds):
                base_dir, var_dir = tmp / f"{name}_{i}_base", tmp / f"{name}_{i}_var"
                ld = quiet()
                if not (var_dir / f"{model}_kineto.json.gz").exists():
                    capture_sample(model, base_dir)
                    capture_sample(model, var_dir, **over)
                b_tr, v_tr = pair(base_dir, model), pair(var_dir, model)
                pr = simulate(b_tr, {"version": 1, "edits": edits})
                b, v, p = _step_stats(b_tr.events), _step_stats(v_tr.events), _step_stats(pr.predicted.events)
                per.append(
                    {
                        "base_ms": b["median"],
                        "predicted_ms": p["median"],
                        "measured_ms": v["median"],
                        "error_pct": 100 * (p["median"] / v["median"] - 1),
                        "steps": {"base": b["steps"], "variant": v["steps"], "predicted": p["steps"]},
                        "loadavg_1m": ld,
                    }
                )
                q = per[-1]
                print(
                    f"    fresh round {i}: base {q['base_ms']:.1f} predicted {q['predicted_ms']:.1f} measured "
                    f"{q['measured_ms']:.1f} ms ({q['error_pct']:+.1f} %, load {ld:.1f})",
                    flush=True,
                )
            entry["fresh_captures"] = {
                "rounds": per,
                "median_error_pct": statistics.median(x["error_pct"] for x in per),
                "base_ms_range": [min(x["base_ms"] for x in per), max(x["base_ms"] for x in per)],
            }
        out[name] = entry
    return out


def costmodel() -> dict:
    """Held-out error of each cost family: microbenchmarks on this machine (every third size held
    out; thread CPU time, 1 thread; measurements cached) and the in-trace fits of the samples."""
    from engine.simulate import simulate
    from engine.simulate.calibrate import calibrate

    micro = calibrate("cpu", 1)
    in_trace = {}
    for model, _, edits in WHATIFS.values():
        if edits[0]["kind"] != "batch":
            continue
        r = simulate(pair(SAMPLES / model, model), {"version": 1, "edits": edits})
        in_trace[model] = r.extra["cost_model"]
    return {"microbench": micro, "in_trace": in_trace}
