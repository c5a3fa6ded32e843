"""A parent that has imported the CLI's heavy libraries once and forks one `mystique` process per
request: what `clirun.cli` runs instead of a fresh interpreter when nothing about the request
needs one (tests/clirun.py decides).

Why: the suite starts ~190 CLI processes, and each fresh one spends 0.5-1.9 CPU-s importing
torch, pandas and numpy before its work (benchmarks/results/suite_cpu.json); on two cores that is
a minute and a half of the suite's wall time. The forked child is still a process of its own: its
own exit code, stdout and stderr (the caller's files, passed over the socket), working folder and
environment, and everything it changes dies with it. It runs `python -m engine.cli.main` as a
fresh interpreter would (runpy, `__main__`, normal interpreter exit: atexit handlers and
non-daemon threads as usual). No engine module is imported here, so nothing of the project reads
its environment before the child sets it.

What differs from a fresh interpreter, and how the caller keeps it from mattering:
- the libraries below are already imported: so the server refuses to start when importing them
  printed anything (a fresh process would have printed it to the user's stderr), and it serves
  only requests whose environment equals its own but for the project's `MYSTIQUE_*` variables
  (which the engine reads at call time) and pytest's (the caller starts one parent per such
  startup environment: `clirun.startup_env`);
- its resident memory starts at the server's (~300 MB): a test that measures a CLI's peak RSS or
  rlimits asks for a fresh process.

Protocol (one SOCK_SEQPACKET connection per request): the client sends a JSON message
{"argv", "cwd", "env"} with two file descriptors (stdout, stderr); the server answers {"pid"}
when the child has started, then {"rc"} (an exit code, or -signal as `subprocess` reports it)
when it has ended. The server exits when its stdin (a pipe from the starter) closes, killing any
child still running.
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import socket
import sys
import tempfile

PRELOAD = ("numpy", "pandas", "pyarrow", "networkx", "orjson", "msgspec", "psutil", "torch")


def _preload() -> str:
    """Import PRELOAD with fd 2 (and 1) captured; returns what they printed."""
    with tempfile.TemporaryFile() as cap:
        saved = os.dup(1), os.dup(2)
        os.dup2(cap.fileno(), 1)
        os.dup2(cap.fileno(), 2)
        try:
            for name in PRELOAD:
                __import__(name)
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])
        cap.seek(0)
        return cap.read().decode(errors="replace")


def _child(req: dict, fds: list[int], keep_closed: list) -> None:
    """In the forked child: become the requested `python -m engine.cli.main` and run it. Raises
    SystemExit (from the CLI) up through the server's frames, so the interpreter exits as a fresh
    one would."""
    for obj in keep_closed:
        obj.close()
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(fds[0], 1)
    os.dup2(fds[1], 2)
    for fd in (null, *fds):
        os.close(fd)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    os.chdir(req["cwd"])
    os.environ.clear()
    os.environ.update(req["env"])
    # `python -m` puts the working folder first, then PYTHONPATH (equal to the server's)
    sys.path[0] = os.getcwd()
    sys.argv = list(req["argv"])
    import runpy

    runpy.run_module("engine.cli.main", run_name="__main__", alter_sys=True)
    raise SystemExit(0)


def serve(path: str) -> None:
    printed = _preload()
    if printed.strip():
        print(f"refused: importing {', '.join(PRELOAD)} printed: {printed.strip()[:300]!r}", flush=True)
        raise SystemExit(3)
    import gc

    gc.collect()
    gc.freeze()  # the children's collections skip what is here (no copy-on-write of its pages)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(path)
    listener.listen(16)
    sel = selectors.DefaultSelector()
    sel.register(listener, selectors.EVENT_READ, "accept")
    sel.register(sys.stdin, selectors.EVENT_READ, "stdin")
    running: dict[int, tuple[int, socket.socket]] = {}  # pidfd -> (pid, connection)
    print("ready", flush=True)
    while True:
        for key, _ in sel.select():
            if key.data == "stdin":
                if not os.read(sys.stdin.fileno(), 4096):  # the starter is gone
                    for pid, _conn in running.values():
                        try:
                            os.kill(pid, signal.SIGKILL)
                        except ProcessLookupError:
                            pass
                    return
            elif key.data == "accept":
                conn, _ = listener.accept()
                msg, fds, _flags, _addr = socket.recv_fds(conn, 1 << 20, 2)
                sys.stdout.flush()
                pid = os.fork()
                if pid == 0:
                    for other in running:
                        os.close(other)
                    _child(json.loads(msg), fds, [listener, sel, *[c for _, c in running.values()], conn])
                for fd in fds:
                    os.close(fd)
                conn.send(json.dumps({"pid": pid}).encode())
                pidfd = os.pidfd_open(pid)
                running[pidfd] = (pid, conn)
                sel.register(pidfd, selectors.EVENT_READ, "child")
            else:
                pid, conn = running.pop(key.fd)
                sel.unregister(key.fd)
                os.close(key.fd)
                _, status, ru = os.wait4(pid, 0)
                try:
                    conn.send(
                        json.dumps(
                            {"rc": os.waitstatus_to_exitcode(status), "cpu_s": ru.ru_utime + ru.ru_stime}
                        ).encode()
                    )
                except OSError:
                    pass  # the caller gave up (a timeout) and closed its end
                conn.close()


if __name__ == "__main__":
    serve(sys.argv[1])
