"""Field rules for what-if edits, declared on the field: `copies: Annotated[int, Between(1, 1000)]`.

Why declared rather than coded in each edit's `__post_init__`: a bound then lives once, next to
its field, and everything that needs it reads the same rule: `Edit.__post_init__` checks every
edit, however it was made (parsed spec, Python, benchmark), and the What-if page takes its
widgets' min/max from `bounds()`. Every message has one form, `field: problem`, which the spec
parser prefixes with the edit's path (`edits[2].copies: must be between 1 and 1000, got 0`).

A rule on a tuple-typed field applies to each item, except `NonEmpty`, which applies to the
tuple. `None` (an optional field left out) passes every rule.

Every number field also gets `Finite` without declaring it (`implicit_rules`): NaN or Infinity
in a time or a factor made every prediction `null`, and an integer past 64 bits overflowed
numpy; `MAX_US` and `MAX_FACTOR` are the bounds time and scale fields declare.
"""

from __future__ import annotations

import math
import types
import typing
from dataclasses import dataclass
from typing import Any, ClassVar

MAX_US = 1e12  # a time field's upper bound: ~11.6 days, beyond any traced step
MAX_FACTOR = 1e6  # a speed-up or a shape scale: a million times is past any what-if question
INT64_MAX = 2**63 - 1


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
        lo, hi = _num(self.lo), _num(self.hi)
        if self.hi is None:
            text = f"must be >= {lo}"
        elif self.lo is None:
            text = f"must be <= {hi}"
        else:
            text = f"must be between {lo} and {hi}"
        return f"{text}, got {_num(value)}" + (f" ({self.why})" if self.why else "")


def _num(v: Any) -> str:
    """A bound or value as a reader writes it: 1000, 2.5, 1e+12 (not 1000000000000.0)."""
    return f"{v:g}" if isinstance(v, float) else str(v)


@dataclass(frozen=True, slots=True)
class Finite(Rule):
    """A float that is a number (not NaN, not +-Infinity), an int that fits 64 bits."""

    def problem(self, value: Any) -> str | None:
        if isinstance(value, bool):
            return None
        if isinstance(value, float) and not math.isfinite(value):
            return f"must be a finite number, got {value}"
        if isinstance(value, int) and abs(value) > INT64_MAX:
            digits = getattr(value, "digits", None) or int(value.bit_length() * 0.30103) + 1
            return f"out of range: an integer of {digits:,} digits does not fit in 64 bits"
        return None


def is_number_type(tp: Any) -> bool:
    """Whether a field's type (maybe Annotated, optional or a tuple of) holds ints or floats."""
    tp = typing.get_args(tp)[0] if typing.get_origin(tp) is typing.Annotated else tp
    if tp in (int, float):
        return True
    if typing.get_origin(tp) in (typing.Union, types.UnionType, tuple, list):
        return any(is_number_type(a) for a in typing.get_args(tp) if a is not Ellipsis)
    return False


def implicit_rules(tp: Any) -> tuple[Rule, ...]:
    """Rules every field of type `tp` has without declaring them (`Finite` for numbers)."""
    return (Finite(),) if is_number_type(tp) else ()


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
    """value compiles as a regex (engine.user_regex: linear time, so a catastrophic pattern cannot
    hang the simulation), so a typo is found when the spec is read, not mid-simulation."""

    def problem(self, value: Any) -> str | None:
        from engine.user_regex import MAX_PATTERN_CHARS, regex_problem

        if len(value) > MAX_PATTERN_CHARS:
            return f"a pattern of {len(value):,} characters is over the limit of {MAX_PATTERN_CHARS:,}"
        why = regex_problem(value)
        return f"not a valid regex ({why})" if isinstance(why, str) else None


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
