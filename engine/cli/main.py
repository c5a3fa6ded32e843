"""`mystique` console script: one subcommand module per concern (engine/cli/<name>.py).

Each module exposes `register(subparsers)` (adds its parser and sets `func`) and the function
it sets returns an exit code. Errors from bad input (`TraceError`) become one line on stderr and
exit code 2, never a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from engine.errors import TraceError

COMMANDS = ("info", "capture", "replay", "compare", "compose", "simulate", "sql", "fleet", "app")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mystique",
        description="Turn PyTorch execution traces into portable benchmarks: inspect, capture, "
        "replay, compare and compose. Bad input exits with code 2.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    for name in COMMANDS:
        try:
            module = importlib.import_module(f"engine.cli.{name}")
        except ModuleNotFoundError as exc:  # a subcommand whose optional deps are missing
            if exc.name and exc.name.startswith("engine.cli."):
                continue
            raise
        module.register(sub)
    return parser


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the main thread so that every `finally` and `with` on the way out runs:
    rank processes are brought down (engine.distributed.launch.kill_tree) and the output folder's
    RUNNING marker is removed (engine.outdir.OutputLock), as on Ctrl-C (issue 26)."""


def _on_term(signum, frame) -> None:
    raise Terminated()


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    import signal
    import threading

    from engine.cli.common import printable_output

    previous = None
    if args.command != "app" and threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGTERM, _on_term)  # the dashboard keeps its server's own
    try:
        if args.command == "app":  # the server's own logs; trace text never reaches them
            return _run(args)
        with printable_output():  # trace text's control characters never reach the terminal
            return _run(args)
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _run(args: argparse.Namespace) -> int:
    try:
        return int(args.func(args) or 0)
    except TraceError as exc:
        print(f"mystique {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # e.g. `mystique info --json X | head`: the reader went away
        import os

        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except Terminated:
        print(f"mystique {args.command}: terminated", file=sys.stderr)
        return 143
    except KeyboardInterrupt:
        print(f"mystique {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
