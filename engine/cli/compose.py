"""`mystique compose SPEC.json --out DIR [--json] [--script]`: compose a benchmark and export it.

Prints per-rank op counts, external inputs, estimated memory and the written paths; `--json`
prints the same as JSON. Bad specs exit with code 2 and a one-line message (engine.cli.main).

`--json` keys:

    out          str             the folder written
    spec         str             its spec.json
    ranks        {rank: str}     rank_<r>.et.json per rank
    summary      {ranks: {rank: {nodes, replay_ops, communication_ops, communication_bytes,
                  external_inputs, external_input_bytes, estimated_memory_bytes, ...}},
                  meta: {warnings, sharding, ...}}   (engine.compose.export)
    validation   {rank: {ok, meta}}   structural / meta-tensor check per rank (not with
                                      --no-validate)
    command      str             the `mystique replay` line that runs it
    script       str             with --script: the standalone Python script
"""

from __future__ import annotations

import argparse
from pathlib import Path

from engine.cli.common import print_json, progress_bar
from engine.errors import TraceError


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "compose", help="compose a benchmark from a spec and export it", description=__doc__.splitlines()[0]
    )
    p.add_argument("spec", help="benchmark spec JSON (see examples/*.json)")
    p.add_argument("--out", required=True, help="folder to write (spec.json, rank_<r>.et.json, README.md)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.add_argument(
        "--script", action="store_true", help="also write run_benchmark.py: a standalone replay needing only torch"
    )
    p.add_argument("--no-validate", action="store_true", help="skip the structural/meta validation of the ETs")
    p.add_argument(
        "--limits",
        default=None,
        help="JSON file of compose size limits overriding the defaults "
        "(max_nodes, max_tensors, max_bytes, max_ranks, max_sources, max_segments, max_rank_bytes)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from engine.compose import compose, export, load_spec, validate_et
    from engine.compose.limits import ComposeLimits
    from engine.outdir import OutputLock

    spec = load_spec(args.spec)
    limits = ComposeLimits()
    if args.limits:
        from engine.compose.spec import read_json_file

        try:
            limits = ComposeLimits.from_dict(read_json_file(args.limits, "compose limits"))
        except TraceError as exc:
            raise TraceError(exc.problem, exc.path or args.limits) from None
    # the output folder is checked and locked before the composition, not after it
    with OutputLock(args.out, f"mystique compose {args.spec}"), progress_bar("compose", enabled=not args.json) as cb:
        try:
            bench = compose(spec, progress=cb, limits=limits)
        except TraceError as exc:
            raise TraceError(exc.problem, exc.path or args.spec) from None
        res = export(bench, args.out)
        world_size = bench.world_size
        script = None
        if args.script:
            from engine.compose.script import write_script

            script = str(write_script(bench, res["dir"]))
    del bench  # validation parses each written rank back: the composition is not held meanwhile (limits.py)
    checks = {}
    if not args.no_validate:
        for r, p in res["ranks"].items():
            rep = validate_et(p)
            checks[str(r)] = {"ok": not rep["problems"], "meta": rep.get("meta", {})}
    summary = res["summary"]
    out = {
        "out": res["dir"],
        "spec": res["spec"],
        "ranks": {str(r): p for r, p in res["ranks"].items()},
        "summary": summary,
        "validation": checks,
        "command": f"mystique replay {res['dir']}" + (" --rank R" if world_size > 1 else ""),
    }
    if script is not None:
        out["script"] = script
    if args.json:
        print_json(out)
        return 0
    print(f"composed {spec.name!r}: {world_size} rank(s) -> {res['dir']}")
    for r, s in summary["ranks"].items():
        print(
            f"  rank {r}: {s['replay_ops']} replayed ops ({s['nodes']} nodes), {s['communication_ops']} collective(s) "
            f"{s['communication_bytes'] / 2**20:.1f} MiB, {s['external_inputs']} external inputs "
            f"{s['external_input_bytes'] / 2**20:.1f} MiB, est. memory {s['estimated_memory_bytes'] / 2**20:.1f} MiB"
        )
    for w in summary["meta"].get("warnings", []):
        print(f"  warning: {w}")
    if "sharding" in summary["meta"]:
        sh = summary["meta"]["sharding"]
        print(f"  sharding: {sh['kind']}" + (f" plan {sh['plan']}" if "plan" in sh else ""))
    for p in res["ranks"].values():
        print(f"  wrote {Path(p)}")
    print(f"run it: {out['command']}")
    if args.script:
        print(f"  wrote {out['script']} (standalone: python {out['script']} [--rank R])")
    return 0
