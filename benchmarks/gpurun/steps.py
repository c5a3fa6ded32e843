"""The eight measurements of the GPU run (benchmarks/gpu_run.py has the plan and the order).

Each step is a function of the run's `Ctx` returning its JSON-ready result; a failure inside one
model or trace is recorded there and the step goes on. The captures, replays and statistics are
the engine's (engine.capture, engine.replay, engine.simulate, engine.compare) and the fidelity and
coverage benchmarks' own functions (benchmarks/fidelity.py, benchmarks/coverage.py).
"""

from __future__ import annotations

import gzip
import importlib.util
import json
import subprocess
import sys
import tarfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.gpurun.models import BOUND, SIZES, STREAMS, StreamsStep, repeat_gemms
from benchmarks.gpurun.output import trim_kineto
from benchmarks.harness import ROOT

CAPTURE_MODELS = ("mlp", "transformer", "resnet_tv")
NO_CUDA = "skipped: no CUDA"


@dataclass(kw_only=True)
class Ctx:
    device: str
    quick: bool
    out: Path  # what comes back (few files: benchmarks/gpurun/output.py)
    work: Path  # captures and replays (stays on the machine)
    traces: Path | None  # the shared traces (ETs for coverage, hta_simple_add for the gpu tests)
    deadline: float  # time.monotonic() by which the whole run must end
    log: Callable[[str], None] = print
    captures: dict[str, Path] = field(default_factory=dict)  # model -> capture folder (step 1)

    @property
    def cuda(self) -> bool:
        return self.device.startswith("cuda")

    @property
    def size(self) -> str:
        return "quick" if self.quick else "full"

    def over(self) -> str | None:
        """The reason to skip the rest of a step once the run's deadline has passed, else None."""
        return "skipped: the run's time budget ran out" if time.monotonic() >= self.deadline else None

    def session(self) -> dict[str, Any]:
        """Capture phases: quick = 1 warm-up, 3 timed, 2 recorded steps."""
        base = dict(steps=2, warmup=1, timing_steps=3) if self.quick else dict(steps=3, warmup=5, timing_steps=20)
        return {**base, "device": self.device, "threads": None if self.cuda else 1}


def _error(exc: BaseException) -> dict[str, str]:
    return {"error": f"{type(exc).__name__}: {exc}"[:500], "traceback": traceback.format_exc()[-2000:]}


def _bench(name: str):
    """A benchmark script as a module, loaded by path (benchmarks/coverage.py would shadow the
    `coverage` package, which a GPU image may have, if imported by name)."""
    spec = importlib.util.spec_from_file_location(f"_bench_{name}", ROOT / "benchmarks" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _load(folder: Path, model: str):
    import engine.trace as T

    return T.load(folder / f"{model}_et.json.gz", folder / f"{model}_kineto.json.gz", use_cache=False)


def _capture(ctx: Ctx, model: str, label: str, *, step=None, config=None, **overrides) -> dict[str, Any]:
    """Capture sample `model` (with `overrides`), or a prepared `step`, into work/<label>/."""
    from engine.capture.api import capture, capture_sample

    out = ctx.work / label
    t0 = time.perf_counter()
    if step is None:
        res = capture_sample(model, overrides=overrides, out_dir=out, name=model, **ctx.session())
    else:
        res = capture(step, out_dir=out, name=model, model_name=model, model_config=config or {}, **ctx.session())
    summary = (res.meta.get("metrics") or {}).get("summary") or {}
    return {
        "folder": str(out),
        "median_ms": res.median_ms,
        "step_ms": [round(x, 3) for x in res.step_ms],
        "config": res.meta.get("model_config"),
        "et_bytes": res.et_path.stat().st_size,
        "kineto_bytes": res.kineto_path.stat().st_size,
        "metrics": summary,
        "gpu_error": (res.meta.get("metrics") or {}).get("gpu_error"),
        "wall_s": round(time.perf_counter() - t0, 2),
    }


# -- 1 ----------------------------------------------------------------------------------------
def captures(ctx: Ctx) -> dict[str, Any]:
    """mlp, transformer, resnet_tv at the run's sizes; ddp on one rank (NCCL on CUDA, gloo on CPU)."""
    out: dict[str, Any] = {}
    for m in CAPTURE_MODELS:
        if reason := ctx.over():
            out[m] = {"skipped": reason}
            continue
        try:
            out[m] = _capture(ctx, m, m, **SIZES[ctx.size][m])
            ctx.captures[m] = Path(out[m]["folder"])
            ctx.log(f"captured {m}: median {out[m]['median_ms']:.2f} ms")
        except Exception as exc:  # noqa: BLE001 - recorded; the other models go on
            out[m] = _error(exc)
    try:
        from engine import jsonio
        from engine.capture.distributed import capture_distributed

        s = ctx.session()
        t0 = time.perf_counter()
        d = capture_distributed(
            "ddp",
            world_size=1,
            out_dir=ctx.work / "ddp",
            steps=s["steps"],
            warmup=s["warmup"],
            timing_steps=s["timing_steps"],
            device=ctx.device,
            threads=s["threads"],
            timeout_s=120.0,
        )
        meta = jsonio.loads(Path(d["ranks"][0]["meta"]).read_bytes())
        out["ddp"] = {
            "folder": str(ctx.work / "ddp"),
            "median_ms": d["job_median_ms"],
            "dist_backend": meta.get("dist_backend"),
            "world_size": d["world_size"],
            "wall_s": round(time.perf_counter() - t0, 2),
        }
    except Exception as exc:  # noqa: BLE001
        out["ddp"] = _error(exc)
    return out


# -- 2 ----------------------------------------------------------------------------------------
CURVE_COLUMNS = ("t_s", "gpu_sm_util_pct", "gpu_mem_mb", "gpu_power_w", "cpu_util_pct")


def fidelity(ctx: Ctx) -> dict[str, Any]:
    """Original step (no profiler) vs its replay, interleaved rounds (benchmarks/fidelity.py's
    run_model on the fresh captures), with the metrics curves of a block of each."""
    from engine.compare.fidelity import geomean_error

    fid = _bench("fidelity")
    rounds, per_round, metric_steps = (2, 2, 4) if ctx.quick else (8, 5, 100)
    records: list[dict[str, Any]] = []
    for m in CAPTURE_MODELS:
        if m not in ctx.captures or ctx.over():
            records.append({"model": m, "skipped": ctx.over() or "no capture (step captures)"})
            continue
        try:
            rec = fid.run_model(
                m,
                device=ctx.device,
                rounds=rounds,
                per_round=per_round,
                warmup=2,
                fresh=False,
                tmp=ctx.work,
                metrics=True,
                folder=ctx.captures[m],
                metric_steps=metric_steps,
                curves=True,
            )
            for side in ("original", "replay"):
                block = rec["metrics"][side]
                block["samples"] = {c: v for c, v in (block.get("samples") or {}).items() if c in CURVE_COLUMNS}
            records.append(rec)
            ctx.log(f"fidelity {m}: original {rec['original_ms']:.2f} ms, replay {rec['replay_ms']:.2f} ms")
        except Exception as exc:  # noqa: BLE001
            records.append({"model": m, **_error(exc)})
    errs = [r["error"] for r in records if isinstance(r.get("error"), float)]
    geo = geomean_error(errs) if errs else None
    return {
        "records": records,
        "geomean_error": geo,
        "targets": {"each": 0.10, "geomean": 0.05},
        "met": bool(errs) and len(errs) == len(CAPTURE_MODELS) and max(errs) <= 0.10 and (geo or 0) <= 0.05,
    }


# -- 3 ----------------------------------------------------------------------------------------
def coverage(ctx: Ctx) -> dict[str, Any]:
    """benchmarks/coverage.py on the device over every shared ET (quick: those under 16 KiB)."""
    if ctx.traces is None or not ctx.traces.is_dir():
        return {"skipped": f"no shared traces at {ctx.traces}"}
    cov = _bench("coverage")
    ets = cov.find_ets(ctx.traces)
    if ctx.quick:
        ets = [p for p in ets if p.stat().st_size < 16 * 1024]
    out_json = ctx.work / "coverage.json"
    cov.main(
        ["--device", ctx.device, "--traces", str(ctx.traces), "--out", str(out_json)]
        + ["--only", *sorted({p.parent.name for p in ets})]
    )
    data = json.loads(out_json.read_text())
    rows = [
        {
            "trace": r["trace"],
            "et": str(Path(r["path"]).relative_to(ctx.traces)),
            **{k: r["coverage"].get(k) for k in ("selected", "replayed", "substituted", "skipped", "compute_rate")},
            "by_reason": r["coverage"].get("by_reason"),
            "substituted_ops": r.get("substituted_ops"),
            "skipped_ops": r["skipped_ops"][:20],
            "median_ms": r["median_ms"],
            "wall_s": r["wall_s"],
        }
        for r in data["records"]
    ]
    return {
        "records": rows,
        "target_compute_rate": 0.99,
        "below_target": [r["trace"] for r in rows if r["compute_rate"] < 0.99],
    }


# -- 4 ----------------------------------------------------------------------------------------
def _stream_overlap(events, steps: int | None = None) -> dict[str, Any]:
    """Kernel time on the busiest stream that overlaps kernels on the others, per recorded step
    (`steps`: how many the events hold; default their ProfilerStep spans)."""
    from engine.analysis.steps import step_spans
    from engine.trace.intervals import overlap, union, union_length

    k = events[events["cat"].astype(str) == "kernel"]
    if k.empty:
        return {"streams": 0, "overlap_us": 0.0, "overlap_frac": 0.0}
    k = k.assign(end=k["ts_us"] + k["dur_us"])
    busy = k.groupby("stream")["dur_us"].sum().sort_values(ascending=False)
    main = busy.index[0]
    a, b = k[k["stream"] == main], k[k["stream"] != main]
    ov = overlap(union(a["ts_us"], a["end"]), union(b["ts_us"], b["end"]))
    iters = steps or max(len(step_spans(events)), 1)
    return {
        "streams": int(k["stream"].nunique()),
        "iterations": iters,
        "overlap_us": ov / iters,
        "kernel_busy_us": union_length(k["ts_us"], k["end"]) / iters,
        "overlap_frac": ov / union_length(k["ts_us"], k["end"]),
    }


def streams(ctx: Ctx) -> dict[str, Any]:
    """A step overlapping a side stream with compute: the replay's overlap against the original's."""
    if not ctx.cuda:
        return {"skipped": NO_CUDA}
    import engine.trace as T
    from engine.replay import ReplayConfig, replay

    sz = STREAMS[ctx.size]
    cap = _capture(ctx, "streams", "streams", step=StreamsStep(ctx.device, **sz), config=sz)
    orig = _load(Path(cap["folder"]), "streams")
    cfg = ReplayConfig(
        device=ctx.device, warmup=2, iters=5, profile=True, out_dir=ctx.work / "streams_replay", metrics=False
    )
    res = replay(orig, config=cfg)
    rep = T.load(res.kineto_path, use_cache=False)
    # the replay's profile holds one iteration: the ET's recorded steps, replayed once
    o, r = _stream_overlap(orig.events), _stream_overlap(rep.events, steps=res.steps_per_iteration)
    err = r["overlap_us"] / o["overlap_us"] - 1 if o["overlap_us"] else None
    return {
        "capture": cap,
        "original": o,
        "replay": r,
        "replay_streams": res.config.get("streams"),
        "replay_ms": res.median_step_ms,
        "steps_per_iteration": res.steps_per_iteration,
        "overlap_frac_error": r["overlap_frac"] - o["overlap_frac"],
        "overlap_error": err,
        "target": 0.10,
        "met": err is not None and abs(err) <= 0.10,
    }


# -- 5 ----------------------------------------------------------------------------------------
# name: (model, variant overrides from the base config | None for the GEMM-repeated model, edits)
WHATIFS: dict[str, tuple[str, Callable[[dict], dict] | None, Callable[[dict], list[dict]]]] = {
    "transformer_layers_x2": (
        "transformer",
        lambda c: {"layers": 2 * c["layers"]},
        lambda c: [{"kind": "layers", "module": r"blocks\.\d+", "copies": 1}],
    ),
    "mlp_batch_x2": (
        "mlp",
        lambda c: {"batch": 2 * c["batch"]},
        lambda c: [{"kind": "batch", "scale": 2.0, "size": c["batch"]}],
    ),
    "transformer_batch_x2": (
        "transformer",
        lambda c: {"batch": 2 * c["batch"]},
        lambda c: [{"kind": "batch", "scale": 2.0, "size": c["batch"], "multiples": [c["seq"]]}],
    ),
    "mlp_gemm_x2_slower": ("mlp", None, lambda c: [{"kind": "speedup", "category": "gemm", "factor": 0.5}]),
}


def _unprofiled(simulate, trace, step_ms: float, edits: list[dict]) -> tuple[float, dict[str, Any]]:
    """(predicted ms, the edit's report) of `edits` after the `unprofiled` edit: the profiler's
    host overhead taken out against the capture's unprofiled step (engine/simulate/whatif/unprofiled.py)."""
    r = simulate(trace, {"version": 1, "edits": [{"kind": "unprofiled", "step_ms": step_ms}, *edits]})
    return r.predicted_iteration_ms, r.extra.get("unprofiled") or {}


def lumos(ctx: Ctx) -> dict[str, Any]:
    """Simulate the fresh captures unchanged; predict each what-if from its base capture and
    capture the changed model as the ground truth."""
    from engine.analysis.steps import iteration_ms
    from engine.capture.models import build
    from engine.simulate import simulate

    unchanged: dict[str, Any] = {}
    traces: dict[str, Any] = {}
    for m in CAPTURE_MODELS:
        if m not in ctx.captures:
            unchanged[m] = {"skipped": "no capture (step captures)"}
            continue
        try:
            traces[m] = tr = _load(ctx.captures[m], m)
            r = simulate(tr)
            unchanged[m] = {
                "measured_ms": r.measured_iteration_ms,
                "predicted_ms": r.predicted_iteration_ms,
                "error": r.predicted_iteration_ms / r.measured_iteration_ms - 1 if r.measured_iteration_ms else None,
                "tasks": r.graph.n_tasks,
            }
        except Exception as exc:  # noqa: BLE001
            unchanged[m] = _error(exc)
    whatifs: dict[str, Any] = {}
    for name, (model, variant, edits) in WHATIFS.items():
        if model not in traces or ctx.over():
            whatifs[name] = {"skipped": ctx.over() or f"no {model} trace"}
            continue
        try:
            base = traces[model]
            cfg = json.loads((ctx.captures[model] / f"{model}_meta.json").read_text())["model_config"]
            spec = {"version": 1, "edits": edits(cfg)}
            base_pred = unchanged[model]["predicted_ms"]
            pred = simulate(base, spec).predicted_iteration_ms
            sizes = {k: v for k, v in cfg.items() if k != "model"}  # the base's sizes, then the change
            if variant is None:
                step, _ = build(model, ctx.device, **sizes)
                cap = _capture(ctx, model, name, step=repeat_gemms(step), config={**cfg, "gemms": "x2"})
            else:
                cap = _capture(ctx, model, name, **{**sizes, **variant(cfg)})
            base_ms, var_ms = iteration_ms(base.events), iteration_ms(_load(Path(cap["folder"]), model).events)
            assert base_ms and var_ms, "a capture without ProfilerStep spans"
            whatifs[name] = {
                "spec": spec,
                "base_measured_ms": base_ms,
                "base_predicted_ms": base_pred,
                "predicted_ms": pred,
                "measured_ms": var_ms,
                "error": pred / var_ms - 1,
                "predicted_ratio": pred / base_pred,
                "measured_ratio": var_ms / base_ms,
                "ratio_error": (pred / base_pred) / (var_ms / base_ms) - 1,
                # the same change measured without the profiler (the captures' timed steps)
                "unprofiled_ratio": cap["median_ms"]
                / json.loads((ctx.captures[model] / f"{model}_meta.json").read_text())["median_ms"],
                "variant_capture": cap,
            }
            # the same prediction with the profiler's host overhead taken out: the host factor
            # that brings the base's simulated step to its unprofiled one, kept for the change;
            # checked against the changed model's unprofiled step
            if not ctx.over():
                base_unprof = json.loads((ctx.captures[model] / f"{model}_meta.json").read_text())["median_ms"]
                pc, rep = _unprofiled(simulate, base, base_unprof, spec["edits"])
                whatifs[name]["host_calibrated"] = {
                    "host_factor": rep.get("host_factor"),
                    "base_unprofiled_ms": base_unprof,
                    "base_calibrated_ms": rep.get("calibrated_step_ms"),
                    "unreached": rep.get("calibrated_step_ms", 0) > base_unprof * 1.001,
                    "predicted_ms": pc,
                    "measured_unprofiled_ms": cap["median_ms"],
                    "error": pc / cap["median_ms"] - 1,
                }
            ctx.log(f"what-if {name}: predicted {pred:.2f} ms, measured {var_ms:.2f} ms")
        except Exception as exc:  # noqa: BLE001
            whatifs[name] = _error(exc)
    errs = [abs(w["error"]) for w in whatifs.values() if "error" in w and isinstance(w["error"], float)]
    cal_errs = [abs(w["host_calibrated"]["error"]) for w in whatifs.values() if "host_calibrated" in w]
    return {
        "unchanged": unchanged,
        "whatifs": whatifs,
        "target": 0.10,
        "met": bool(errs) and max(errs) <= 0.10,
        "host_calibrated_met": bool(cal_errs) and len(cal_errs) == len(errs) and max(cal_errs) <= 0.10,
    }


# -- 6 ----------------------------------------------------------------------------------------
def _gpu_busy(events) -> float | None:
    """Kernel time (union over streams) / ProfilerStep time: near 1 for a GPU-bound step."""
    from engine.analysis.steps import step_spans
    from engine.trace.intervals import union_length

    k = events[events["cat"].astype(str) == "kernel"]
    st = step_spans(events)
    if k.empty or st.empty:
        return None
    return union_length(k["ts_us"], k["ts_us"] + k["dur_us"]) / float(st["dur_us"].sum())


def bound(ctx: Ctx) -> dict[str, Any]:
    """One MLP at a small (host-bound) and a large (GPU-bound) batch: what "GPU 2x faster" predicts.
    On CPU there are no GPU tasks; "compute 2x faster" runs the same path."""
    from engine.simulate import simulate

    b = BOUND[ctx.size]
    category = "gpu" if ctx.cuda else "compute"
    spec = {"version": 1, "edits": [{"kind": "speedup", "category": category, "factor": 2.0}]}
    out: dict[str, Any] = {"category": category}
    for label in ("small", "large"):
        cap = _capture(ctx, "mlp", f"bound_{label}", batch=b[label], widths=b["widths"], classes=b["classes"])
        tr = _load(Path(cap["folder"]), "mlp")
        base, fast = simulate(tr).predicted_iteration_ms, simulate(tr, spec).predicted_iteration_ms
        out[label] = {
            "batch": b[label],
            "median_ms": cap["median_ms"],
            "gpu_busy": _gpu_busy(tr.events),
            "predicted_ms": base,
            "predicted_2x_ms": fast,
            "ratio": fast / base,
        }
        # the same with the profiler's host overhead taken out (the `unprofiled` edit): the
        # profiled host of a small step is several times its unprofiled one
        c0, rep = _unprofiled(simulate, tr, cap["median_ms"], [])
        c1, _ = _unprofiled(simulate, tr, cap["median_ms"], spec["edits"])
        out[label]["host_calibrated"] = {
            "host_factor": rep.get("host_factor"),
            "unreached": rep.get("calibrated_step_ms", 0) > cap["median_ms"] * 1.001,
            "predicted_ms": c0,
            "predicted_2x_ms": c1,
            "ratio": c1 / c0,
        }
    if ctx.cuda:
        out["met"] = out["large"]["ratio"] <= 0.75 and out["small"]["ratio"] >= 0.9
        out["rule"] = "GPU 2x faster: the large batch's step at most 0.75x, the small batch's at least 0.9x"
        hc = [out[x]["host_calibrated"]["ratio"] for x in ("large", "small")]
        out["host_calibrated_met"] = hc[0] <= 0.75 and hc[1] >= 0.9
    return out


# -- 7 ----------------------------------------------------------------------------------------
def gpu_tests(ctx: Ctx) -> dict[str, Any]:
    """`pytest -m gpu` over the test files that have gpu tests (the others import UI packages a
    GPU image may lack); the tail of its output is kept."""
    import os

    files = sorted(
        str(p.relative_to(ROOT)) for p in (ROOT / "tests").glob("test_*.py") if "pytest.mark.gpu" in p.read_text()
    )
    cmd = [sys.executable, "-m", "pytest", "-m", "gpu", "-q", "-p", "no:cacheprovider", "-rs", *files]
    env = dict(os.environ)
    if ctx.traces is not None:
        env["MYSTIQUE_SHARED_TRACES"] = str(ctx.traces)
    timeout = max(10.0, ctx.deadline - time.monotonic() - 5)
    t0 = time.perf_counter()
    try:
        p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout, check=False)
        text, rc = p.stdout + p.stderr, p.returncode
    except subprocess.TimeoutExpired as exc:
        text, rc = f"{exc.stdout or ''}{exc.stderr or ''}\n(timed out after {timeout:.0f} s)", None
    if isinstance(text, bytes):
        text = text.decode(errors="replace")
    lines = [x for x in text.strip().splitlines() if x.strip()]
    return {
        "command": " ".join(cmd[1:]),
        "returncode": rc,
        "summary": lines[-1] if lines else "",
        "tail": text[-4000:],
        "wall_s": round(time.perf_counter() - t0, 2),
    }


# -- 8 ----------------------------------------------------------------------------------------
def _gpu_side(events, steps: int) -> dict[str, Any]:
    """Per recorded step: kernel count, summed kernel time, kernel busy time (union over
    streams), the host span and the ten kernels (by name) that take the most time."""
    from engine.trace.intervals import union_length

    cat = events["cat"].astype(str)
    k = events[cat == "kernel"]
    host = events[cat == "cpu_op"]
    n = max(steps, 1)
    top = k.groupby(k["name"].astype(str).str.slice(0, 90))["dur_us"].agg(["count", "sum"])
    top = top.sort_values("sum", ascending=False).head(10)
    return {
        "steps": n,
        "kernels": len(k) / n,
        "kernel_sum_us": float(k["dur_us"].sum()) / n,
        "kernel_busy_us": union_length(k["ts_us"], k["ts_us"] + k["dur_us"]) / n if len(k) else 0.0,
        "host_span_us": float((host["ts_us"] + host["dur_us"]).max() - host["ts_us"].min()) / n if len(host) else 0.0,
        "host_ops": len(host) / n,
        "top": {str(name): [int(c) / n, float(t) / n] for name, (c, t) in zip(top.index, top.to_numpy(), strict=True)},
    }


def compare(ctx: Ctx, model: str = "mlp") -> dict[str, Any]:
    """The replay's Kineto trace and the original's, one step each, in one archive for Compare:
    original/ (ET, Kineto, meta: a capture folder) and replay/ (replay.json, replay_kineto.json.gz)."""
    from engine.compare import compare as compare_runs
    from engine.replay import ReplayConfig, replay

    if model not in ctx.captures:
        return {"skipped": f"no {model} capture (step captures)"}
    folder = ctx.captures[model]
    meta = json.loads((folder / f"{model}_meta.json").read_text())
    trace = _load(folder, model)
    rdir = ctx.work / "compare_replay"
    res = replay(
        trace, config=ReplayConfig(device=ctx.device, warmup=2, iters=3, profile=True, out_dir=rdir, metrics=False)
    )
    res.write(rdir)
    cmp = compare_runs(trace, res, original_meta=meta).to_json()
    trimmed = ctx.work / "compare_original_kineto.json.gz"
    trim = trim_kineto(folder / f"{model}_kineto.json.gz", trimmed, steps=1)
    tar_path = ctx.out / f"compare_{model}_{ctx.device.split(':')[0]}.tar.gz"
    with tarfile.open(tar_path, "w:gz") as tar:
        tar.add(folder / f"{model}_et.json.gz", f"original/{model}_et.json.gz")
        tar.add(trimmed, f"original/{model}_kineto.json.gz")
        tar.add(folder / f"{model}_meta.json", f"original/{model}_meta.json")
        tar.add(rdir / "replay.json", "replay/replay.json")
        tar.add(Path(res.kineto_path), "replay/replay_kineto.json.gz")
    replay_events = json.loads(gzip.decompress(Path(res.kineto_path).read_bytes()))
    evs = replay_events["traceEvents"] if isinstance(replay_events, dict) else replay_events
    return {
        "gpu_side": gpu_side(ctx),
        "archive": tar_path.name,
        "archive_bytes": tar_path.stat().st_size,
        "original_trim": trim,
        "replay_kineto_events": len(evs),
        "replayed_ops": sum(1 for r in res.per_op if str(r["status"]) != "skipped"),
        "e2e": cmp["e2e"],
        "time_basis": cmp["time_basis"],
        "match_rate": cmp["matching"].get("match_rate"),
        "open_with": "tar xzf ARCHIVE; mystique compare original replay (or the Compare page)",
    }


def gpu_side(ctx: Ctx) -> dict[str, Any]:
    """Each capture's kernels per step against its replay's (one profiled iteration = the ET's
    recorded steps): where a replay's extra time per step goes (kernels or host)."""
    import engine.trace as T
    from engine.analysis.steps import step_spans
    from engine.replay import ReplayConfig, replay

    out: dict[str, Any] = {}
    for m in CAPTURE_MODELS:
        if m not in ctx.captures or ctx.over():
            out[m] = {"skipped": ctx.over() or "no capture"}
            continue
        try:
            tr = _load(ctx.captures[m], m)
            rdir = ctx.work / f"gpu_side_{m}"
            cfg = ReplayConfig(device=ctx.device, warmup=2, iters=3, profile=True, out_dir=rdir, metrics=False)
            res = replay(tr, config=cfg)
            rep = T.load(res.kineto_path, use_cache=False)
            with_events = replay(tr, config=ReplayConfig(device=ctx.device, warmup=2, iters=5, op_events=True))
            one_stream = replay(tr, config=ReplayConfig(device=ctx.device, warmup=2, iters=5, streams=False))
            out[m] = {
                "replay_step_ms_op_events": with_events.median_step_ms,
                "replay_step_ms_one_stream": one_stream.median_step_ms,
                "original": _gpu_side(tr.events, len(step_spans(tr.events))),
                "replay": _gpu_side(rep.events, res.steps_per_iteration),
                "replay_step_ms": res.median_step_ms,
                "replay_gpu_step_ms": (
                    sorted(res.gpu_iteration_ms)[len(res.gpu_iteration_ms) // 2] / res.steps_per_iteration
                )
                if res.gpu_iteration_ms
                else None,
            }
        except Exception as exc:  # noqa: BLE001
            out[m] = _error(exc)
    return out
