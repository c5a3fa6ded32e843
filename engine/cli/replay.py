"""`mystique replay TRACE`: replay an execution trace (or an exported benchmark) and time it.

TRACE is an ET file (with `--kineto K` to link its Kineto trace for streams/host gaps), a
capture folder / `<name>_et.json.gz` next to a `<name>_meta.json` (its thread count is reused),
an exported benchmark folder (`DIR/spec.json` + `DIR/rank_<r>.et.json`): with `--rank R`
that rank is replayed, or a suite folder (`mystique fleet suite --out SUITE`): every member
replays (--device, --warmup, --iters, --no-profile, --out apply) and the result is the weighted
fleet step time (sum of weight x member step ms) and each member's coverage (target >= 99 %),
written to OUT/suite_replay.json; `--json` prints it (engine.fleet.replay). Writes `replay.json` (+ the replay's Kineto trace) into --out (default
./replay_out/<name>).

Distributed: several rank files, a folder holding several ranks (a multi-rank capture or an
exported benchmark) or `--world-size N` start one process per rank (torch.distributed, gloo on
CPU / NCCL on CUDA) and run the recorded collectives for real; `--mirror-rank R --world-size N`
replays one rank's trace on N symmetric ranks (SPMD assumption, labelled in the result).
`--sequential` replays the ranks one after another in this process instead (collectives skipped).

`--json` prints a summary (the full result is the replay.json it writes: engine/replay/result.py):

    name, rank            the trace's name; the rank replayed (null: the file's own)
    iteration_ms, median_ms   per timed iteration; their median
    steps_per_iteration   recorded steps one iteration replays (the ET's ProfilerStep#N nodes
                          holding the replayed ops; 1 when it has none)
    median_step_ms        median_ms / steps_per_iteration: compares with original_median_ms
    coverage              selected, replayed, substituted, skipped, by_reason,
                          by_substitution, selected_compute, replayed_compute, compute_rate
    metrics               the sampled metrics' summary
    paths                 {trace, et, et_sha256, kineto, replay_json, ...}: the files involved
    device                "cpu" | "cuda:N"
    original_median_ms    the capture's unprofiled median step, when its meta is known
    hint                  one rank of a multi-rank job replayed alone: {world_size, rank, groups,
                          skipped, command} (the `--mirror-rank R --world-size N` run; also on stderr)
  several ranks with --sequential: {"ranks": {rank: summary}}
  distributed (one process per rank): name, world_size, replay_mode, spmd, iteration_ms (the
  slowest rank's per iteration), median_ms, steps_per_iteration, median_step_ms, coverage (summed over ranks, collectives
  included), collectives, breakdown, paths, device, original_median_ms, and ranks: one entry per
  rank {rank, recorded_rank, iteration_ms, median_ms, coverage, breakdown {step_ms, compute_ms,
  communication_ms, exposed_communication_ms, idle_ms}, collectives, kineto_path, replay_json}
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from engine.cli.common import print_json, progress_bar
from engine.errors import TraceError

if TYPE_CHECKING:
    from engine.trace.layout import Inputs


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "replay", help="replay a trace as a benchmark (CPU or CUDA)", description=__doc__.splitlines()[0]
    )
    p.add_argument("trace", nargs="+", help="ET file(s), capture folder, or exported benchmark folder")
    p.add_argument("--kineto", default=None, help="Kineto trace to link (streams, host gaps)")
    p.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N (default cpu)")
    from engine.graph.modes import SelectionMode
    from engine.replay.collectives import ReplayMode
    from engine.replay.config import ReplayConfig

    d = ReplayConfig()  # the one source of defaults (the UI reads it too)
    p.add_argument("--warmup", type=int, default=d.warmup, help=f"warm-up iterations (default {d.warmup})")
    p.add_argument("--iters", type=int, default=d.iters, help=f"measured iterations (default {d.iters})")
    p.add_argument(
        "--mode",
        choices=[m.value for m in SelectionMode],
        default=d.mode.value,
        help=f"operator selection (default {d.mode.value})",
    )
    p.add_argument("--host-gaps", action="store_true", help="reproduce the original CPU gaps between ops")
    p.add_argument(
        "--op-events",
        action="store_true",
        help="CUDA: time every op with events in each measured iteration (default: one extra iteration does; "
        "events cost host time per op)",
    )
    p.add_argument("--lazy", action="store_true", help="allocate trace inputs per op (low memory)")
    p.add_argument("--no-streams", action="store_true", help="CUDA: run everything on one stream")
    p.add_argument(
        "--allow-trace-code",
        action="store_true",
        help="also run what a trace could use to reach outside the replay: ops that may touch files, "
        "devices or the network (aten::from_file, save, ops with path arguments; docs/security.md) "
        "and code shipped inside the trace (PT2 Triton kernels); off by default",
    )
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: the capture's)")
    p.add_argument("--no-profile", action="store_true", help="do not write the replay's Kineto trace")
    p.add_argument("--out", default=None, help="output folder (default ./replay_out/<name>)")
    p.add_argument("--rank", type=int, default=None, help="rank to replay (exported benchmarks / multi-rank)")
    from engine.replay.distributed import DEFAULT_TIMEOUT_S

    p.add_argument("--world-size", type=int, default=None, help="distributed: ranks to start (one process each)")
    p.add_argument("--mirror-rank", type=int, default=None, help="distributed: every rank replays this recorded rank")
    p.add_argument(
        "--replay-mode",
        choices=[m.value for m in ReplayMode],
        default=d.replay_mode.value,
        help="full (compute + communication, default), compute-only, or comm-only",
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT_S,
        help=f"distributed: seconds any collective may take before the run is brought down (default {DEFAULT_TIMEOUT_S:.0f})",
    )
    p.add_argument("--sequential", action="store_true", help="replay the ranks one after another in one process")
    p.add_argument("--no-check", action="store_true", help="distributed: skip the pre-launch collective check")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from engine.fleet.replay import is_suite
    from engine.trace.layout import resolve

    traces = list(args.trace)
    if len(traces) == 1 and is_suite(traces[0]):
        return run_suite(args, traces[0])
    # what the path(s) are (engine.trace.layout); an interrupted compose is refused there
    inputs = resolve(*traces, kineto=args.kineto if len(traces) == 1 else None)
    outs = (
        [Path(args.out)]
        if args.out
        else [Path("replay_out") / n for n in {inputs.name.split("_rank")[0], *(r.name for r in inputs.ranks)}]
    )
    for out in outs:
        _check_out(out, [*traces, *inputs.files])
    distributed = (
        len(traces) > 1
        or args.world_size is not None
        or args.mirror_rank is not None
        or (inputs.multi_rank and args.rank is None)
    )
    if distributed and not args.sequential:
        return run_distributed(args, inputs)
    if len(traces) > 1:
        raise TraceError("several trace files replay together (distributed); --sequential takes one folder")
    return run_single(args, inputs)


def run_suite(args: argparse.Namespace, folder: str) -> int:
    """Every member of a suite folder (engine.fleet.replay): the weighted fleet time and each
    member's coverage; members that cannot run are listed with their one-line reason."""
    from engine.fleet.replay import replay_suite

    out = Path(args.out) if args.out else Path("replay_out") / Path(folder).resolve().name
    _check_out(out, [folder])
    with progress_bar(f"replay suite {Path(folder).name}", enabled=not args.json) as cb:
        res = replay_suite(
            folder,
            out=out,
            device=args.device,
            warmup=args.warmup,
            iters=args.iters,
            profile=not args.no_profile,
            progress=cb,
        )
    if args.json:
        print_json(res)
        return 0
    print(
        f"suite {folder}: weighted fleet step {res['weighted_step_ms']:.2f} ms over {res['replayed']} member(s) "
        f"({res['weight_replayed']:.1%} of the weight), {res['refused']} not replayed"
    )
    for m in res["members"]:
        if "median_ms" in m:
            c = m["coverage"]
            flag = "" if m["meets_target"] else f"  (under the {res['coverage_target']:.0%} target)"
            print(
                f"  {m['weight']:6.1%}  {m['job']}: {m['median_ms']:.2f} ms/step on {m['ranks']} rank(s), "
                f"coverage {c['replayed']}/{c['selected']} ({c['rate']:.1%}){flag}"
            )
        else:
            print(f"  {m['weight']:6.1%}  {m['job']}: {m['refused']}")
    print(f"  wrote {out / 'suite_replay.json'}")
    return 0


def _per_step(res) -> str:
    """', X ms per recorded step (N per iteration)' when the ET holds several profiler steps."""
    n = res.steps_per_iteration
    return f", {res.median_step_ms:.2f} ms per recorded step ({n} per iteration)" if n > 1 else ""


def _check_out(out: Path, inputs: list) -> None:
    """Refuse an output folder that holds an input, or lies inside an input folder: the replay's
    own Kineto trace and replay.json would join the capture (it then failed `info` and doubled
    in `sql`: issue 31)."""
    o = out.resolve()
    for p in inputs:
        q = Path(p).resolve()
        if q == o or o in q.parents:
            raise TraceError(
                f"--out {out} holds this input: the replay's files would join it; choose another folder", p
            )
        if Path(p).is_dir() and q in o.parents:
            raise TraceError(f"--out {out} is inside this input folder: the replay's files would join it", p)


def run_distributed(args: argparse.Namespace, inputs: Inputs) -> int:
    from engine.distributed.launch import RankFailed
    from engine.replay import ReplayConfig
    from engine.replay.distributed import DistConfig, replay_distributed

    files = inputs.files
    name = inputs.name.split("_rank")[0]
    out = Path(args.out) if args.out else Path("replay_out") / name
    metas = [r.meta for r in inputs.ranks]
    threads = args.threads or next((m["num_threads"] for m in metas if isinstance(m.get("num_threads"), int)), None)
    cfg = _config(args, ReplayConfig, out, threads, metrics=False)
    dcfg = DistConfig(
        world_size=args.world_size, mirror_rank=args.mirror_rank, timeout_s=args.timeout, check=not args.no_check
    )
    from engine.outdir import OutputLock

    try:
        with (
            OutputLock(out, f"mystique replay {' '.join(map(str, files))}"),
            progress_bar(f"replay {name} (distributed)", enabled=not args.json) as cb,
        ):
            res = replay_distributed(files, config=cfg, dist=dcfg, out_dir=out, progress=cb)
    except RankFailed as exc:
        print(f"mystique replay: error: {exc}", file=sys.stderr)
        return 1
    d = res.to_json()
    originals = [m["median_ms"] for m in metas if m.get("median_ms")]
    summary = {
        "name": name,
        "world_size": res.world_size,
        "replay_mode": str(cfg.replay_mode),
        "spmd": res.spmd,
        "iteration_ms": d["iteration_ms"],
        "median_ms": d["median_ms"],
        "steps_per_iteration": d["steps_per_iteration"],
        "median_step_ms": d["median_step_ms"],
        "coverage": d["coverage"],
        "collectives": d["collectives"],
        "breakdown": d["breakdown"],
        "ranks": [{k: v for k, v in r.items() if k != "skipped_ops"} for r in d["ranks"]],
        "paths": d["paths"],
        "device": d["device"],
    }
    if originals and args.mirror_rank is None:
        summary["original_median_ms"] = max(originals)  # the job steps at its slowest rank
    if args.json:
        print_json(summary)
        return 0
    cov = d["coverage"]
    orig = f" (original {summary['original_median_ms']:.2f} ms)" if "original_median_ms" in summary else ""
    print(
        f"{name}: {res.world_size} ranks, median {res.median_ms:.2f} ms (slowest rank){_per_step(res)}{orig} "
        f"on {res.device}"
    )
    if res.spmd:
        print(f"  {res.spmd['assumption']}")
    print(
        f"  ops: {cov['selected']} selected, {cov['replayed']} replayed ({cov['rate']:.1%}; "
        f"{cov.get('substituted', 0)} substituted), collectives {cov['comm_replayed']}/{cov['comm_selected']}"
    )
    for reason, n in cov["by_reason"].items():
        print(f"    {n:>5} x {reason}")
    for what, n in (cov.get("by_substitution") or {}).items():
        print(f"    {n:>5} x substituted: {what}")
    for r in d["ranks"]:
        b = r["breakdown"]
        print(
            f"  rank {r['rank']}: median {r['median_ms']:.2f} ms; compute {b.get('compute_ms', 0):.2f}, "
            f"comm {b.get('communication_ms', 0):.2f}, exposed comm {b.get('exposed_communication_ms', 0):.2f}, "
            f"idle {b.get('idle_ms', 0):.2f} ms"
        )
    for kind, v in d["collectives"].items():
        print(f"  {kind}: {v['count']} calls, {v['bytes'] / 2**20:.2f} MiB")
    print(f"  wrote {out / 'replay.json'}")
    return 0


def run_single(args: argparse.Namespace, inputs: Inputs) -> int:
    import engine.trace as T
    from engine.outdir import OutputLock
    from engine.replay import ReplayConfig, replay
    from engine.trace.layout import InputKind

    if inputs.kind in (InputKind.COMPOSED, InputKind.RANKS):  # the folder's ranks, or the one asked for
        picked = inputs.ranks if args.rank is None else (inputs.rank(args.rank),)
        jobs = [(r.rank if args.rank is None else args.rank, list(r.files), r.meta, r.name) for r in picked]
    else:  # one trace: --rank picks a rank inside it
        (r,) = inputs.ranks
        jobs = [(args.rank, list(r.files), r.meta, r.name)]
    trace_arg = " ".join(map(str, args.trace))
    results = {}
    for rank, paths, meta, name in jobs:
        out = Path(args.out) if args.out else Path("replay_out") / name
        if len(jobs) > 1:
            out = out / f"rank_{rank}"
        # checked (and locked against a second writer) before the run, not after it
        with OutputLock(out, f"mystique replay {trace_arg}"):
            results[rank if rank is not None else 0] = _run_one(
                args, T, ReplayConfig, replay, rank, paths, meta, name, out
            )
    if args.json:
        print_json(next(iter(results.values())) if len(results) == 1 else {"ranks": results})
    return 0


def _config(args, ReplayConfig, out: Path, threads: int | None, **extra):
    """The ReplayConfig the CLI flags describe (one place for both the distributed and per-rank paths)."""
    return ReplayConfig(
        device=args.device,
        warmup=args.warmup,
        iters=args.iters,
        mode=args.mode,
        streams=not args.no_streams,
        host_gaps=args.host_gaps,
        op_events=args.op_events,
        lazy=True if args.lazy else "auto",
        profile=not args.no_profile,
        out_dir=out,
        allow_trace_code=args.allow_trace_code,
        num_threads=threads,
        replay_mode=args.replay_mode,
        **extra,
    )


def _run_one(args, T, ReplayConfig, replay, rank, paths, meta, name, out) -> dict:
    """Replay one rank into `out` (locked by the caller); prints the text report; returns the summary."""
    threads = args.threads or (meta.get("num_threads") if isinstance(meta.get("num_threads"), int) else None)
    cfg = _config(args, ReplayConfig, out, threads)
    with progress_bar(f"replay {name}", enabled=not args.json) as cb:
        trace = T.load(*paths, progress=None)
        if not trace.has_et and trace.has_kineto and len(paths) == 1:  # Kineto-only: synthesize its ET
            from engine.compose.synth import SynthReport, load_synthesized

            trace = load_synthesized(paths[0])
            rep = trace.meta["synthesized"]
            print(f"{paths[0]}: {SynthReport.from_dict(rep).line()} -> {rep['et_path']}", file=sys.stderr)
        ranks_present = set(trace.ops["rank"].astype(int).tolist()) if trace.has_et else set()
        # an exported rank file may carry rank 0 inside: replay what the file holds
        try:
            res = replay(
                trace,
                config=cfg,
                progress=cb,
                rank=rank if rank in ranks_present or len(ranks_present) != 1 else None,
            )
        except TraceError as exc:
            if exc.path is None:  # name the file in the one-line message
                raise TraceError(exc.problem, paths[0]) from None
            raise
    res.paths["trace"] = str(paths[0])
    path = res.write(out)
    cov = res.coverage
    summary = {
        "name": name,
        "rank": rank,
        "iteration_ms": [round(x, 4) for x in res.iteration_ms],
        "median_ms": round(res.median_ms, 4),
        "steps_per_iteration": res.steps_per_iteration,
        "median_step_ms": round(res.median_step_ms, 4),
        "coverage": {
            k: cov.get(k, {} if k.startswith("by_") else 0)
            for k in (
                "selected",
                "replayed",
                "substituted",
                "skipped",
                "by_reason",
                "by_substitution",
                "selected_compute",
                "replayed_compute",
                "compute_rate",
            )
        },
        "metrics": res.metrics.get("summary", {}),
        "paths": {**res.paths, "replay_json": str(path)},
        "device": res.device,
    }
    if meta.get("median_ms"):
        summary["original_median_ms"] = meta["median_ms"]
    from engine.replay.worldhint import mirror_hint

    hint = mirror_hint(trace, rank, dict(cov), str(paths[0]))
    if hint:  # one rank of a multi-rank job: its collectives were skipped (issue 21 item 7)
        summary["hint"] = {k: hint[k] for k in ("world_size", "rank", "groups", "skipped", "command")}
        print(f"hint: {hint['text']}", file=sys.stderr)
    if not args.json:
        orig = f" (original {meta['median_ms']:.2f} ms)" if meta.get("median_ms") else ""
        print(
            f"{name}: median {res.median_ms:.2f} ms over {len(res.iteration_ms)} iterations on {res.device}"
            f"{_per_step(res)}{orig}"
        )
        print(
            f"  ops: {cov['selected']} selected, {cov['replayed']} replayed "
            f"({cov['substituted']} substituted), {cov['skipped']} skipped; compute "
            f"{cov['replayed_compute']}/{cov['selected_compute']} ({cov['compute_rate']:.1%})"
        )
        for reason, n in cov["by_reason"].items():
            print(f"    {n:>5} x {reason}")
        for what, n in (cov.get("by_substitution") or {}).items():
            print(f"    {n:>5} x substituted: {what}")
        print(f"  wrote {path}" + (f" and {res.kineto_path}" if res.kineto_path else ""))
    return summary
