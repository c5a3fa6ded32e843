"""Field rules for what-if edits, declared on the field: `copies: Annotated[int, Between(1, 1000)]`.

Why declared rather than coded in each edit's `__post_init__`: a bound then lives once, next to
its field, and everything that needs it reads the same rule: `Edit.__post_init__` checks every
edit, however it was made (parsed spec, Python, benchmark), and the What-if page takes its
widgets' min/max from `bounds()`. Every message has one form, `field: problem`, which the spec
parser prefixes with the edit's path (`edits[2].copies: must be between 1 and 1000, got 0`).

A rule on a tuple-typed field applies to each item, except `NonEmpty`, which applies to the
tuple. `None` (an optional field left out) passes every rule.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, ClassVar


class Rule:
    """Base of the rules: `problem(value)` is None when the value passes, else the message."""

    whole: ClassVar[bool] = False  # True: judge the tuple itself, not each item

    def problem(self, value: Any) -> str | None:  # pragma: no cover - abstract
        raise NotImplementedError


@dataclass(frozen=True, slots=True)
class Between(Rule):
    """lo <= value <= hi (either end may be open: None). `why` says what the bound protects."""

    lo: float | None = None
    hi: float | None = None
    why: str = ""

    def problem(self, value: Any) -> str | None:
        if (self.lo is None or value >= self.lo) and (self.hi is None or value <= self.hi):
            return None
        if self.hi is None:
            text = f"must be >= {self.lo}"
        elif self.lo is None:
            text = f"must be <= {self.hi}"
        else:
            text = f"must be between {self.lo} and {self.hi}"
        return f"{text}, got {value}" + (f" ({self.why})" if self.why else "")


@dataclass(frozen=True, slots=True)
class Positive(Rule):
    """value > 0 (a scale or a size: zero would erase the work it scales)."""

    def problem(self, value: Any) -> str | None:
        return None if value > 0 else f"must be > 0, got {value}"


@dataclass(frozen=True, slots=True)
class OneOf(Rule):
    """value is a key of `choices` (a registry such as the selectors or the sharding planners)."""

    choices: Any

    def problem(self, value: Any) -> str | None:
        return None if value in self.choices else f"unknown value {value!r}; choose one of {sorted(self.choices)}"


@dataclass(frozen=True, slots=True)
class Regex(Rule):
    """value compiles as a regex, so a typo is found when the spec is read, not mid-simulation."""

    def problem(self, value: Any) -> str | None:
        try:
            re.compile(value)
        except re.error as exc:
            return f"not a valid regex ({exc})"
        return None


@dataclass(frozen=True, slots=True)
class NonEmpty(Rule):
    """A list field with at least one item."""

    whole: ClassVar[bool] = True

    def problem(self, value: Any) -> str | None:
        return None if len(value) else "must not be empty"


def problem_with(rule: Rule, value: Any) -> str | None:
    """`rule` applied to `value`, item by item for a tuple (unless the rule judges the whole)."""
    if value is None:
        return None
    if isinstance(value, tuple) and not rule.whole:
        return next((p for p in map(rule.problem, value) if p is not None), None)
    return rule.problem(value)


def bounds(rules: tuple[Rule, ...]) -> tuple[float | None, float | None]:
    """(min, max) that a field's rules allow, for number widgets (None: open)."""
    lo = hi = None
    for r in rules:
        if isinstance(r, Between):
            lo, hi = r.lo, r.hi
    return lo, hi
