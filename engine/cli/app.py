"""`mystique app`: start the Streamlit UI (app/main.py) bound to localhost by default.

Streamlit is optional for the engine, so it is looked up only when this command runs; the UI
is started as `python -m streamlit run` in the same interpreter (same venv, same packages).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess
import sys

from engine import resources
from engine.errors import TraceError


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "app", help="start the web UI (Streamlit) on localhost", description=__doc__.splitlines()[0]
    )
    p.add_argument("--port", type=int, default=8501, help="port (default 8501)")
    p.add_argument(
        "--address", default="localhost", help="bind address (default localhost; 0.0.0.0 exposes the UI to the network)"
    )
    p.add_argument("--browser", action="store_true", help="open a browser tab (default: headless)")
    p.add_argument(
        "--scheduler",
        default=None,
        help="where the UI's fan-out over ranks runs (store builds, rank summaries): serial, local "
        "or tcp://HOST:PORT (a dask scheduler); default $MYSTIQUE_SCHEDULER, else local",
    )
    p.set_defaults(func=run)


def command(args: argparse.Namespace) -> list[str]:
    """The streamlit command line for `args` (separate from `run` so it can be tested)."""
    return [
        sys.executable,
        "-m",
        "streamlit",
        "run",
        str(resources.app_main()),
        "--server.port",
        str(args.port),
        "--server.address",
        args.address,
        "--server.headless",
        "false" if args.browser else "true",
        "--browser.gatherUsageStats",
        "false",
    ]


APP_SCHEDULER = "MYSTIQUE_APP_SCHEDULER"
"""Set by `--scheduler`: the dashboard's scheduler setting for new sessions (it wins over the one
saved in the workspace; app/scheduler.py)."""


def environment(args: argparse.Namespace) -> dict[str, str]:
    """The server's environment: ours, plus `--scheduler` checked (TraceError, one line) and passed on."""
    from engine.settings import DashboardSettings

    env = dict(os.environ)
    if args.scheduler is not None:
        env[APP_SCHEDULER] = DashboardSettings(scheduler=args.scheduler).scheduler
    return env


def run(args: argparse.Namespace) -> int:
    if not (1 <= args.port <= 65535):
        raise TraceError(f"--port must be in 1..65535, got {args.port}")
    environment(args)  # a bad --scheduler fails before anything starts
    if importlib.util.find_spec("streamlit") is None:
        raise TraceError("streamlit is not installed; install the UI extra: pip install -e '.[ui]'")
    app = resources.app_main()
    if not app.is_file():
        raise TraceError("app/main.py not found (neither a source checkout nor an installed data folder)", app)
    print(f"mystique app: http://{args.address}:{args.port}", file=sys.stderr)
    try:
        return subprocess.call(command(args), cwd=str(app.parents[1]), env=environment(args))
    except KeyboardInterrupt:
        return 130
