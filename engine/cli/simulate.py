"""`mystique simulate TRACE... [--what-if SPEC] --out DIR --json`: predict a step, optionally changed.

TRACE: Kineto trace file(s) (with their ET, a capture folder or `*_meta.json` also works). The
prediction is written to DIR as `predicted_kineto.json.gz` (opens in Perfetto and in `mystique
info/compare`) and `simulate.json` (the summary printed with --json). Spec errors name the
field and exit with code 2.

Shorthand what-ifs, appended to the spec's edits: `--device MI300X` (retarget the GPU work to a catalog
GPU), `--kernel-times OTHER_TRACE` (GPU times from another trace of the same program),
`--speedup-span REGEX FACTOR` (an inclusive host speed-up: the span and all host work nested in it).
`--unprofiled-ms MS|meta` (put first): the step measured without the profiler; the host's profiler
overhead is taken out so that the unchanged trace simulates to it ("meta": the capture meta's
unprofiled `median_ms`, the slowest rank's).

Many ranks (issue 22): a trace store folder (docs/store.md), any traces with `--fleet`, and traces
whose whole tables would not fit the loader's memory budget (a folder of 512 rank traces) are
simulated by the fleet simulator (engine/simulate/fleet): one graph per rank built on
`--scheduler serial|local|tcp://HOST:PORT` (as on `mystique sql`), collectives matched across
ranks, all ranks solved together; it prints per-rank step times, stragglers and tasks/s and
writes `simulate.json` only (no predicted trace). Progress on stderr; Ctrl-C cancels.
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path

from engine.cli.common import print_json, progress_bar


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "simulate", help="predict a step from its trace; what-if edits", description=__doc__.splitlines()[0]
    )
    p.add_argument("paths", nargs="+", metavar="TRACE", help="Kineto trace file(s), capture folder or *_meta.json")
    p.add_argument("--what-if", dest="what_if", metavar="SPEC", help="what-if spec: a JSON file or inline JSON")
    p.add_argument(
        "--device",
        metavar="GPU",
        help="what-if: retarget the GPU work to this catalog GPU (V100, A100, H100, H200, B200, B300, MI250X, "
        "MI300X, MI355X); appended to --what-if's edits",
    )
    p.add_argument(
        "--kernel-times",
        dest="kernel_times",
        metavar="TRACE",
        help="what-if: take each GPU task's time from TRACE, another trace of the same program (another GPU or "
        "library version); appended to --what-if's edits",
    )
    p.add_argument(
        "--speedup-span",
        dest="speedup_span",
        nargs=2,
        metavar=("REGEX", "FACTOR"),
        help="what-if: host spans whose name matches REGEX run FACTOR times faster together with all the host "
        "work nested in them (an inclusive speed-up, e.g. the DataLoader); appended to --what-if's edits",
    )
    p.add_argument(
        "--unprofiled-ms",
        dest="unprofiled_ms",
        metavar="MS|meta",
        help="what-if: the step measured without the profiler (ms), or 'meta' for the capture meta's median_ms: "
        "the host's profiler overhead is taken out first (engine/simulate/whatif/unprofiled.py)",
    )
    p.add_argument("--out", metavar="DIR", help="write predicted_kineto.json.gz and simulate.json here")
    p.add_argument("--config", metavar="JSON", help="SimConfig overrides as inline JSON")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.add_argument(
        "--fleet",
        action="store_true",
        help="simulate rank by rank (for many ranks; automatic when TRACE is a trace store folder)",
    )
    p.add_argument(
        "--scheduler",
        default=None,
        help="fleet only: where per-rank graphs are built: serial, local (a Dask LocalCluster) or "
        "tcp://HOST:PORT (a dask scheduler); default $MYSTIQUE_SCHEDULER, else local",
    )
    p.set_defaults(func=run)


def _load(paths: list[str], progress):
    from engine.trace import load
    from engine.trace.layout import resolve

    # a capture folder or its meta: its Kineto trace(s) plus ET(s) (shapes for the batch/layers edits)
    return load(*resolve(*paths).files, progress=progress)


def _over_load_budget(paths: list[str]) -> str | None:
    """Why the Kineto traces behind `paths` would not load whole (the loader's budget:
    MYSTIQUE_LOAD_MAX_BYTES, else the memory available), None when they would; ETs beside them
    count (the whole load reads them too)."""
    from engine.trace.layout import resolve
    from engine.trace.loader import load_budget_bytes
    from engine.trace.store.handle import over_budget

    budget = load_budget_bytes()
    return None if budget is None else over_budget(resolve(*paths).files, budget)


def _unprofiled_ms(value: str, paths: list[str]) -> float:
    """--unprofiled-ms: a number of ms, or "meta": the capture meta's unprofiled median step
    (the slowest rank's: a job steps at its slowest rank)."""
    from engine.errors import TraceError

    if value != "meta":
        try:
            return float(value)
        except ValueError:
            raise TraceError(f"--unprofiled-ms: give a step in ms or 'meta', not {value!r}") from None
    from engine.trace.layout import resolve

    inputs = resolve(*paths)
    steps = [float(r.meta["median_ms"]) for r in inputs.ranks if (r.meta or {}).get("median_ms")]
    if not steps and (inputs.meta or {}).get("median_ms"):
        steps = [float(inputs.meta["median_ms"])]
    if not steps:
        raise TraceError("--unprofiled-ms meta: no capture meta with median_ms beside the trace; give the step in ms")
    return max(steps)


def _spec(args: argparse.Namespace, spec_cls):
    """--what-if's spec with the shorthand flags' edits appended (None when there is none)."""
    extra: list[dict] = []
    if args.device:
        extra.append({"kind": "device", "target": args.device})
    if args.kernel_times:
        extra.append({"kind": "kernel_times", "source": args.kernel_times})
    if args.speedup_span:
        rx, fac = args.speedup_span
        try:
            factor = float(fac)
        except ValueError:
            from engine.errors import TraceError

            raise TraceError(f"--speedup-span: FACTOR must be a number, got {fac!r}") from None
        extra.append({"kind": "speedup", "name": rx, "factor": factor, "inclusive": True})
    if getattr(args, "unprofiled_ms", None):
        extra.insert(0, {"kind": "unprofiled", "step_ms": _unprofiled_ms(args.unprofiled_ms, args.paths)})
    if not args.what_if and not extra:
        return None
    base = spec_cls.parse(args.what_if) if args.what_if else None
    if not extra:
        return base
    first = [e for e in extra if e["kind"] == "unprofiled"]  # before the spec's own edits (its docstring)
    rest = [e for e in extra if e["kind"] != "unprofiled"]
    data = {"version": 1, "edits": first + (base.to_json()["edits"] if base else []) + rest}
    return replace(spec_cls.parse(data), path=base.path if base else None)


def run(args: argparse.Namespace) -> int:
    from engine.errors import TraceError
    from engine.simulate import SimConfig, export_kineto, simulate
    from engine.simulate.whatif import WhatIfSpec

    spec = _spec(args, WhatIfSpec)
    try:
        cfg = SimConfig.parse(args.config) if args.config else SimConfig()
    except TraceError as exc:
        raise TraceError(f"--config {exc.problem}") from None
    from engine.simulate.fleet import is_store

    if args.fleet or (len(args.paths) == 1 and is_store(Path(args.paths[0]))):
        return _run_fleet(args, spec, cfg)
    big = _over_load_budget(args.paths)
    if big:  # whole tables would be refused (or exhaust memory): rank by rank from the store
        import sys

        print(f"simulate: {big}: simulated rank by rank from the trace store (as --fleet)", file=sys.stderr)
        return _run_fleet(args, spec, cfg)
    if args.scheduler is not None:
        raise TraceError("--scheduler applies to the fleet simulator: add --fleet (or give a trace store folder)")
    with progress_bar("simulate", enabled=not args.json) as cb:
        trace = _load(args.paths, cb)
        result = simulate(trace, spec, config=cfg, progress=cb, sensitivity=True)
    data = result.to_json()
    data["sources"] = [s.get("path") for s in trace.meta.get("sources", [])]
    if args.out:
        out = Path(args.out)
        kpath = export_kineto(result.predicted.events, out / "predicted_kineto.json.gz", trace.meta)
        data["predicted_trace"] = str(kpath)
        from engine import jsonio
        from engine.outdir import atomic_write

        atomic_write(
            out / "simulate.json",
            jsonio.dumps(data, option=jsonio.OPT_INDENT_2 | jsonio.OPT_SERIALIZE_NUMPY, default=str),
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
    from engine.analysis.breakdown import PARTS

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
    sens = data.get("sensitivity")
    if sens:
        rows = [(c, v) for c, v in sens["categories"].items() if v["delta_ms"] is not None]
        print(
            f"sensitivity ({sens['factor']:g}x faster, step change): "
            + ", ".join(f"{c} {v['delta_ms']:+.3f} ms ({v['delta_pct']:+.2f} %)" for c, v in rows)
        )
    for key in ("sharding", "dp"):
        if key in data:
            print(f"{key}: {data[key]}")
    for w in data["warnings"]:
        print(f"warning: {w}")
    if args.out:
        print(f"wrote {data['predicted_trace']} and {Path(args.out) / 'simulate.json'}")
    return 0


def _run_fleet(args: argparse.Namespace, spec, cfg) -> int:
    from engine import jsonio
    from engine.simulate.fleet import is_store, simulate_fleet

    with progress_bar("simulate fleet", enabled=not args.json) as cb:
        if len(args.paths) == 1 and is_store(Path(args.paths[0])):
            store = Path(args.paths[0])
        else:
            from engine.trace.store import build

            store = build(*args.paths, scheduler=args.scheduler, progress=cb)
        result = simulate_fleet(store, spec, config=cfg, scheduler=args.scheduler, progress=cb)
    data = result.to_json()
    data["store"] = str(store)
    if args.out:
        out = Path(args.out)
        from engine.outdir import atomic_write

        out.mkdir(parents=True, exist_ok=True)
        atomic_write(out / "simulate.json", jsonio.dumps(data, option=jsonio.OPT_INDENT_2, default=str))
    if args.json:
        print_json(data)
        return 0
    slow = int(result.ranks[result.step_ms.argmax()]) if len(result.ranks) else 0
    print(f"predicted iteration: {result.predicted_iteration_ms:.3f} ms (slowest rank {slow} of {len(result.ranks)})")
    print(
        f"tasks: {result.tasks:,}  collectives matched: {result.collectives:,}  "
        f"simulated at {result.tasks_per_s / 1e6:.2f} M tasks/s "
        f"(wall {result.wall_s:.1f} s: graphs {result.build_s:.1f} s, schedule {result.solve_s:.1f} s)"
    )
    for s in result.stragglers():
        print(
            f"last to arrive: rank {s['rank']} arrived last at {s['last_at']} collective(s); "
            f"waited {s['wait_ms']:.3f} ms; step {s['step_ms']:.3f} ms"
        )
    if "dp" in data["report"]:
        print(f"dp: {data['report']['dp']}")
    for w in data["warnings"]:
        print(f"warning: {w}")
    if args.out:
        print(f"wrote {Path(args.out) / 'simulate.json'}")
    return 0
