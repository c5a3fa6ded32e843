"""Keep C++ library chatter off the user's stderr, and nothing else.

Why at the file-descriptor level: the PyTorch profiler's Kineto prints `USDT: ...
profiler_start` / `profiler_stop` (and `STAGE:` lines on some builds) from C++ straight to fd 2,
past `sys.stderr`, on every profiled replay iteration; a user reading a replay's stderr (or a
test checking "one line on stderr") sees library noise. Raising Kineto's log level would also
hide its real errors, so instead fd 2 is pointed at a temporary file around the profiler window,
and afterwards every line except those chatter lines is written back to the real stderr, in
order. Warnings and errors printed in the window (Python's or the library's) still reach the
user, only later by the length of the window.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from collections.abc import Iterator

CHATTER = (b"USDT:", b"STAGE:")


@contextlib.contextmanager
def drop_chatter(prefixes: tuple[bytes, ...] = CHATTER) -> Iterator[None]:
    """Within the block, lines written to fd 2 that start with one of `prefixes` are dropped;
    the others are written back when the block ends (also when it raises)."""
    try:
        sink = tempfile.TemporaryFile()  # noqa: SIM115 - closed by the `with sink` below
        saved = os.dup(2)
    except OSError:  # no temporary space or no fd 2: chatter is the lesser harm
        yield
        return
    with sink:
        _flush()
        os.dup2(sink.fileno(), 2)
        try:
            yield
        finally:
            _flush()
            os.dup2(saved, 2)
            os.close(saved)
            sink.seek(0)
            kept = b"".join(line for line in sink if not line.lstrip().startswith(prefixes))
            with contextlib.suppress(OSError):
                while kept:
                    kept = kept[os.write(2, kept) :]


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
