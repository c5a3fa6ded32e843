"""`mystique replay TRACE`: replay an execution trace (or an exported benchmark) and time it.

TRACE is an ET file (with `--kineto K` to link its Kineto trace for streams/host gaps), a
capture folder / `<name>_et.json.gz` next to a `<name>_meta.json` (its thread count is reused),
or an exported benchmark folder (`DIR/spec.json` + `DIR/rank_<r>.et.json`): with `--rank R`
that rank is replayed. Writes `replay.json` (+ the replay's Kineto trace) into --out (default
./replay_out/<name>).

Distributed: several rank files, a folder holding several ranks (a multi-rank capture or an
exported benchmark) or `--world-size N` start one process per rank (torch.distributed, gloo on
CPU / NCCL on CUDA) and run the recorded collectives for real; `--mirror-rank R --world-size N`
replays one rank's trace on N symmetric ranks (SPMD assumption, labelled in the result).
`--sequential` replays the ranks one after another in this process instead (collectives skipped).

`--json` prints a summary (the full result is the replay.json it writes: engine/replay/result.py):

    name, rank            the trace's name; the rank replayed (null: the file's own)
    iteration_ms, median_ms   per timed iteration; their median
    coverage              selected, replayed, substituted, skipped, by_reason,
                          selected_compute, replayed_compute, compute_rate
    metrics               the sampled metrics' summary
    paths                 {trace, et, kineto, replay_json, ...}: the files involved
    device                "cpu" | "cuda:N"
    original_median_ms    the capture's unprofiled median step, when its meta is known
  several ranks with --sequential: {"ranks": {rank: summary}}
  distributed (one process per rank): name, world_size, replay_mode, spmd, iteration_ms (the
  slowest rank's per iteration), median_ms, coverage (summed over ranks, collectives
  included), collectives, breakdown, paths, device, original_median_ms, and ranks: one entry per
  rank {rank, recorded_rank, iteration_ms, median_ms, coverage, breakdown {step_ms, compute_ms,
  communication_ms, exposed_communication_ms, idle_ms}, collectives, kineto_path, replay_json}
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from engine.cli.common import print_json, progress_bar
from engine.errors import TraceError


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "replay", help="replay a trace as a benchmark (CPU or CUDA)", description=__doc__.splitlines()[0]
    )
    p.add_argument("trace", nargs="+", help="ET file(s), capture folder, or exported benchmark folder")
    p.add_argument("--kineto", default=None, help="Kineto trace to link (streams, host gaps)")
    p.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N (default cpu)")
    from engine.graph.replayset import SelectionMode
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
        choices=("full", "compute-only", "comm-only"),
        default="full",
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


_ET_NAME = re.compile(r"^(?P<name>.+?)(_et)?\.json(\.gz|\.tar\.gz)?$")


def _name_of(path: Path) -> str:
    m = _ET_NAME.match(path.name)
    return (m.group("name") if m else path.stem) if path.is_file() else path.name


def _meta_for(et: Path) -> dict:
    """The capture meta of an ET (engine.capture.meta rules), or {}."""
    from engine.capture.meta import meta_for

    return meta_for(et) or {}


def _spec_meta(spec: Path) -> dict:
    """Thread count of the capture a composed benchmark came from (its first source's meta)."""
    from engine import jsonio

    try:
        doc = jsonio.loads(spec.read_bytes())
    except (OSError, jsonio.JSONDecodeError):
        raise TraceError("benchmark spec is not valid JSON", spec) from None
    for src in (doc.get("sources") or [])[:1] if isinstance(doc, dict) else []:
        src_path = Path(str(src))
        if not src_path.is_absolute():
            src_path = spec.parent / src_path
        meta = _meta_for(src_path) if src_path.is_file() else {}
        if isinstance(meta.get("num_threads"), int):
            return {"num_threads": meta["num_threads"]}
    return {}


def resolve_inputs(trace: str, kineto: str | None, rank: int | None) -> list[tuple[int | None, list[Path], dict, str]]:
    """[(rank, paths to load, capture meta, name)] for one TRACE argument."""
    p = Path(trace)
    if not p.exists():
        raise TraceError("no such file or folder", p)
    if p.is_dir():
        rank_files = sorted(p.glob("rank_*.et.json*"))
        if (p / "spec.json").is_file() and rank_files:
            from engine.compose.marker import check_folder

            check_folder(p)  # an interrupted compose is not replayed as a complete benchmark
            meta = _spec_meta(p / "spec.json")
            out = []
            for f in rank_files:
                m = re.match(r"rank_(\d+)\.et\.json", f.name)
                r = int(m.group(1)) if m else None
                if rank is None or r == rank:
                    out.append((r, [f], meta, f"{p.name}_rank{r}"))
            if not out:
                raise TraceError(f"exported benchmark has no rank {rank}", p)
            return out
        ets = sorted(p.glob("*_et.json*"))
        if len(ets) != 1:
            raise TraceError(f"folder holds {len(ets)} '*_et.json*' files; give one ET file", p)
        p = ets[0]
    paths = [p]
    if kineto:
        k = Path(kineto)
        if not k.is_file():
            raise TraceError("no such Kineto file", k)
        paths.append(k)
    else:
        name = _name_of(p)
        k = p.parent / f"{name}_kineto.json.gz"
        if k.is_file():
            paths.append(k)
    return [(rank, paths, _meta_for(p), _name_of(p))]


def _rank_files(p: Path) -> list[Path] | None:
    """The per-rank ET files of a folder holding several ranks, or None."""
    if not p.is_dir():
        return None
    exported = sorted(p.glob("rank_*.et.json*"))
    if (p / "spec.json").is_file() and len(exported) > 1:
        return exported
    ets = sorted(p.glob("*_et.json*"))
    if len(ets) > 1 and all(re.search(r"rank[_\-]?\d+", f.name) for f in ets):
        return ets + sorted(p.glob("*_kineto.json*"))
    return None


def run(args: argparse.Namespace) -> int:
    traces = list(args.trace)
    p0 = Path(traces[0])
    if len(traces) == 1 and p0.is_dir() and (p0 / "spec.json").is_file() and any(p0.glob("rank_*.et.json*")):
        from engine.compose.marker import check_folder

        check_folder(p0)  # an interrupted compose is not replayed (distributed or rank by rank)
    multi = _rank_files(Path(traces[0])) if len(traces) == 1 else None
    distributed = (
        len(traces) > 1 or args.world_size is not None or args.mirror_rank is not None or (multi and args.rank is None)
    )
    if distributed and not args.sequential:
        return run_distributed(args, multi if multi else [Path(t) for t in traces])
    if multi and args.rank is not None and not (Path(traces[0]) / "spec.json").is_file():
        # one rank of a multi-rank capture folder, in this process
        pick = [f for f in multi if "_et.json" in f.name and re.search(rf"rank[_\-]?{args.rank}(?!\d)", f.name)]
        if len(pick) != 1:
            raise TraceError(f"no ET file of rank {args.rank} in the folder", traces[0])
        return run_single(args, str(pick[0]))
    if len(traces) > 1:
        raise TraceError("several trace files replay together (distributed); --sequential takes one folder")
    return run_single(args, traces[0])


def run_distributed(args: argparse.Namespace, files: list[Path]) -> int:
    from engine.distributed.launch import RankFailed
    from engine.replay import ReplayConfig
    from engine.replay.distributed import DistConfig, replay_distributed

    for f in files:
        if not f.exists():
            raise TraceError("no such file or folder", f)
    if len(files) == 1 and files[0].is_dir():
        ets = sorted(files[0].glob("*_et.json*")) or sorted(files[0].glob("rank_*.et.json*"))
        if len(ets) != 1:
            raise TraceError(f"folder holds {len(ets)} ET files", files[0])
        files = [ets[0], *sorted(files[0].glob("*_kineto.json*"))]
    name = _name_of(files[0]).split("_rank")[0] if files[0].is_file() else files[0].name
    if files[0].name.startswith("rank_"):
        name = files[0].parent.name
    out = Path(args.out) if args.out else Path("replay_out") / name
    metas = [_meta_for(f) for f in files if "_et.json" in f.name]
    if files[0].parent.joinpath("spec.json").is_file():
        metas.append(_spec_meta(files[0].parent / "spec.json"))
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
    print(f"{name}: {res.world_size} ranks, median {res.median_ms:.2f} ms (slowest rank){orig} on {res.device}")
    if res.spmd:
        print(f"  {res.spmd['assumption']}")
    print(
        f"  ops: {cov['selected']} selected, {cov['replayed']} replayed ({cov['rate']:.1%}), "
        f"collectives {cov['comm_replayed']}/{cov['comm_selected']}"
    )
    for reason, n in cov["by_reason"].items():
        print(f"    {n:>5} x {reason}")
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


def run_single(args: argparse.Namespace, trace_arg: str) -> int:
    import engine.trace as T
    from engine.outdir import OutputLock
    from engine.replay import ReplayConfig, replay

    jobs = resolve_inputs(trace_arg, args.kineto, args.rank)
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
        "coverage": {
            k: cov[k]
            for k in (
                "selected",
                "replayed",
                "substituted",
                "skipped",
                "by_reason",
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
    if not args.json:
        orig = f" (original {meta['median_ms']:.2f} ms)" if meta.get("median_ms") else ""
        print(f"{name}: median {res.median_ms:.2f} ms over {len(res.iteration_ms)} iterations on {res.device}{orig}")
        print(
            f"  ops: {cov['selected']} selected, {cov['replayed']} replayed "
            f"({cov['substituted']} substituted), {cov['skipped']} skipped; compute "
            f"{cov['replayed_compute']}/{cov['selected_compute']} ({cov['compute_rate']:.1%})"
        )
        for reason, n in cov["by_reason"].items():
            print(f"    {n:>5} x {reason}")
        print(f"  wrote {path}" + (f" and {res.kineto_path}" if res.kineto_path else ""))
    return summary
