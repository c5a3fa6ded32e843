"""Host memory of a distributed replay, checked against what the machine has before any rank starts.

Why: every rank is a process holding its own torch, its own copy of the trace and its own
tensors, and the ranks run at once (their collectives need every peer), so a world that does not
fit gets ranks OOM-killed part-way, or takes the whole machine down with it (issue 26: 64
mirrored ranks OOM-killed; 8 ranks from the Replay page killed a rank and the browser).

The estimate per rank is
  * a measured per-process baseline: the RSS of a fresh process that imports what a rank imports
    (torch, torch.distributed, the replay engine, fbgemm_gpu when the trace has FBGEMM ops) and
    loads the trace, as a rank does before it replays;
  * plus the replay's own bound above that baseline (engine.replay.memory.rss_bound) for the
    recorded rank it replays, from the same plan a rank builds (tensors, rebuilt TBE tables and
    optimizer state, collective buffers);
  * plus `COMM_BYTES` for the process group (gloo/NCCL buffers and threads).
Their sum over the concurrent ranks is compared with the memory this process may still use: the
host's available memory and the cgroup's room (memory.max - memory.current, v1 alike), the
smaller, times `memory.HEADROOM`. Ranks cannot run in waves (each waits for every peer in its
collectives), so a world that does not fit is refused in one line that says how many ranks fit.
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from engine.errors import TraceError

if TYPE_CHECKING:
    from engine.trace.model import Trace

COMM_BYTES = 96 << 20  # process group per rank: gloo pairs/buffers, threads (measured ~40 MiB on CPU)

_BASELINE = (
    "import sys, torch, torch.distributed\n"
    "import engine.replay.dist_worker, engine.replay.executor, engine.replay.comm_backend\n"
    "import engine.trace as T\n"
    "if sys.argv[1] == '1':\n"
    "    try:\n        import fbgemm_gpu\n    except ImportError:\n        pass\n"
    "T.load(*sys.argv[2:])\n"
    "from engine.sysinfo import rss_bytes\n"
    "print(rss_bytes())\n"
)


@dataclass(kw_only=True, frozen=True, slots=True)
class WorldBudget:
    world_size: int
    per_rank_bytes: dict[int, int]  # recorded rank -> estimated peak RSS of a rank replaying it
    baseline_bytes: int
    total_bytes: int
    available_bytes: int
    limited_by: str  # "cgroup" or "host"
    meta_bytes: dict[int, dict[int, int | None]] = field(default_factory=dict)
    """Recorded rank -> its plan's meta-device output sizes (engine.replay.metacheck.meta_sizes),
    handed to the ranks so that none imports what torch's Python meta kernels pull in."""

    def to_json(self) -> dict:
        d = {f: getattr(self, f) for f in self.__slots__ if f != "meta_bytes"}
        d["per_rank_bytes"] = {str(k): v for k, v in self.per_rank_bytes.items()}
        return d

    def fits(self) -> int:
        """How many ranks of the largest per-rank estimate fit."""
        worst = max(self.per_rank_bytes.values(), default=1)
        return int(self.available_bytes // max(worst, 1))


def baseline_bytes(paths: list[str], fbgemm: bool, key: str = "") -> int:
    """RSS of a fresh process that imports what a rank imports and loads the trace (measured;
    remembered in the parse cache under the trace's content key, the interpreter and torch)."""
    import hashlib

    import torch

    from engine import jsonio
    from engine.trace.cache import cache_root

    tag = hashlib.sha256(f"{sys.executable}|{torch.__version__}|{fbgemm}|{key or paths}".encode()).hexdigest()[:24]
    memo = cache_root() / f"rank-baseline-{tag}.json"
    try:
        return int(jsonio.loads(memo.read_bytes())["rss_bytes"])
    except (OSError, ValueError, KeyError, TypeError):
        pass
    value = _measure(paths, fbgemm)
    if value is not None:
        try:
            from engine.outdir import atomic_write

            memo.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(memo, jsonio.dumps({"rss_bytes": value}))
        except (OSError, TraceError):
            pass  # a read-only or full cache: measured again next time
        return value
    return 512 << 20  # could not measure: a torch process with a trace is about this much


def _measure(paths: list[str], fbgemm: bool) -> int | None:
    from engine.distributed.launch import rank_env

    env = rank_env(0, 1, 0)
    try:
        p = subprocess.run(
            [sys.executable, "-c", _BASELINE, "1" if fbgemm else "0", *paths],
            capture_output=True,
            text=True,
            timeout=600,
            env=env,
            stdin=subprocess.DEVNULL,
        )
        return int(p.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return None


def _rank_bound(trace: Trace, rank: int, config, baseline: int) -> tuple[int, dict[int, int | None]]:
    """Peak RSS bound of one rank replaying recorded `rank` (the plan a rank builds, with the ops
    the meta check skips released, as the rank does), and that plan's meta-device sizes."""
    from engine.graph import replay_ops
    from engine.replay.custom import CustomOps
    from engine.replay.memory import estimate, release_skipped, rss_bound
    from engine.replay.metacheck import meta_sizes, skip_over_meta
    from engine.replay.plan import build_plan
    from engine.replay.selection import by_replay_mode, with_comm_records
    from engine.trace.ranks import of_rank

    class _Sizing:  # collectives count as runnable, so the plan counts their buffers
        def prepare(self, call, index):
            return lambda: None

    ops = of_rank(trace.ops, rank)
    ids = by_replay_mode(ops, with_comm_records(ops, replay_ops(trace, config.mode, rank=rank)), config.replay_mode)
    plan = build_plan(
        ops, ids, device="cpu", allow_trace_code=config.allow_trace_code, collectives=_Sizing(), custom=CustomOps()
    )
    sizes = meta_sizes(plan)
    if skip_over_meta(plan, 0, sizes):
        release_skipped(plan)
    est = estimate(plan, 0)
    on_host = not str(config.device).startswith("cuda")  # CUDA tensors live on the device
    planned = (est.lazy_peak_bytes if config.lazy is True else est.eager_peak_bytes) if on_host else 0
    profile = bool(config.profile)
    bound = rss_bound(planned, len(plan.steps), profile=profile, metrics=False, rss_now=baseline) + COMM_BYTES
    return bound, sizes


def world_budget(trace: Trace, paths: list[str], rank_map: dict[int, int], config) -> WorldBudget:
    from engine.replay.memory import HEADROOM
    from engine.sysinfo import _host_available, cgroup_available_bytes

    fbgemm = bool(trace.ops["name"].astype(str).str.startswith("fbgemm::").any()) if len(trace.ops) else False
    base = baseline_bytes(paths, fbgemm, str(trace.meta.get("content_hash") or ""))
    bounds = {r: _rank_bound(trace, r, config, base) for r in sorted(set(rank_map.values()))}
    per = {r: b for r, (b, _) in bounds.items()}
    total = sum(per[r] for r in rank_map.values())
    host, cg = _host_available(), cgroup_available_bytes()
    limited = "cgroup" if cg is not None and (host is None or cg < host) else "host"
    room = min(v for v in (host, cg, 1 << 62) if v is not None)
    return WorldBudget(
        world_size=len(rank_map),
        per_rank_bytes=per,
        baseline_bytes=base,
        total_bytes=total,
        available_bytes=int(room * HEADROOM),
        limited_by=limited,
        meta_bytes={r: sizes for r, (_, sizes) in bounds.items()},
    )


def check_world_memory(trace: Trace, paths: list[str], rank_map: dict[int, int], config, source=None) -> WorldBudget:
    """Refuse (TraceError, one line) a world whose concurrent ranks do not fit in memory."""
    b = world_budget(trace, paths, rank_map, config)
    if b.total_bytes <= b.available_bytes:
        return b
    gib = lambda x: f"{x / 2**30:.1f} GiB"  # noqa: E731
    worst = max(b.per_rank_bytes.values())
    fit = b.fits()
    where = "the cgroup's memory limit leaves" if b.limited_by == "cgroup" else "the machine has"
    raise TraceError(
        f"refused: {b.world_size} ranks need about {gib(b.total_bytes)} of memory at once "
        f"(up to {gib(worst)} per rank, {gib(b.baseline_bytes)} of it the process itself) but {where} "
        f"{gib(b.available_bytes)} to use; ranks wait on each other's collectives, so they cannot run "
        f"in waves: use at most {fit} rank{'s' if fit != 1 else ''}"
        + (" or --sequential" if fit >= 1 else " (the trace alone does not fit; try --lazy)"),
        source,
    )
