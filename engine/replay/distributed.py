"""Distributed replay: every rank at once, one process per rank, real collectives.

    res = replay_distributed(paths, config=ReplayConfig(...), dist=DistConfig(world_size=2), out_dir="out")

Inputs: the files of a multi-rank trace (one ET per rank, rank in the file name, optional
Kineto), an exported composed benchmark's `rank_<r>.et.json` files, or ONE rank's ET with
`mirror_rank=R` (every rank replays rank R: an SPMD assumption, labelled in the result).

Steps: load once here (the parse cache then serves every rank), check the ranks' collective
sequences against each other (a mismatch raises TraceError naming the rank and op: exit 2,
nothing started), write `run_spec.json`, start the ranks (engine.distributed.launch: env://,
gloo on CPU / NCCL on CUDA), each rank replays its trace with `TorchDistBackend` and writes
`rank<r>/replay.json` and `rank<r>/replay_rank<r>_kineto.json.gz`; rank 0 merges them into
`replay.json` (engine.replay.merge). A rank that dies or times out brings the run down
(`RankFailed` naming it); nothing is left running.

Before launch (issue 26): two files declaring the same rank are refused (they would run as one
rank with doubled ops); the world's memory is checked against what the machine (or its cgroup)
has (engine.replay.budget). A previous result in the folder stays until the new one is whole:
ranks write staged names (`replay.new.json`), promoted to `replay.json` only after every rank
succeeded; a failed run removes its staged files and leaves the old result as it was.

The same worker runs under torchrun:
    torchrun --nproc-per-node 2 -m engine.replay.dist_worker sample_traces/ddp --out out
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

from engine import jsonio
from engine.errors import TraceError
from engine.progress import Progress, report, scaled
from engine.replay.config import ReplayConfig
from engine.replay.result import ReplayResult
from engine.rules import Between, Positive
from engine.settings import Settings

if TYPE_CHECKING:
    from engine.trace.model import Trace

DEFAULT_TIMEOUT_S = 60.0

# Staged names: a rank writes its new result beside the previous one and the launcher swaps them
# in only when every rank finished (a failed rerun keeps the last good result).
STAGED_JSON = "replay.new.json"


def staged_kineto(rank: int) -> str:
    return f"replay_rank{rank}_kineto.new.json.gz"


def final_kineto(rank: int) -> str:
    return f"replay_rank{rank}_kineto.json.gz"


@dataclass(frozen=True, kw_only=True, slots=True)
class DistConfig(Settings):
    """world_size   ranks to start (None: the number of recorded ranks)
    mirror_rank    replay this recorded rank on every rank (SPMD assumption)
    timeout_s      bound on every collective (and the rendezvous)
    check          compare the ranks' collective sequences before launching"""

    world_size: Annotated[int | None, Between(1, 1024)] = None
    mirror_rank: Annotated[int | None, Between(0)] = None
    timeout_s: Annotated[float, Between(0, 86_400), Positive()] = DEFAULT_TIMEOUT_S
    check: bool = True

    WHAT = "distributed replay settings"


def plan_ranks(trace: Trace, dist: DistConfig) -> tuple[int, dict[int, int]]:
    """(world size, {process rank: recorded rank to replay})."""
    ranks = sorted(int(r) for r in trace.ops["rank"].unique()) if len(trace.ops) else []
    if not ranks:
        raise TraceError("trace has no execution-trace operators to replay (Kineto-only trace?)")
    if dist.mirror_rank is not None:
        if dist.mirror_rank not in ranks:
            raise TraceError(f"--mirror-rank {dist.mirror_rank}: the trace holds ranks {ranks}")
        world = dist.world_size or 2
        return world, dict.fromkeys(range(world), dist.mirror_rank)
    world = dist.world_size or len(ranks)
    if world != len(ranks):
        hint = " (one rank's trace: run it as N symmetric ranks with --mirror-rank R)" if len(ranks) == 1 else ""
        raise TraceError(f"world size {world} but the trace holds {len(ranks)} rank(s) {ranks}{hint}")
    return world, dict(enumerate(ranks))


def replay_distributed(
    paths: Sequence[str | os.PathLike],
    *,
    config: ReplayConfig,
    dist: DistConfig,
    out_dir: str | os.PathLike,
    progress: Progress | None = None,
) -> ReplayResult:
    import engine.trace as T
    from engine.distributed.launch import launch
    from engine.replay.executor import require_device
    from engine.replay.merge import merge
    from engine.replay.seqcheck import check_sequences, process_groups, sequences

    require_device(config)  # before any rank starts
    names = [str(p) for p in paths]
    report(progress, 0.0, "loading trace")
    trace = T.load(*names)
    _check_distinct_ranks(trace)
    world, rank_map = plan_ranks(trace, dist)
    if dist.check and dist.mirror_rank is None and world > 1:
        report(progress, 0.05, "checking collective sequences")
        check_sequences(
            sequences(trace, sorted(set(rank_map.values())), config.mode), names[0] if len(names) == 1 else None
        )
    from engine.replay.budget import check_world_memory

    report(progress, 0.07, f"checking memory for {world} ranks")
    budget = check_world_memory(trace, names, rank_map, config, names[0])  # names the (first) trace file
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    _drop_staged(out)
    spec = {
        "paths": [os.path.abspath(p) for p in names],
        "rank_map": {str(k): v for k, v in rank_map.items()},
        "world_size": world,
        "mirror_rank": dist.mirror_rank,
        "timeout_s": dist.timeout_s,
        "groups": process_groups(trace),
        "out_dir": str(out.resolve()),
        "config": config.to_dict(),
        "merge_in_rank0": False,  # this process merges (it holds the output folder's lock)
        "staged": True,  # ranks write staged names; promoted below once all succeeded
        # each recorded rank's meta-device output sizes, computed here once (engine.replay.budget)
        "meta_bytes": {str(r): {str(k): v for k, v in sizes.items()} for r, sizes in budget.meta_bytes.items()},
    }
    spec_path = out / "run_spec.json"
    from engine.outdir import atomic_write

    atomic_write(spec_path, jsonio.dumps(spec, option=jsonio.OPT_INDENT_2))
    try:
        launch(
            "engine.replay.dist_worker",
            ["--spec", str(spec_path)],
            world_size=world,
            run_dir=out / "logs",
            progress=scaled(progress, 0.1, 0.95),
        )
        docs = [_promote(out, r) for r in range(world)]
    finally:
        _drop_staged(out)
    res = merge(docs, world_size=world, mirror_rank=dist.mirror_rank, out_dir=out)
    res.memory = {"world_budget": budget.to_json()}
    res.write(out)
    report(progress, 1.0, "done")
    return res


def _check_distinct_ranks(trace: Trace) -> None:
    """Two execution traces declaring the same rank would replay as one rank with both files'
    ops: refuse, naming both files."""
    seen: dict[int, str] = {}
    for s in trace.meta.get("sources") or []:
        if s.get("kind") != "execution_trace":
            continue
        r, path = int(s["rank"]), str(s.get("path"))
        if r in seen:
            raise TraceError(f"declares rank {r}, as does {seen[r]}: each rank needs its own file", path)
        seen[r] = path


def _promote(out: Path, rank: int) -> dict:
    """A rank's staged result under its final names (kineto renamed, replay.json written
    atomically with the final paths); returns the document."""
    from engine.outdir import atomic_write

    rank_dir = out / f"rank{rank}"
    staged = rank_dir / STAGED_JSON
    try:
        doc = jsonio.loads(staged.read_bytes())
    except (OSError, ValueError) as exc:
        raise TraceError(f"rank {rank} left no readable result: {exc}".splitlines()[0], staged) from None
    paths = doc.setdefault("paths", {})
    k_new, k_final = rank_dir / staged_kineto(rank), rank_dir / final_kineto(rank)
    if doc.get("kineto_path"):
        os.replace(k_new, k_final)
        doc["kineto_path"] = paths["kineto"] = str(k_final)
    paths["replay_json"] = str(rank_dir / "replay.json")
    atomic_write(rank_dir / "replay.json", jsonio.dumps(doc, option=jsonio.OPT_INDENT_2, default=str))
    staged.unlink(missing_ok=True)
    return doc


def _drop_staged(out: Path) -> None:

    for f in [*out.glob(f"rank*/{STAGED_JSON}"), *out.glob("rank*/replay_rank*_kineto.new.json.gz")]:
        f.unlink(missing_ok=True)


def rank_inputs(paths: Sequence[str | os.PathLike], ranks: Sequence[int], bench_dir: str | None = None) -> dict:
    """What a distributed run of a loaded trace (or of a composed benchmark folder) takes:
    {"paths": files, "ranks": recorded ranks}. A composed folder gives its `rank_<r>.et.json`."""
    if bench_dir:
        from engine.trace.layout import resolve

        inputs = resolve(bench_dir)
        return {"paths": [str(f) for f in inputs.files], "ranks": inputs.rank_numbers}
    return {"paths": [str(p) for p in paths], "ranks": sorted(int(r) for r in ranks)}


def capture_rank_medians(paths: Sequence[str | os.PathLike]) -> dict[int, float]:
    """{rank: unprofiled median step ms} from the ranks' capture metas (`*_rank<r>_meta.json`
    beside their files, engine.trace.layout); {} when there are none or they are unreadable."""
    from engine.trace.layout import rank_medians, resolve

    try:
        return rank_medians(resolve(*paths))
    except TraceError:
        return {}
