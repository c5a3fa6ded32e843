"""`mystique sql TRACE... "SELECT ..." [--json] [--max-rows N] [--timeout S] [--rank R] [--scheduler S]`: read-only SQL over a trace's store.

The traces are streamed into the Parquet trace store on first use (docs/store.md) and queried
with DuckDB through the views `events`, `flows` and `sources`. Only reading is possible: a
statement that names a file, attaches a database, copies out or installs/loads an extension
is refused (exit 2, one line on stderr), as is bad SQL. Ranks are ingested one Dask task each
(engine/fanout.py): `--scheduler serial|local|tcp://HOST:PORT`; a bad address exits 2.

Bounded: at most `--max-rows` rows are fetched and printed (labelled "first N rows" when the
result goes on; with `--json` the label goes to stderr), DuckDB may use a quarter of the memory
this process may use and never spills to disk, and a query still running after `--timeout`
seconds, or on Ctrl-C or SIGTERM, is interrupted (exit 2, 130, 143).
"""

from __future__ import annotations

import argparse

from engine.trace.store.sql import CLI_TIMEOUT_S, MAX_ROWS


def _positive_int(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number of rows >= 1, not {text!r}")
    return n


def _positive_float(text: str) -> float:
    try:
        x = float(text)
    except ValueError:
        x = float("nan")
    if not x > 0 or x == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a number of seconds > 0, not {text!r}")
    return x


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "sql", help="query a trace's events with read-only SQL (DuckDB)", description=__doc__.splitlines()[0]
    )
    p.add_argument("paths", nargs="+", help="Kineto trace files (.json, .json.gz, .tar.gz) or a directory of ranks")
    p.add_argument("query", help='SQL over the views events, flows, sources, e.g. "SELECT name, sum(dur_us) ..."')
    p.add_argument("--json", action="store_true", help="rows as a JSON list of objects")
    p.add_argument(
        "--max-rows",
        type=_positive_int,
        default=MAX_ROWS,
        help=f"fetch and print at most this many rows (default {MAX_ROWS:,}); the rest is never read",
    )
    p.add_argument(
        "--timeout",
        type=_positive_float,
        default=CLI_TIMEOUT_S,
        help=f"seconds after which a running query is interrupted (default {CLI_TIMEOUT_S:g})",
    )
    p.add_argument("--rank", type=int, default=None, help="rank for files that do not declare one")
    p.add_argument(
        "--scheduler",
        default=None,
        help="where per-rank ingestion runs: serial, local (a Dask LocalCluster sized to this machine) "
        "or tcp://HOST:PORT (a dask scheduler); default $MYSTIQUE_SCHEDULER, else local",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import sys

    import pandas as pd

    from engine.cli.common import print_json, progress_bar
    from engine.trace.store.sql import run as run_sql

    with progress_bar("ingest ranks", enabled=not args.json) as cb:
        res = run_sql(
            list(args.paths),
            args.query,
            rank=args.rank,
            scheduler=args.scheduler,
            progress=cb,
            max_rows=args.max_rows,
            timeout_s=args.timeout,
        )
    df = res.frame
    label = f"first {args.max_rows:,} rows (the result has more; --max-rows N fetches more)"
    if args.json:
        rows = df.astype(object).where(pd.notna(df), None).to_dict(orient="records")
        print_json(rows)
        if res.truncated:
            print(f"mystique sql: {label}", file=sys.stderr)
    else:
        with pd.option_context("display.max_rows", None, "display.max_columns", 50, "display.width", 200):
            print(df.to_string(index=False) if len(df.columns) else "(no result)")
        if res.truncated:
            print(f"-- {label}")
    return 0
