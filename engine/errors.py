"""The one error type the engine raises for bad input.

Why one type: the CLI maps it to exit code 2 with a one-line message and no traceback, and the
UI shows it with `st.error` while keeping its state. The message always names the file (when
there is one) and the problem.
"""

from __future__ import annotations

import os


class TraceError(Exception):
    """Bad input: a corrupt, truncated, hostile or unsupported file, spec or request."""

    def __init__(self, problem: str, path: str | os.PathLike | None = None):
        self.problem = problem
        self.path = None if path is None else os.fspath(path)
        super().__init__(f"{self.path}: {problem}" if self.path else problem)
