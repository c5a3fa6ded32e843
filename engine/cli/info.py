"""`mystique info PATH... [--json] [--rank R] [--no-cache]`: what a trace holds, at a glance.

With `--json`: one JSON object when the paths hold one trace file, else a list with one
object per file (tarball members and directory entries count as files). Keys are documented
in `engine.trace.summary`; they match MANIFEST.json entries (`kind`, `schema`, `nodes`,
`events`, `rank`, `world_size`, `kernels`, `cpu_ops`). When an ET and a Kineto trace are given
together they are linked and every object carries the pair's `link_rate`.

A trace whose whole tables would not fit the whole-table budget ($MYSTIQUE_WHOLE_TABLE_MAX_BYTES,
default 2 GiB of estimated memory) is read through the trace store in bounded memory, with the
same keys and a warning saying so (ETs are not stored: they are listed as not read).

One trace file with GPU work adds the GPU analyses (engine.analysis.gpu_queue and .gemm, where
each term is defined): `gpu_streams` (per stream: tasks, queue length mean / max, launch delay
median / p90 / max in µs), `gpu_idle` (idle µs split into host_wait_us, kernel_wait_us,
unlinked_us), `gpu_waited_for` (the 10 idle gaps with the largest host wait and the task that
ended each) and `gemm` (device, dtype and the GEMM / attention rows: op, input dims, calls, µs,
GFLOP per call, achieved TFLOP/s, share of the device's peak; at most 50 rows, most time first).
"""

from __future__ import annotations

import argparse
import warnings

from engine.cli.common import print_json, progress_bar


def register(subparsers) -> None:
    p = subparsers.add_parser("info", help="summarize ET / Kineto trace files", description=__doc__.splitlines()[0])
    p.add_argument("paths", nargs="+", help="trace files (.json, .json.gz, .tar.gz) or a directory of ranks")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--rank", type=int, default=None, help="rank for files that do not declare one")
    p.add_argument("--no-cache", action="store_true", help="parse again instead of reading the cache")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from engine.trace.store.handle import is_store_trace, open_trace
    from engine.trace.summary import summarize_sources

    # Loader warnings (e.g. an unknown ET schema) are part of the output below, so Python's
    # own warning lines would only repeat them on stderr. A trace over the whole-table budget is
    # read through its store (engine.trace.store.handle): columns and counts, not whole tables.
    with progress_bar("loading", enabled=not args.json) as cb, warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        trace = open_trace(*args.paths, rank=args.rank, progress=cb, use_cache=not args.no_cache)
    if is_store_trace(trace):
        from engine.trace.store.summary import summarize_store_sources

        objs = summarize_store_sources(trace)
    else:
        objs = summarize_sources(trace)
    if len(objs) == 1 and not is_store_trace(trace) and trace.has_kineto:
        objs[0].update(gpu_analyses(trace))
    if args.json:
        print_json(objs[0] if len(objs) == 1 else objs)
    else:
        print(render(objs))
    return 0


GPU_KEYS = ("gpu_streams", "gpu_idle", "gpu_waited_for", "gemm")
"""The keys `gpu_analyses` adds after the summary's (engine.trace.summary.KEYS), in this order."""


def gpu_analyses(trace) -> dict:
    """The GPU keys of `info --json` (module docstring); {} when the trace has no GPU work."""
    from engine.analysis import gemm, gpu_queue
    from engine.compare.replay import json_clean, json_records

    lz = gpu_queue.launches(trace.events)
    gaps = gpu_queue.idle_gaps(trace.events)
    if not len(lz) and not len(gaps):
        return {}
    tab, head = gemm.gemm_table(trace)
    return {
        "gpu_streams": json_records(gpu_queue.stream_summary(lz).round(3)),
        "gpu_idle": gpu_queue.idle_split(gaps),
        "gpu_waited_for": json_records(gpu_queue.waited_for(gaps, 10).round(3)),
        "gemm": json_clean(head) | {"rows": json_records(tab.head(50).round(4))},
    }


def _fmt(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.3f}" if v < 10 else f"{v:,.0f}"
    if isinstance(v, int):
        return f"{v:,}"
    return str(v)


def render(objs: list[dict]) -> str:
    """Compact human-readable table: one block per file."""
    lines = []
    for o in objs:
        lines.append(o["path"])
        rows = [
            ("kind", o["kind"]),
            ("schema", o["schema"] or "-"),
            (
                "nodes" if o["kind"].startswith("execution") else "events",
                o["nodes"] if o["kind"].startswith("execution") else o["events"],
            ),
            ("ranks", ",".join(map(str, o["ranks"])) or "-"),
            ("world size", o["world_size"]),
            ("link rate", None if o["link_rate"] is None else f"{100 * o['link_rate']:.1f}%"),
            ("kernels", o["kernels"]),
            ("cpu ops", o["cpu_ops"]),
            ("time span (us)", o["time_span_us"]),
            ("iterations", len(o["iterations"])),
            ("step (ms)", o["step_ms"]),
            ("step source", o["step_source"]),
        ]
        for k, v in rows:
            lines.append(f"  {k:<15} {_fmt(v)}")
        if o.get("kernel_classes"):
            lines.append(
                "  kernel classes  "
                + ", ".join(f"{c['class']} {100 * c['share']:.1f}% ({c['kernels']:,})" for c in o["kernel_classes"])
            )
        if o["ops_by_category"]:
            lines.append("  categories      " + ", ".join(f"{k} {v:,}" for k, v in o["ops_by_category"].items()))
        if o["top_ops"]:
            lines.append(f"  {'top ops':<40} {'count':>8} {'total us':>12}")
            for t in o["top_ops"]:
                lines.append(f"    {t['name'][:38]:<38} {t['count']:>8,} {_fmt(t['dur_us']):>12}")
        if o.get("gpu_idle"):
            i = o["gpu_idle"]
            lines.append(
                f"  gpu idle (us)   {_fmt(i['idle_us'])}: host wait {_fmt(i['host_wait_us'])}, "
                f"kernel wait {_fmt(i['kernel_wait_us'])}, unlinked {_fmt(i['unlinked_us'])}"
            )
        for st in o.get("gpu_streams") or []:
            lines.append(
                f"  stream {st['stream']:<8} queue mean {st['queue_len_mean']:.1f} max {st['queue_len_max']}, "
                f"launch delay median {_fmt(st['launch_delay_median_us'])} us"
            )
        for w in o["warnings"]:
            lines.append(f"  warning: {w}")
    return "\n".join(lines)
