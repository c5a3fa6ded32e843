"""Field rules, declared on the field: `copies: Annotated[int, Between(1, 1000)]`.

The one way a config or a spec states what a field accepts: engine settings
(engine.settings.Settings: ReplayConfig, SimConfig, ComposeLimits, the sharding kinds, the
compose spec, ...) and what-if edits (engine.simulate.whatif.spec.Edit) read their fields' rules
from the annotations and check them in their `__post_init__`.

Why declared rather than coded in each class's `__post_init__`: a bound then lives once, next to
its field, and everything that needs it reads the same rule: every instance is checked however it
was made (parsed spec, CLI flags, Python), and the What-if and Compose pages take their widgets'
min/max and choices from `bounds()` and `choices()`. Every message has one form, `field: problem`,
which the caller prefixes with the object's name (`edits[2].copies: must be between 1 and 1000,
got 0`). `Regex` (a linear-time pattern) lives in engine.user_regex, beside the engine it checks.

A rule on a tuple-typed field applies to each item, except `NonEmpty`, which applies to the
tuple. `None` (an optional field left out) passes every rule.

Every number field also gets `Finite` without declaring it (`implicit_rules`): NaN or Infinity
in a time or a factor made every prediction `null`, and an integer past 64 bits overflowed
numpy; `MAX_US` and `MAX_FACTOR` are the bounds time and scale fields declare.
"""

from __future__ import annotations

import enum
import math
import re
import types
import typing
from dataclasses import dataclass, is_dataclass
from pathlib import Path
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
class Matches(Rule):
    """A string that matches `pattern` in full; `what` says in words what it asks for."""

    pattern: str
    what: str

    def problem(self, value: Any) -> str | None:
        return None if re.fullmatch(self.pattern, value) else f"must be {self.what}, got {value!r}"


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


def type_problem(value: Any, tp: Any) -> str | None:
    """None when `value` is of the annotated type `tp` (Annotated, optional, union, Literal, Enum,
    a dataclass, tuple of), else "expected ..., got ..."; types it does not know (dict, Any) pass."""
    want = describe(tp)
    return None if _is(value, tp) else f"expected {want}, got {value!r}"


def _is(value: Any, tp: Any) -> bool:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is typing.Annotated:
        return _is(value, args[0])
    if origin in (typing.Union, types.UnionType):
        return any(_is(value, a) for a in args)
    if origin is typing.Literal:
        return any(value == a and type(value) is type(a) for a in args)
    if origin is tuple:  # a JSON list is one too
        return isinstance(value, (tuple, list)) and all(_is(v, args[0]) for v in value)
    if tp is type(None):
        return value is None
    if tp is bool:
        return isinstance(value, bool)
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if tp is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if isinstance(tp, type) and (issubclass(tp, (str, enum.Enum, Path)) or is_dataclass(tp)):
        return isinstance(value, tp)
    return True


def describe(tp: Any) -> str:
    """A type as a message names it: "an integer", "a number or null", "true, false or 'auto'"."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is typing.Annotated:
        return describe(args[0])
    if origin in (typing.Union, types.UnionType):
        return " or ".join(describe(a) for a in args)
    if origin is typing.Literal:
        return " or ".join(repr(a) for a in args)
    if origin is tuple:
        return f"a list of {describe(args[0]).removeprefix('a ').removeprefix('an ')}s"
    names = {type(None): "null", bool: "true/false", int: "an integer", float: "a number", str: "a string"}
    return names.get(tp, f"a {getattr(tp, '__name__', tp)}")


def field_rules(hint: Any) -> tuple[Rule, ...]:
    """The rules of a field annotated `hint`: the implicit ones, then those declared on it."""
    return implicit_rules(hint) + tuple(m for m in getattr(hint, "__metadata__", ()) if isinstance(m, Rule))


def bounds(rules: tuple[Rule, ...]) -> tuple[float | None, float | None]:
    """(min, max) that a field's rules allow, for number widgets (None: open)."""
    lo = hi = None
    for r in rules:
        if isinstance(r, Between):
            lo, hi = r.lo, r.hi
    return lo, hi


def choices(rules: tuple[Rule, ...]) -> tuple[Any, ...] | None:
    """The values a field's `OneOf` allows, for select widgets (None: no such rule)."""
    return next((tuple(r.choices) for r in rules if isinstance(r, OneOf)), None)
