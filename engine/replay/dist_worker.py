"""One rank of a distributed replay (`python -m engine.replay.dist_worker`).

Started by `engine.replay.distributed.replay_distributed` (with `--spec run_spec.json`), or by
torchrun directly:

    torchrun --nproc-per-node 2 -m engine.replay.dist_worker TRACE_FILE_OR_FOLDER... --out DIR
             [--mirror-rank R] [--timeout 60] [--iters 5] [--warmup 2] [--replay-mode full]
             [--allow-trace-code]

Every rank: init the default group from env:// (gloo on CPU, NCCL on CUDA), build the recorded
sub-groups in the same order, replay its recorded rank with real collectives (a barrier before
each iteration so iterations line up), profile one labelled iteration, write its result; after
a final barrier rank 0 merges all ranks into DIR/replay.json.

Started by our launcher (`"staged": true` in the spec) a rank writes `rank<r>/replay.new.json`
and `rank<r>/replay_rank<r>_kineto.new.json.gz`: the launcher promotes them to their final names
once every rank succeeded, so a failed rerun never replaces a previous good result. A rank dies
with its launcher (engine.distributed.launch.die_with_launcher) and ticks the launcher's
progress board at every collective and barrier (a stalled rank is blamed, not its victims).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from engine import jsonio


def _spec_from_args(a: argparse.Namespace) -> dict:
    from engine.replay.config import ReplayConfig
    from engine.trace.layout import resolve

    paths = [str(f) for f in resolve(*a.paths).files]  # a folder: its ranks' files (engine.trace.layout)
    world = int(os.environ["WORLD_SIZE"])
    cfg = ReplayConfig(
        warmup=a.warmup,
        iters=a.iters,
        replay_mode=a.replay_mode,
        profile=True,
        out_dir=Path(a.out),
        allow_trace_code=a.allow_trace_code,
    )
    return {
        "paths": paths,
        "rank_map": {str(r): (a.mirror_rank if a.mirror_rank is not None else r) for r in range(world)},
        "world_size": world,
        "mirror_rank": a.mirror_rank,
        "timeout_s": a.timeout,
        "groups": None,
        "out_dir": os.path.abspath(a.out),
        "config": cfg.to_dict(),
    }


def build_groups(groups: list[dict], world: int) -> dict[str, object]:
    """`dist.new_group` for every recorded group, in the given order, on every rank."""
    import torch.distributed as dist

    out: dict[str, object] = {}
    for g in groups or []:
        ranks = [r for r in (g.get("ranks") or range(world)) if r < world]
        if not ranks:
            continue
        out[str(g["name"])] = dist.new_group(ranks=sorted(ranks))
    return out


def _ticking(backend, board, rank: int):
    """Wrap each prepared collective so it ticks this rank's progress counter first."""
    if board is None:
        return backend
    prepare = backend.prepare

    def ticking_prepare(call, index):
        fn = prepare(call, index)

        def run():
            board.tick(rank)
            return fn()

        return run

    backend.prepare = ticking_prepare
    return backend


def run_rank(spec: dict) -> int:
    import torch.distributed as dist

    import engine.trace as T
    from engine.distributed.launch import ProgressBoard, init_from_env
    from engine.replay.comm_backend import TorchDistBackend
    from engine.replay.config import ReplayConfig
    from engine.replay.distributed import STAGED_JSON, final_kineto, staged_kineto
    from engine.replay.executor import ReplaySession
    from engine.replay.merge import merge
    from engine.replay.seqcheck import process_groups

    device = spec["config"].get("device", "cpu")
    rank, world = init_from_env(device, float(spec["timeout_s"]) if spec.get("timeout_s") is not None else 60.0)
    if world != int(spec["world_size"]):
        raise RuntimeError(f"started with WORLD_SIZE={world} but the spec is for {spec['world_size']} ranks")
    out = Path(spec["out_dir"])
    rank_dir = out / f"rank{rank}"
    rank_dir.mkdir(parents=True, exist_ok=True)
    trace = T.load(*spec["paths"])
    groups = spec["groups"] if spec.get("groups") is not None else process_groups(trace)
    pgs = build_groups(groups, world)
    recorded = int(spec["rank_map"][str(rank)])
    mirror = spec.get("mirror_rank")
    board = ProgressBoard.from_env(rank, world)
    backend = _ticking(
        TorchDistBackend(rank=rank, world_size=world, groups=pgs, device=device, mirror_of=mirror), board, rank
    )

    def barrier() -> None:
        if board is not None:
            board.tick(rank)
        dist.barrier()

    cfg = ReplayConfig.from_dict({"metrics": False, **spec["config"], "out_dir": rank_dir})
    staged = bool(spec.get("staged"))
    sizes = (spec.get("meta_bytes") or {}).get(str(recorded))  # the launcher's meta check of this plan
    meta = {int(k): v for k, v in sizes.items()} if sizes is not None else None
    with ReplaySession(trace, config=cfg, rank=recorded, collectives=backend, meta_bytes=meta) as session:
        for _ in range(cfg.warmup):
            barrier()
            session.run_iteration(measured=False)
        for _ in range(cfg.iters):
            barrier()
            session.run_iteration(measured=True)
        barrier()
        res = session.finish()
    if res.kineto_path:
        dst = rank_dir / (staged_kineto(rank) if staged else final_kineto(rank))
        os.replace(res.kineto_path, dst)
        res.kineto_path = str(dst)
        res.paths["kineto"] = str(dst)
    res.world_size = world
    import resource

    # this rank's measured peak, beside the launcher's pre-launch estimate (engine.replay.budget)
    res.memory["peak_rss_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    res.write(rank_dir, STAGED_JSON if staged else "replay.json")
    barrier()
    if rank == 0 and spec.get("merge_in_rank0", True):  # under torchrun; our launcher's parent merges
        docs = [jsonio.loads((out / f"rank{r}" / "replay.json").read_bytes()) for r in range(world)]
        merged = merge(docs, world_size=world, mirror_rank=mirror, out_dir=out)
        merged.write(out)
    dist.barrier()
    dist.destroy_process_group()
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m engine.replay.dist_worker")
    p.add_argument("paths", nargs="*", help="trace files or folders (torchrun use)")
    p.add_argument("--spec", default=None, help="run_spec.json written by replay_distributed")
    p.add_argument("--out", default="replay_out/distributed")
    p.add_argument("--mirror-rank", type=int, default=None)
    p.add_argument("--timeout", type=float, default=60.0)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--iters", type=int, default=5)
    from engine.replay.collectives import ReplayMode

    p.add_argument("--replay-mode", choices=[m.value for m in ReplayMode], default=ReplayMode.FULL.value)
    p.add_argument(
        "--allow-trace-code",
        action="store_true",
        help="also run ops that may touch files, devices or the network (off by default)",
    )
    a = p.parse_args(argv)
    from engine.distributed.launch import die_with_launcher, rank_error

    die_with_launcher()
    if not a.spec and not 0 < a.timeout <= 86_400:  # torchrun use: 0 is not "the default", -5 not "-5000ms"
        print(f"{p.prog}: error: --timeout must be between 0 and 86400 s, not {a.timeout:g}", file=sys.stderr)
        return 2
    try:
        spec = jsonio.loads(Path(a.spec).read_bytes()) if a.spec else _spec_from_args(a)
        return run_rank(spec)
    except Exception as exc:  # noqa: BLE001 - one line for the launcher, then a non-zero exit
        rank_error(exc)
        return 1


if __name__ == "__main__":
    sys.exit(main())
