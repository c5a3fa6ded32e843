"""The one error type the engine raises for bad input.

Why one type: the CLI maps it to exit code 2 with a one-line message and no traceback, and the
UI shows it with `st.error` while keeping its state. The message always names the file (when
there is one) and the problem.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any


class TraceError(Exception):
    """Bad input: a corrupt, truncated, hostile or unsupported file, spec or request."""

    def __init__(self, problem: str, path: str | os.PathLike | None = None):
        self.problem = problem
        self.path = None if path is None else os.fspath(path)
        super().__init__(f"{self.path}: {problem}" if self.path else problem)


# What a parser's own bug-free code raises on a document of the wrong shape.
MALFORMED = (KeyError, TypeError, ValueError, AttributeError, IndexError, OverflowError)


@contextlib.contextmanager
def malformed_as_trace_error(what: str, path: str | os.PathLike | None) -> Iterator[None]:
    """Turn a parser's KeyError/TypeError/... on a malformed document into one TraceError
    ("malformed <what> (KeyError: ...)") naming the file; TraceErrors pass through."""
    try:
        yield
    except TraceError:
        raise
    except MALFORMED as exc:
        raise TraceError(f"malformed {what} ({type(exc).__name__}: {exc})", path) from None


def reject_unknown_fields(d: dict[str, Any], known: set[str], what: str) -> None:
    """TraceError naming the fields of `d` that are not in `known` (and listing the known ones);
    `what` reads before "field(s)" ("unknown selection field(s): ...")."""
    unknown = sorted(set(d) - known)
    if unknown:
        raise TraceError(f"unknown {what} field(s): {', '.join(unknown)}; known: {', '.join(sorted(known))}")
