"""`mystique simulate TRACE... [--what-if SPEC] --out DIR --json`: predict a step, optionally changed.

TRACE: Kineto trace file(s) (with their ET, a capture folder or `*_meta.json` also works). The
prediction is written to DIR as `predicted_kineto.json.gz` (opens in Perfetto and in `mystique
info/compare`) and `simulate.json` (the summary printed with --json). Spec errors name the
field and exit with code 2.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from engine.analysis.breakdown import PARTS
from engine.cli.common import print_json, progress_bar


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "simulate", help="predict a step from its trace; what-if edits", description=__doc__.splitlines()[0]
    )
    p.add_argument("paths", nargs="+", metavar="TRACE", help="Kineto trace file(s), capture folder or *_meta.json")
    p.add_argument("--what-if", dest="what_if", metavar="SPEC", help="what-if spec: a JSON file or inline JSON")
    p.add_argument("--out", metavar="DIR", help="write predicted_kineto.json.gz and simulate.json here")
    p.add_argument("--config", metavar="JSON", help="SimConfig overrides as inline JSON")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.set_defaults(func=run)


def _load(paths: list[str], progress):
    from engine.trace import load
    from engine.trace.layout import resolve

    # a capture folder or its meta: its Kineto trace(s) plus ET(s) (shapes for the batch/layers edits)
    return load(*resolve(*paths).files, progress=progress)


def run(args: argparse.Namespace) -> int:
    from engine.errors import TraceError
    from engine.simulate import SimConfig, export_kineto, simulate
    from engine.simulate.whatif import WhatIfSpec

    spec = WhatIfSpec.parse(args.what_if) if args.what_if else None
    try:
        cfg = SimConfig.parse(args.config) if args.config else SimConfig()
    except TraceError as exc:
        raise TraceError(f"--config {exc.problem}") from None
    with progress_bar("simulate", enabled=not args.json) as cb:
        trace = _load(args.paths, cb)
        result = simulate(trace, spec, config=cfg, progress=cb)
    data = result.to_json()
    data["sources"] = [s.get("path") for s in trace.meta.get("sources", [])]
    if args.out:
        out = Path(args.out)
        kpath = export_kineto(result.predicted.events, out / "predicted_kineto.json.gz", trace.meta)
        data["predicted_trace"] = str(kpath)
        from engine import jsonio

        (out / "simulate.json").write_bytes(
            jsonio.dumps(data, option=jsonio.OPT_INDENT_2 | jsonio.OPT_SERIALIZE_NUMPY, default=str)
        )
    if args.json:
        print_json(data)
        return 0
    m = data["measured_iteration_ms"]
    print(
        f"predicted iteration: {data['predicted_iteration_ms']:.3f} ms"
        + (f"  (measured {m:.3f} ms, error {data['error_pct']:+.2f} %)" if m else "")
    )
    print(
        f"tasks: {data['tasks']}  edges: {sum(data['edges'].values())}  "
        f"simulated at {data['tasks_per_s'] / 1e6:.2f} M tasks/s ({data['tasks_per_s_measures']}; "
        f"scheduler alone {data['tasks_per_s_schedule'] / 1e6:.2f} M tasks/s)"
    )
    bd = data["breakdown"]
    print(
        "breakdown (ms per step): "
        + ", ".join(f"{k[:-3]} {bd[k]:.3f}" for k in ("step_ms", *PARTS))
        + " (compute + exposed_communication + idle = step)"
    )
    cp = data.get("critical_path")
    if cp:
        kinds = ", ".join(f"{k} {v:.3f}" for k, v in cp["by_kind"].items() if v > 0)
        ranks = ", ".join(f"rank {r} {v:.3f}" for r, v in cp["ranks"].items())
        print(f"critical path: {cp['ms']:.3f} ms ({kinds}); on {ranks}")
        if cp["collectives"]:
            print("  collectives on it: " + ", ".join(list(cp["collectives"])[:5]))
    for key in ("sharding", "dp"):
        if key in data:
            print(f"{key}: {data[key]}")
    for w in data["warnings"]:
        print(f"warning: {w}")
    if args.out:
        print(f"wrote {data['predicted_trace']} and {Path(args.out) / 'simulate.json'}")
    return 0
