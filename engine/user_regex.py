"""Regular expressions typed by users (what-if `name`/`module`, `--config sync_regex`, selection
name patterns, page search boxes): compiled here, and only here.

Why one home and a linear-time engine: Python's `re` backtracks, so a pattern such as
`^(\\w+|:+|\\s+|.)*\\d\\d$` runs for minutes on one ordinary op name, and a time limit cannot stop
it (the match holds the GIL inside C code). RE2 (`google-re2`) matches in time linear in the
text whatever the pattern; it refuses the few constructs that need backtracking (backreferences,
lookaround), which is what a user is told. Without the package (a bare GPU image: replay and
capture import with only torch, pandas and networkx) Python's `re` is used, refusing patterns
with a quantified group that itself contains a quantifier, the shape behind catastrophic
backtracking.

Errors are one-line `TraceError`s naming what the pattern was for (`what`).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from engine.errors import TraceError
from engine.rules import Rule

try:
    import re2 as _re2  # type: ignore[import-untyped]  # google-re2 ships no type stubs
except ImportError:  # pragma: no cover - exercised by tests/test_minimal_install.py
    _re2 = None

MAX_PATTERN_CHARS = 10_000
# A group closed by ")" and followed by a quantifier, whose body holds a quantifier: (a+)+, (a|b*)*
_NESTED = re.compile(r"\((?:[^()\\]|\\.)*(?:[*+?]|\{\d)(?:[^()\\]|\\.)*\)(?:[*+]|\{\d)")


class UserRegex:
    """A compiled user pattern: `search(s)`/`fullmatch(s)` -> bool, `mask(column)` -> bool array."""

    __slots__ = ("_rx", "pattern")

    def __init__(self, rx: Any, pattern: str):
        self._rx = rx
        self.pattern = pattern

    def search(self, s: str) -> bool:
        return self._call(self._rx.search, s)

    def fullmatch(self, s: str) -> bool:
        return self._call(self._rx.fullmatch, s)

    @staticmethod
    def _call(fn: Callable[[str], Any], s: str) -> bool:
        try:
            return fn(s) is not None
        except UnicodeEncodeError:  # a lone surrogate in a name: RE2 reads UTF-8
            return fn(s.encode("utf-8", "replace").decode("utf-8")) is not None

    def mask(self, column: Any) -> np.ndarray:
        """Where the pattern matches (search) a string column, evaluated once per distinct value."""
        from engine.trace import columns

        return columns.where(column, self.search)


def compile_user(pattern: Any, what: str, *, ignore_case: bool = False) -> UserRegex:
    """`pattern` compiled for matching names; TraceError naming `what` when it is not a string,
    too long, or not a pattern the engine runs in linear time."""
    if not isinstance(pattern, str):
        raise TraceError(f"{what} must be a string (a regular expression), not {pattern!r}")
    if len(pattern) > MAX_PATTERN_CHARS:
        raise TraceError(f"{what} is {len(pattern):,} characters long, over the limit of {MAX_PATTERN_CHARS:,}")
    problem = regex_problem(pattern, ignore_case=ignore_case)
    if isinstance(problem, str):
        raise TraceError(f"bad regular expression in {what} {pattern!r}: {problem}")
    return UserRegex(problem, pattern)


def regex_problem(pattern: str, *, ignore_case: bool = False) -> Any:
    """The compiled pattern, or a string saying why it is refused (the field rules' form)."""
    if _re2 is not None:
        opts = _re2.Options()
        opts.log_errors = False  # RE2 would otherwise print its own line on stderr
        opts.case_sensitive = not ignore_case
        try:
            return _re2.compile(pattern, opts)
        except _re2.error as exc:
            why = exc.args[0].decode("utf-8", "replace") if exc.args and isinstance(exc.args[0], bytes) else str(exc)
            return f"{why} (linear-time RE2 syntax: no backreferences or lookaround)"
        except (UnicodeEncodeError, TypeError, ValueError) as exc:
            return f"not a valid pattern ({exc})"
    if _NESTED.search(pattern):
        return "a quantified group holding a quantifier can take exponential time (install google-re2 to allow it)"
    try:
        return re.compile(pattern, re.IGNORECASE if ignore_case else 0)
    except (re.error, RecursionError, OverflowError) as exc:
        return str(exc)


def search_mask(column: Any, pattern: str, *, ignore_case: bool = True) -> np.ndarray:
    """A search box: `pattern` as a regex, or as plain text when it is not a valid one."""
    problem = regex_problem(pattern, ignore_case=ignore_case) if len(pattern) <= MAX_PATTERN_CHARS else "too long"
    if isinstance(problem, str):
        needle = pattern.lower() if ignore_case else pattern
        from engine.trace import columns

        return columns.where(column, (lambda s: needle in s.lower()) if ignore_case else (lambda s: needle in s))
    return UserRegex(problem, pattern).mask(column)


__all__ = ["MAX_PATTERN_CHARS", "Regex", "UserRegex", "compile_user", "regex_problem", "search_mask"]


@dataclass(frozen=True, slots=True)
class Regex(Rule):
    """A field rule (engine.rules): the value compiles as a regex here (linear time, so a
    catastrophic pattern cannot hang the simulation), so a typo is found when the spec is read,
    not mid-simulation."""

    def problem(self, value: Any) -> str | None:
        if len(value) > MAX_PATTERN_CHARS:
            return f"a pattern of {len(value):,} characters is over the limit of {MAX_PATTERN_CHARS:,}"
        why = regex_problem(value)
        return f"not a valid regex ({why})" if isinstance(why, str) else None
