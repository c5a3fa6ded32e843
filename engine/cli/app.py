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


def run(args: argparse.Namespace) -> int:
    if not (1 <= args.port <= 65535):
        raise TraceError(f"--port must be in 1..65535, got {args.port}")
    if importlib.util.find_spec("streamlit") is None:
        raise TraceError("streamlit is not installed; install the UI extra: pip install -e '.[ui]'")
    app = resources.app_main()
    if not app.is_file():
        raise TraceError("app/main.py not found (neither a source checkout nor an installed data folder)", app)
    print(f"mystique app: http://{args.address}:{args.port}", file=sys.stderr)
    try:
        return subprocess.call(command(args), cwd=str(app.parents[1]), env=dict(os.environ))
    except KeyboardInterrupt:
        return 130
