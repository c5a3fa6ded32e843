"""Multi-process capture: every rank of a torch.distributed job captured at once.

    capture_distributed("ddp", world_size=2, out_dir="sample_traces/ddp")
    capture_distributed("mypkg.train:build_step", world_size=4, out_dir="out", name="mine")

One process per rank (engine.distributed.launch: env:// rendezvous, gloo on CPU / NCCL on CUDA;
`torchrun --nproc-per-node N -m engine.capture.distributed --model ddp --out DIR` works too).
Each rank runs the usual three phases of `engine.capture.api` (warm-up, unprofiled timing,
recording) and writes `{name}_rank{r}_et.json.gz`, `{name}_rank{r}_kineto.json.gz` and
`{name}_rank{r}_meta.json` (with `rank`, `world_size`, `dist_backend`). The loader reads the
rank from the file name, so loading the folder gives one multi-rank trace. The original step
time of the job is the slowest rank's median (`job_median_ms` in the result).

A builder other than a sample name is an import path "module:function" returning
(step_fn, config) for (rank, world_size): it is the user's own code, named explicitly.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from pathlib import Path
from typing import Any

from engine import jsonio
from engine.errors import TraceError
from engine.progress import Progress


def capture_distributed(
    builder: str,
    *,
    world_size: int,
    out_dir: str | os.PathLike,
    name: str | None = None,
    steps: int = 1,
    warmup: int = 3,
    timing_steps: int = 20,
    device: str = "cpu",
    threads: int | None = 1,
    timeout_s: float = 120.0,
    progress: Progress | None = None,
    command: str | None = None,
) -> dict[str, Any]:
    """Capture `builder` on `world_size` ranks; returns {ranks: [{rank, median_ms, paths}], job_median_ms}."""
    from engine.capture.dist_models import DIST_SAMPLES
    from engine.distributed.launch import launch

    if builder not in DIST_SAMPLES and ":" not in builder:  # fail before starting any process
        raise TraceError(
            f"unknown multi-rank builder {builder!r}: a sample ({', '.join(DIST_SAMPLES)}) or 'module:function'"
        )
    out = Path(out_dir)
    name = name or builder.replace(":", "_").replace(".", "_")
    args = [
        "--model",
        builder,
        "--out",
        str(out),
        "--name",
        name,
        "--steps",
        str(steps),
        "--warmup",
        str(warmup),
        "--timing-steps",
        str(timing_steps),
        "--device",
        device,
        "--threads",
        str(threads or 0),
        "--timeout",
        str(timeout_s),
        "--command",
        command or f"capture_distributed({builder!r}, world_size={world_size}, out_dir={str(out)!r})",
    ]
    out.mkdir(parents=True, exist_ok=True)
    import tempfile

    with tempfile.TemporaryDirectory(prefix="mystique_capture_dist_") as tmp:
        launch(
            "engine.capture.distributed",
            args,
            world_size=world_size,
            run_dir=tmp,
            timeout_s=timeout_s * 4,
            progress=progress,
        )
    ranks = []
    for r in range(world_size):
        meta = jsonio.loads((out / f"{name}_rank{r}_meta.json").read_bytes())
        ranks.append(
            {
                "rank": r,
                "median_ms": meta["median_ms"],
                "step_ms": meta["step_ms"],
                "et": str(out / meta["files"]["et"]),
                "kineto": str(out / meta["files"]["kineto"]),
                "meta": str(out / f"{name}_rank{r}_meta.json"),
            }
        )
    return {"name": name, "world_size": world_size, "ranks": ranks, "job_median_ms": max(x["median_ms"] for x in ranks)}


def _builder(spec: str, device: str = "cpu"):
    from engine.capture.dist_models import DIST_SAMPLES, build_dist

    if spec in DIST_SAMPLES:
        return lambda rank, world: build_dist(spec, rank, world, device)
    if ":" not in spec:
        raise TraceError(
            f"unknown multi-rank builder {spec!r}: a sample ({', '.join(DIST_SAMPLES)}) or 'module:function'"
        )
    mod, fn = spec.split(":", 1)
    return getattr(importlib.import_module(mod), fn)


def main(argv: list[str] | None = None) -> int:
    """One rank (run by the launcher or torchrun)."""
    from engine.capture.api import add_session_arguments

    p = argparse.ArgumentParser(prog="python -m engine.capture.distributed")
    p.add_argument("--model", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--name", default=None)
    add_session_arguments(p)
    p.add_argument("--timeout", type=float, default=120.0)
    p.add_argument("--command", default=None, help="the command recorded in the meta files")
    a = p.parse_args(argv)
    from engine.distributed.launch import init_from_env, rank_error

    try:
        import torch
        import torch.distributed as dist

        from engine.capture.api import capture, session_arguments

        rank, world = init_from_env(a.device, a.timeout)
        step_fn, config = _builder(a.model, a.device)(rank, world)
        name = f"{a.name or a.model}_rank{rank}"
        command = a.command or " ".join(sys.argv)
        res = capture(
            step_fn,
            out_dir=a.out,
            name=name,
            model_name=a.model,
            model_config=config,
            command=command,
            **session_arguments(a),
        )
        meta = dict(res.meta)
        meta.update(rank=rank, world_size=world, dist_backend=dist.get_backend())
        from engine.outdir import atomic_write

        atomic_write(res.meta_path, jsonio.dumps(meta, option=jsonio.OPT_INDENT_2 | jsonio.OPT_SERIALIZE_NUMPY))
        dist.barrier()
        dist.destroy_process_group()
        del torch
    except Exception as exc:  # noqa: BLE001 - reported to the launcher as one line
        rank_error(exc)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
