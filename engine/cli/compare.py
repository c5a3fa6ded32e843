"""`mystique compare ORIGINAL... REPLAY`: original vs replay (or trace vs trace) side by side.

ORIGINAL: a capture folder, a `*_meta.json`, or trace file(s) (e.g. an ET and its Kineto).
REPLAY (the last path): a replay output folder (with `replay.json`), a `replay.json`, or
another capture folder / trace file (trace vs trace).
"""

from __future__ import annotations

import argparse
import math

from engine.cli.common import print_json, progress_bar


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "compare", help="compare an original with its replay, or two traces", description=__doc__.splitlines()[0]
    )
    p.add_argument(
        "paths",
        nargs="+",
        metavar="PATH",
        help="ORIGINAL (capture folder, *_meta.json, or trace files) then REPLAY "
        "(replay folder/replay.json, or another capture folder/trace)",
    )
    p.add_argument("--top", type=int, default=15, help="rows per table (default 15; 0 = all with --json)")
    p.add_argument("--json", action="store_true", help="print the comparison as JSON")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from engine.compare import compare
    from engine.compare.inputs import load_original, load_replay_json
    from engine.compare.traces import TraceDiff
    from engine.errors import TraceError

    if len(args.paths) < 2:
        raise TraceError("give an ORIGINAL and a REPLAY path")
    *original_paths, replay_path = args.paths
    with progress_bar("compare", enabled=not args.json) as cb:
        original, meta = load_original(*original_paths, progress=cb)
        replay = load_replay_json(replay_path)
        if replay is None:
            replay, _ = load_original(replay_path, progress=cb)
        else:  # a replay of the ET synthesized from a Kineto-only original: compare through it
            original = with_synthesized_et(original, list(original_paths), replay)
        result = compare(original, replay, original_meta=meta)
    top = args.top if args.top > 0 else None
    if args.json:
        data = result.to_json(top) if isinstance(result, TraceDiff) else result.to_json()
        if top is not None and result.kind == "replay":
            data["per_op"] = data["per_op"][:top]
        print_json(data)
        return 0
    _print_text(result, top or 10**9)
    return 0


def _fmt(x, unit: str = "") -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "-"
    return f"{x:,.3f}{unit}" if isinstance(x, float) else f"{x}{unit}"


def _pct(x) -> str:
    return "-" if x is None or (isinstance(x, float) and not math.isfinite(x)) else f"{100 * x:.1f}%"


def coverage_line(cov: dict) -> str:
    """'selected 12, replayed 10, substituted 1, skipped 1 (reason: n, ...)' from a replay's coverage."""
    head = ", ".join(f"{k} {cov.get(k, 0)}" for k in ("selected", "replayed", "substituted", "skipped"))
    why = cov.get("by_reason") or {}
    return head + (f" ({', '.join(f'{k}: {v}' for k, v in why.items())})" if why else "")


def _print_text(result, top: int) -> None:
    e = result.e2e
    if result.kind == "replay":
        print(
            f"iteration: original {_fmt(e['original_ms'], ' ms')} ({e['original_source']}), "
            f"replay {_fmt(e['replay_ms'], ' ms')} on {e.get('replay_device')}, error {_pct(e['error'])}"
        )
        m = result.matching
        unknown = int(m.get("times_unknown") or 0)
        print(
            f"ops: {m.get('paired', m['matched'])}/{m['replay_ops'] - int(m.get('inserted') or 0)} replayed ops "
            f"paired by {m.get('by', 'node id')}, {m['matched']} with original times"
            + (f", {unknown} times unknown (ET only: no linked Kineto time)" if unknown else "")
            + "; "
            f"sum original {_fmt(m['original_sum_us'], ' us')} vs replay {_fmt(m['replay_sum_us'], ' us')} "
            f"({_pct(m['sum_error'])}); time basis {result.time_basis}"
        )
        if result.coverage:
            print(f"coverage: {coverage_line(result.coverage)}")
        tables = (("phase", result.by_phase), ("category", result.by_category), ("name", result.by_name))
        for key, df in tables:
            print(f"\nby {key}:")
            for r in df.head(top).itertuples(index=False):
                print(
                    f"  {str(getattr(r, key))[:48]:48s} n={r.count:<5d} orig {r.original_us:12,.1f} us  "
                    f"replay {r.replay_us:12,.1f} us  err {_pct(r.error)}"
                )
        for col, s in result.metrics.get("shared", {}).items():
            print(
                f"metric {col}: original mean {_fmt(s['original_mean'])} replay mean "
                f"{_fmt(s['replay_mean'])} ({_pct(s['error'])})"
            )
    else:
        print(
            f"iterations: a {_fmt(e['a_ms'], ' ms')} (n={e['a_iterations']}), "
            f"b {_fmt(e['b_ms'], ' ms')} (n={e['b_iterations']}), error {_pct(e['error'])}"
        )
        if result.headline:
            print(f"{result.headline} (b against a)")
        if len(result.by_class):
            print("\nGPU time by kernel class (b against a):")
            for r in result.by_class.itertuples(index=False):
                print(f"  {r.a_us:12,.1f} -> {r.b_us:12,.1f} us  {r.direction}")
        if len(result.by_op_type):
            p = result.op_pairs
            print(f"\nops paired in launch order on name and shapes: {p['paired']} of {p['a_ops']} / {p['b_ops']}")
            for r in result.by_op_type.head(top).itertuples(index=False):
                print(f"  {r.a_us:12,.1f} -> {r.b_us:12,.1f} us  n={r.pairs:<5d} {r.direction}")
        print("\nby category:")
        for r in result.by_category.head(top).itertuples(index=False):
            print(
                f"  {r.cat[:30]:30s} count {r.count_a:>8d} -> {r.count_b:<8d} "
                f"time {r.dur_us_a:14,.1f} -> {r.dur_us_b:14,.1f} us ({r.delta_us:+,.1f})"
            )
        print("\nby name (largest first):")
        for r in result.by_name.head(top).itertuples(index=False):
            print(
                f"  [{r.cat[:12]}] {r.name[:50]:50s} {r.count_a:>6d} -> {r.count_b:<6d} "
                f"{r.dur_us_a:12,.1f} -> {r.dur_us_b:12,.1f} us"
            )
    for w in result.warnings:
        print(f"warning: {w}")


def with_synthesized_et(original, paths: list, replay):
    """The original with the ET synthesized from it when it is a Kineto-only trace and the replay
    ran that synthesized ET (the synthesis is deterministic: same file, same node ids), so ops
    match by id; else the original unchanged."""
    from engine.compare.inputs import is_synthesized_et

    et = (getattr(replay, "paths", None) or {}).get("et")
    if original.has_et or not original.has_kineto or len(paths) != 1 or not et or not is_synthesized_et(et):
        return original
    from engine.compose.synth import load_synthesized

    return load_synthesized(paths[0])
