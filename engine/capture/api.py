"""Capture a user's training step as the "original": step times, metrics, ET and Kineto.

Why three phases, in this order:
  1. warm-up (`warmup` steps): caches, allocator and oneDNN/cuBLAS heuristics settle;
  2. timing (`timing_steps` steps) WITHOUT any profiler, with the metrics sampler running: the
     step time the replay must reproduce is the unprofiled one (profiling adds per-op overhead);
  3. recording (`steps` steps, after one profiler warm-up step): the Execution Trace observer
     and Kineto run in the SAME profiler window (`profile(execution_trace_observer=et)`), so
     every ET node's `rf_id` has a matching Kineto cpu_op "Record function id", and both files
     cover exactly the same `ProfilerStep#N` iterations.

While recording, forward pre/post hooks on the model wrap every submodule in a
`record_function("nn.Module: <qualified.name>")` label so the ET call tree carries module
scopes (meta["modules"] maps each qualified name to its class). The hooks are installed only
for the recording phase so they never perturb the measured step times.

Files written to `out_dir`: `{name}_et.json.gz`, `{name}_kineto.json.gz`, `{name}_meta.json`.

Two forms:
    res = capture(step_fn, out_dir="out", name="mlp")          # runs the loop itself

    with CaptureSession(out_dir="out", name="mine") as cap:     # drives the user's loop
        while not cap.done:
            train_step()
            cap.step()
    res = cap.result
"""

from __future__ import annotations

import argparse
import datetime as _dt
import gzip
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Annotated, Any

from engine import jsonio
from engine.errors import TraceError
from engine.metrics.sampler import MetricsSampler
from engine.progress import Progress, report
from engine.rules import Between, Matches, Positive
from engine.settings import Settings

MODULE_LABEL_PREFIX = "nn.Module: "


NAME = Matches(r"[^./\\\0][^/\\\0]*", "a plain file-name stem")  # no folder, no leading dot


@dataclass(frozen=True, kw_only=True, slots=True)
class CaptureConfig(Settings):
    out_dir: Path
    name: Annotated[str, NAME]
    steps: Annotated[int, Between(1)] = 1
    warmup: Annotated[int, Between(0)] = 3
    timing_steps: Annotated[int, Between(1)] = 20
    device: Annotated[str, Matches(r"(cpu|cuda).*", "'cpu' or 'cuda[:N]'")] = "cpu"
    metrics_interval_s: Annotated[float, Positive()] = 0.02
    threads: Annotated[int | None, Between(1)] = None  # torch intra-op threads during the capture; None = leave as is

    WHAT = "capture"

    @property
    def total_steps(self) -> int:
        # +1: the profiler's own warm-up step (schedule warmup=1) before the recorded steps
        return self.warmup + self.timing_steps + 1 + self.steps


def add_session_arguments(p: argparse.ArgumentParser) -> None:
    """The capture phases' flags, shared by `mystique capture` and the per-rank entry point of a
    multi-rank capture, so both read their defaults from `CaptureConfig` (`session_arguments`
    turns the parsed flags back into `capture` keywords)."""
    d = {f.name: f.default for f in fields(CaptureConfig)}
    p.add_argument("--steps", type=int, default=d["steps"], help=f"recorded (profiled) steps (default {d['steps']})")
    p.add_argument(
        "--warmup", type=int, default=d["warmup"], help=f"warm-up steps before timing (default {d['warmup']})"
    )
    p.add_argument(
        "--timing-steps",
        type=int,
        default=d["timing_steps"],
        help=f"unprofiled timed steps (default {d['timing_steps']})",
    )
    p.add_argument("--device", default=d["device"], help=f"cpu or cuda[:N] (default {d['device']})")
    p.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch intra-op threads (default 1: stable step times on a shared machine; 0 = torch's default)",
    )


def session_arguments(a: argparse.Namespace) -> dict[str, Any]:
    """`capture` keywords from the flags of `add_session_arguments` (`--threads 0`: torch's default)."""
    return {
        "steps": a.steps,
        "warmup": a.warmup,
        "timing_steps": a.timing_steps,
        "device": a.device,
        "threads": a.threads or None,
    }


@dataclass(kw_only=True, slots=True)
class CaptureResult:
    et_path: Path
    kineto_path: Path
    meta_path: Path
    step_ms: list[float]
    median_ms: float
    meta: dict[str, Any] = field(default_factory=dict)

    def paths(self) -> dict[str, str]:
        return {"et": str(self.et_path), "kineto": str(self.kineto_path), "meta": str(self.meta_path)}


class _ModuleLabels:
    """Forward pre/post hooks wrapping each submodule call in a record_function label."""

    def __init__(self, model: Any):
        self.model = model
        self.handles: list[Any] = []
        self.stack: list[Any] = []
        self.classes: dict[str, str] = {}

    def install(self) -> None:
        import torch

        for qname, mod in self.model.named_modules():
            label = MODULE_LABEL_PREFIX + (qname or type(mod).__name__)
            self.classes[qname or type(mod).__name__] = type(mod).__name__

            def pre(_m, _args, _label=label):
                rf = torch.profiler.record_function(_label)
                rf.__enter__()
                self.stack.append(rf)

            def post(_m, _args, _out):
                if self.stack:
                    self.stack.pop().__exit__(None, None, None)

            self.handles.append(mod.register_forward_pre_hook(pre))
            self.handles.append(mod.register_forward_hook(post, always_call=True))

    def remove(self) -> None:
        for h in self.handles:
            h.remove()
        self.handles.clear()
        while self.stack:  # a forward that raised mid-way: close its labels innermost first
            self.stack.pop().__exit__(None, None, None)


class CaptureSession:
    """Drives warm-up, timing and recording from a loop that calls `step()` after each step."""

    def __init__(
        self,
        *,
        out_dir: str | os.PathLike,
        name: str,
        steps: int = 1,
        warmup: int = 3,
        timing_steps: int = 20,
        device: str = "cpu",
        module: Any = None,
        model_name: str | None = None,
        model_config: dict | None = None,
        command: str | None = None,
        progress: Progress | None = None,
        metrics_interval_s: float = 0.02,
        threads: int | None = None,
    ):
        self.config = CaptureConfig(
            out_dir=Path(out_dir),
            name=name,
            steps=steps,
            warmup=warmup,
            timing_steps=timing_steps,
            device=str(device),
            metrics_interval_s=metrics_interval_s,
            threads=threads,
        )
        self.module = module
        self.model_name = model_name
        self.model_config = model_config or {}
        self.command = command if command is not None else " ".join([Path(sys.argv[0]).name, *sys.argv[1:]])
        self.progress = progress
        self.result: CaptureResult | None = None
        self._n = 0
        self._t_last = 0.0
        self._step_ms: list[float] = []
        self._sampler: MetricsSampler | None = None
        self._metrics: dict[str, Any] = {}
        self._prof: Any = None
        self._et: Any = None
        self._labels: _ModuleLabels | None = None
        self._tmp = ""  # set by __enter__
        self._kineto_tmp: str | None = None
        self._t_timing0 = 0.0
        self._threads_before: int | None = None

    # -- public ------------------------------------------------------------------------------
    @property
    def done(self) -> bool:
        return self._n >= self.config.total_steps

    def __enter__(self) -> CaptureSession:
        self.config.out_dir.mkdir(parents=True, exist_ok=True)
        self._tmp = tempfile.mkdtemp(prefix="mystique_capture_")
        if self.config.threads is not None:
            import torch

            self._threads_before = torch.get_num_threads()
            torch.set_num_threads(self.config.threads)
        report(self.progress, 0.0, "warm-up")
        self._maybe_transition()
        return self

    def step(self) -> None:
        """Mark the end of one training step (call exactly once per step)."""
        if self.done:
            return
        c = self.config
        self._n += 1
        if c.warmup < self._n <= c.warmup + c.timing_steps:
            now = self._now()
            self._step_ms.append((now - self._t_last) * 1e3)
            self._t_last = now
        elif self._prof is not None:
            self._sync()
            self._prof.step()
        report(self.progress, 0.9 * self._n / c.total_steps, self._phase_message())
        self._maybe_transition()

    def __exit__(self, exc_type, exc, tb) -> None:
        try:
            if exc_type is None and not self.done:
                raise TraceError(
                    f"capture {self.config.name!r} ended after {self._n} of {self.config.total_steps} steps"
                )
            if exc_type is None:
                self.result = self._write()
        finally:
            self._cleanup()

    # -- phases ------------------------------------------------------------------------------
    def _phase_message(self) -> str:
        c = self.config
        if self._n < c.warmup:
            return f"warm-up {self._n}/{c.warmup}"
        if self._n < c.warmup + c.timing_steps:
            return f"timing {self._n - c.warmup}/{c.timing_steps}"
        return f"recording {self._n - c.warmup - c.timing_steps}/{c.steps + 1}"

    def _maybe_transition(self) -> None:
        c = self.config
        if self._n == c.warmup and self._sampler is None:  # timing starts
            self._sampler = MetricsSampler(interval_s=c.metrics_interval_s, device=c.device).start()
            self._t_last = self._now()
            self._t_timing0 = self._t_last
        if self._n == c.warmup + c.timing_steps and self._prof is None:  # recording starts
            sampler = self._sampler
            assert sampler is not None  # started at the warm-up -> timing transition
            sampler.stop()
            self._metrics = sampler.to_dict()
            # the timed steps' window on the metrics time axis (t_s), for aligning curves
            t0 = sampler.t0
            self._metrics["window_s"] = [round(self._t_timing0 - t0, 6), round(self._t_last - t0, 6)]
            self._start_profiler()
        if self.done and self._prof is not None:
            self._stop_profiler()

    def _start_profiler(self) -> None:
        import torch
        from torch.profiler import ExecutionTraceObserver, ProfilerActivity, profile, schedule

        activities = [ProfilerActivity.CPU]
        if self.config.device.startswith("cuda"):
            activities.append(ProfilerActivity.CUDA)
        if self.module is not None and isinstance(self.module, torch.nn.Module):
            self._labels = _ModuleLabels(self.module)
            self._labels.install()
        # Uncompressed temp file: register_callback("*.gz") prints to stdout while compressing.
        self._et = ExecutionTraceObserver().register_callback(os.path.join(self._tmp, "et.json"))
        self._prof = profile(
            activities=activities,
            record_shapes=True,
            with_stack=False,
            schedule=schedule(wait=0, warmup=1, active=self.config.steps, repeat=1),
            execution_trace_observer=self._et,
        )
        self._prof.__enter__()

    def _stop_profiler(self) -> None:
        prof, self._prof = self._prof, None
        prof.__exit__(None, None, None)  # also finalizes the ET observer (cleanup())
        self._kineto_tmp = os.path.join(self._tmp, "kineto.json")
        prof.export_chrome_trace(self._kineto_tmp)
        if self._labels is not None:
            self._labels.remove()

    def _cleanup(self) -> None:
        if self._threads_before is not None:
            import torch

            torch.set_num_threads(self._threads_before)
            self._threads_before = None
        if self._sampler is not None:
            self._sampler.stop()
        if self._prof is not None:
            try:
                self._prof.__exit__(None, None, None)
            finally:
                self._prof = None
        if self._labels is not None:
            self._labels.remove()
        if self._et is not None:
            self._et.unregister_callback()
        if self._tmp:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = ""

    # -- helpers -----------------------------------------------------------------------------
    def _sync(self) -> None:
        if self.config.device.startswith("cuda"):
            import torch

            torch.cuda.synchronize(self.config.device)

    def _now(self) -> float:
        self._sync()
        return time.perf_counter()

    def _write(self) -> CaptureResult:
        c = self.config
        report(self.progress, 0.92, "writing files")
        et_src = os.path.join(self._tmp, "et.json")
        if not os.path.exists(et_src) or not self._kineto_tmp or not os.path.exists(self._kineto_tmp):
            raise TraceError("the profiler produced no trace files", c.out_dir)
        et_path = c.out_dir / f"{c.name}_et.json.gz"
        kineto_path = c.out_dir / f"{c.name}_kineto.json.gz"
        meta_path = c.out_dir / f"{c.name}_meta.json"
        from engine.outdir import atomic_copy, atomic_write

        def _gzip(fin, raw):
            # mtime=0: identical content gives identical bytes (stable sha256 cache keys)
            with gzip.GzipFile(filename="", mode="wb", fileobj=raw, compresslevel=9, mtime=0) as fout:
                shutil.copyfileobj(fin, fout)

        for src, dst in ((et_src, et_path), (self._kineto_tmp, kineto_path)):
            atomic_copy(src, dst, _gzip)
        median = statistics.median(self._step_ms)
        meta = {
            "format": "mystique-capture/1",
            "name": c.name,
            "created_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "files": {"et": et_path.name, "kineto": kineto_path.name},
            "model": self.model_name,
            "model_config": self.model_config,
            "command": self.command,
            "steps": c.steps,
            "warmup": c.warmup,
            "timing_steps": c.timing_steps,
            "step_ms": [round(x, 4) for x in self._step_ms],
            "median_ms": round(median, 4),
            "metrics": self._metrics,
            "modules": self._labels.classes if self._labels is not None else {},
            **environment(c.device),
        }
        atomic_write(meta_path, jsonio.dumps(meta, option=jsonio.OPT_INDENT_2 | jsonio.OPT_SERIALIZE_NUMPY))
        report(self.progress, 1.0, "done")
        return CaptureResult(
            et_path=et_path,
            kineto_path=kineto_path,
            meta_path=meta_path,
            step_ms=list(self._step_ms),
            median_ms=median,
            meta=meta,
        )


def capture(step_fn: Callable[[], Any], *, module: Any = None, **session: Any) -> CaptureResult:
    """Run `step_fn` through warm-up, timing and recording; write ET, Kineto and meta files.

    `session`: the keyword arguments of `CaptureSession` (out_dir, name, steps, warmup,
    timing_steps, device, model_name, model_config, command, progress, threads, ...), whose
    defaults are the only ones. `module` (default: `step_fn.model` when present) gets module
    labels during recording. `threads` sets torch's intra-op thread count for the capture
    (recorded as meta num_threads; a replay should use the same count).
    """
    if module is None:
        module = getattr(step_fn, "model", None)
    runner = CaptureSession(module=module, **session)
    with runner as cap:
        while not cap.done:
            step_fn()
            cap.step()
    assert runner.result is not None  # set when the session finished all its steps
    return runner.result


def capture_sample(model: str, *, overrides: dict[str, Any] | None = None, **session: Any) -> CaptureResult:
    """Build sample `model` (ours, engine.capture.models, or a real-library one, lib_models) and
    capture it; its config goes into meta as `model_config`, so the meta says what was run.

    `overrides` replace config fields; `session` as for `capture` (`name` defaults to `model`).
    """
    from engine.capture import lib_models, models

    build = lib_models.build if model in lib_models.LIB_SAMPLES else models.build
    step_fn, config = build(model, session.get("device", "cpu"), **(overrides or {}))
    session.setdefault("name", model)
    return capture(step_fn, model_name=model, model_config=config, **session)


def environment(device: str) -> dict[str, Any]:
    """Where a capture ran: enough to judge whether a replay elsewhere is comparable."""
    import torch

    env = {
        "device": device,
        "device_name": cpu_model(),
        "torch_version": torch.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "num_threads": torch.get_num_threads(),
        "cuda_version": torch.version.cuda,
    }
    if device.startswith("cuda") and torch.cuda.is_available():
        env["device_name"] = torch.cuda.get_device_name(torch.device(device))
    return env


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()
