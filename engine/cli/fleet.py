"""`mystique fleet ingest|suite`: signatures of many jobs, and a weighted suite that stands for them.

mystique fleet ingest PATH... --out FLEET [--scheduler S] [--json]
    One signature per job (a trace file, or a folder's rank files; folders are walked) through
    the trace store, one Dask task per job: FLEET/signatures.parquet (one row per job, the
    columns of engine.fleet.signature) and FLEET/fleet.json (jobs, skipped files with reasons).
mystique fleet suite FLEET --budget N [--out SUITE] [--no-compose] [--max-ranks R] [--memory-gib G] [--json]
    N jobs with weights whose weighted signature matches the fleet's (engine.fleet.suite): the
    L1 distance, the error per class, and the baselines it must beat (random picks, the
    longest jobs). With --out, each pick is composed into a benchmark (engine.fleet.members):
    one step (the median ProfilerStep), its provenance, the ranks this machine can replay (at
    most --max-ranks, default the CPU count, and what the launcher's memory check admits), each
    trim with its reason; Kineto-only picks go through ET synthesis; a pick that cannot be
    composed is listed with its one-line reason. SUITE/manifest.json holds the weights, the
    fleet signature and each member's benchmark folder (SUITE/members/<k>_<job>), which
    `mystique replay SUITE` runs.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "fleet", help="signatures of many jobs and a representative suite", description=__doc__.splitlines()[0]
    )
    sub = p.add_subparsers(dest="fleet_command", required=True)
    a = sub.add_parser("ingest", help="one signature per job, through the trace store (Dask)")
    a.add_argument("paths", nargs="+", help="trace files and folders of jobs")
    a.add_argument("--out", required=True, help="fleet folder to write (signatures.parquet, fleet.json)")
    a.add_argument("--scheduler", default=None, help="serial, local (default) or tcp://HOST:PORT")
    a.add_argument("--json", action="store_true", help="print the signatures as JSON")
    a.set_defaults(func=run_ingest)
    s = sub.add_parser("suite", help="pick a weighted suite of N jobs that matches the fleet")
    s.add_argument("fleet", help="a folder written by `mystique fleet ingest`")
    s.add_argument("--budget", type=int, default=5, help="how many jobs the suite holds (default 5)")
    s.add_argument("--out", default=None, help="suite folder to write (manifest.json)")
    s.add_argument("--seed", type=int, default=0, help="seed of the k-means start and the random baseline")
    s.add_argument("--no-compose", action="store_true", help="write the manifest only (no member benchmarks)")
    s.add_argument("--max-ranks", type=int, default=None, help="ranks per member at most (default: the CPU count)")
    s.add_argument(
        "--memory-gib", type=float, default=None, help="memory the replay may use (default: what this machine has free)"
    )
    s.add_argument("--json", action="store_true", help="machine-readable output")
    s.set_defaults(func=run_suite)


def run_ingest(args: argparse.Namespace) -> int:
    import pandas as pd

    from engine.cli.common import print_json, progress_bar
    from engine.fleet.jobs import discover, signatures
    from engine.outdir import atomic_fill, atomic_write, prepare

    out = prepare(args.out)
    jobs = discover(list(args.paths))
    with progress_bar("signatures", enabled=not args.json) as cb:
        rows = signatures(jobs, scheduler=args.scheduler, progress=cb)
    good = [r for r in rows if "skipped" not in r]
    skipped = [r for r in rows if "skipped" in r]
    table = pd.DataFrame(good)
    atomic_fill(out / "signatures.parquet", lambda fh: table.to_parquet(fh, index=False))
    atomic_write(
        out / "fleet.json",
        json.dumps({"jobs": len(good), "skipped": skipped, "paths": [str(p) for p in args.paths]}, indent=2),
    )
    if args.json:
        print_json({"jobs": good, "skipped": skipped})
    else:
        print(f"{len(good)} job(s) signed, {len(skipped)} skipped -> {out / 'signatures.parquet'}")
        for r in skipped:
            print(f"  skipped {r['job']}: {r['skipped']}")
    return 0


def _load(fleet: str):
    import pandas as pd

    from engine.errors import TraceError

    p = Path(fleet) / "signatures.parquet"
    if not p.is_file():
        raise TraceError("not a fleet folder (no signatures.parquet; run `mystique fleet ingest` first)", fleet)
    return pd.read_parquet(p)


def run_suite(args: argparse.Namespace) -> int:
    from engine.cli.common import print_json, progress_bar
    from engine.errors import TraceError
    from engine.fleet.suite import baselines, manifest, pick
    from engine.outdir import atomic_write, prepare

    if args.max_ranks is not None and args.max_ranks < 1:
        raise TraceError(f"--max-ranks must be at least 1, got {args.max_ranks}")
    if args.memory_gib is not None and not args.memory_gib > 0:
        raise TraceError(f"--memory-gib must be a number > 0, got {args.memory_gib}")
    sigs = _load(args.fleet)
    suite = pick(sigs, args.budget, seed=args.seed)
    base = baselines(sigs, args.budget, seed=args.seed)
    composed = None
    if args.out:
        out = prepare(args.out)
        if not args.no_compose:
            from engine.fleet.members import compose_suite

            with progress_bar("compose the suite", enabled=not args.json) as cb:
                members = compose_suite(
                    sigs,
                    suite.picks,
                    suite.weights,
                    out,
                    max_ranks=args.max_ranks,
                    available_bytes=int(args.memory_gib * 2**30) if args.memory_gib else None,
                    progress=cb,
                )
            composed = [m.to_dict() for m in members]
    result = manifest(sigs, args.budget, suite, base, composed)
    if args.out:
        atomic_write(out / "manifest.json", json.dumps(result, indent=2))
    if args.json:
        print_json(result)
        return 0
    print(
        f"suite of {args.budget} from {len(sigs)} jobs: L1 distance {suite.l1:.3f} "
        f"(random picks median {base['random_median_l1']:.3f}, {args.budget} longest jobs {base['longest_l1']:.3f})"
    )
    for m in result["members"]:
        print(f"  {m['weight']:6.1%}  {m['job']}  ({m['step_ms']:.1f} ms/step)")
        if m.get("benchmark"):
            kept = m["ranks_kept"]
            print(f"          -> {m['benchmark']}: {m['step'] or 'whole trace'}, {len(kept)} rank(s) {kept}")
        elif m.get("refused"):
            print(f"          not composed: {m['refused']}")
        for t in m.get("trims") or []:
            print(f"          trimmed: {t}")
    worst = sorted(result["error"].items(), key=lambda kv: -abs(kv[1]))[:3]
    print("  largest class errors: " + ", ".join(f"{k} {v:+.3f}" for k, v in worst))
    if composed is not None:
        print(f"replay it: mystique replay {args.out}")
    return 0
