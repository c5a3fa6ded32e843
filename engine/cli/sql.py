"""`mystique sql TRACE... "SELECT ..." [--json] [--rank R] [--scheduler S]`: read-only SQL over a trace's store.

The traces are streamed into the Parquet trace store on first use (docs/store.md) and queried
with DuckDB through the views `events`, `flows` and `sources`. Only reading is possible: a
statement that names a file, attaches a database, copies out or installs/loads an extension
is refused (exit 2, one line on stderr), as is bad SQL. Ranks are ingested one Dask task each
(engine/fanout.py): `--scheduler serial|local|tcp://HOST:PORT`; a bad address exits 2.
"""

from __future__ import annotations

import argparse


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "sql", help="query a trace's events with read-only SQL (DuckDB)", description=__doc__.splitlines()[0]
    )
    p.add_argument("paths", nargs="+", help="Kineto trace files (.json, .json.gz, .tar.gz) or a directory of ranks")
    p.add_argument("query", help='SQL over the views events, flows, sources, e.g. "SELECT name, sum(dur_us) ..."')
    p.add_argument("--json", action="store_true", help="rows as a JSON list of objects")
    p.add_argument("--rank", type=int, default=None, help="rank for files that do not declare one")
    p.add_argument(
        "--scheduler",
        default=None,
        help="where per-rank ingestion runs: serial, local (a Dask LocalCluster sized to this machine) "
        "or tcp://HOST:PORT (a dask scheduler); default $MYSTIQUE_SCHEDULER, else local",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import pandas as pd

    from engine.cli.common import print_json, progress_bar
    from engine.trace.store import query

    with progress_bar("ingest ranks", enabled=not args.json) as cb:
        df = query(list(args.paths), args.query, rank=args.rank, scheduler=args.scheduler, progress=cb)
    if args.json:
        rows = df.astype(object).where(pd.notna(df), None).to_dict(orient="records")
        print_json(rows)
    else:
        with pd.option_context("display.max_rows", 200, "display.max_columns", 50, "display.width", 200):
            print(df.to_string(index=False) if len(df.columns) else "(no result)")
    return 0
