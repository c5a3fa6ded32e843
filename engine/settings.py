"""`Settings`: the one shape of the engine's configuration dataclasses, and their one validation.

Why one shape: `ReplayConfig` was mutable and serialised by free functions, `DistConfig` had its
own `to_json`/`from_json`, `SimConfig` was frozen, raised ValueError and returned a JSON string,
so every caller (CLI, UI, workers, the torchrun entry) learned three conventions. Now each is a
`@dataclass(frozen=True, kw_only=True, slots=True)` subclass of `Settings` (`__init_subclass__`
refuses any other shape, and a subclass's own `__post_init__`):

- `to_dict()` gives plain JSON values (Enum -> its value, Path -> str, a tuple -> a list, a
  nested `Settings` -> its `to_dict()`), `from_dict(d)` is its inverse and names unknown fields;
- a field declares what it accepts on its annotation (`iters: Annotated[int, Between(1)]`, the
  rules of engine.rules, the same ones what-if edits declare); `__post_init__` converts an Enum
  field's value, a Path field's string and a tuple field's list, checks every field's type and
  rules, then runs `validate()`, the hook for rules that join fields (a frozen instance sets
  fields through `_set`, and names a bad field with `bad`);
- every invalid value raises `FieldError` (a `TraceError`) with one line naming the object and
  the field (`replay config iters: must be >= 1, got 0`); its `field` and `detail` let an owner
  name a nested object's field (`spec segments[2].repeat: must be >= 1, got 0`).
"""

from __future__ import annotations

import typing
from dataclasses import dataclass, fields
from enum import Enum
from pathlib import Path
from typing import Any, ClassVar, Protocol, TypeVar

from engine.errors import TraceError, reject_unknown_fields
from engine.rules import Rule, field_rules, problem_with, type_problem

E = TypeVar("E", bound=Enum)
S = TypeVar("S", bound="Settings")
C = TypeVar("C", contravariant=True)
R = TypeVar("R", covariant=True)


class Applies(Protocol[C, R]):
    """What a declared change does: `apply(ctx)` on the context of its concern. The one shape of
    the what-if edits (`Applies[EditContext, None]`: they change the events, the graph or the
    prediction in place) and of the sharding kinds (`Applies[ShardContext, dict]`: they shard the
    benchmark in place and return the sharding's meta); their callers hold them as this type."""

    def apply(self, ctx: C, /) -> R: ...


def choose(enum: type[E], value: Any, what: str) -> E:
    """`value` (a member or its value) as a member of `enum`; TraceError listing the choices."""
    if isinstance(value, enum):
        return value
    try:
        return enum(value)
    except ValueError:
        choices = ", ".join(repr(m.value) for m in enum)
        raise TraceError(f"{what} must be one of {choices}, not {value!r}") from None


class FieldError(TraceError):
    """A settings field's problem: "WHAT field: detail" (module docstring)."""

    def __init__(self, what: str, field: str, detail: str):
        self.field = field
        self.detail = detail
        super().__init__(f"{what} {field}: {detail}")


def _plain(v: Any) -> Any:
    if isinstance(v, Settings):
        return v.to_dict()
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    if isinstance(v, Enum):
        return v.value
    if isinstance(v, Path):
        return str(v)
    if isinstance(v, tuple):
        return [_plain(x) for x in v]
    return v


def _base(hint: Any) -> Any:
    """The annotation without Annotated and without `| None`: the type to convert a value to."""
    if typing.get_origin(hint) is typing.Annotated:
        hint = typing.get_args(hint)[0]
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    return args[0] if len(args) == 1 and type(None) in typing.get_args(hint) else hint


_SHAPED: set[type] = set()  # Settings subclasses whose dataclass shape __init_subclass__ checked
_FIELDS: dict[type, dict[str, tuple[Any, tuple[Rule, ...]]]] = {}  # class -> field -> (type, rules)


class Settings:
    """Base of the frozen, kw_only, slots settings dataclasses (module docstring)."""

    __slots__ = ()
    WHAT: ClassVar[str] = "settings"  # how errors name the object ("replay config", ...)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "__post_init__" in vars(cls):
            raise TypeError(
                f"{cls.__name__}: declare field rules (engine.rules) or override validate(), not __post_init__"
            )
        params = vars(cls).get("__dataclass_params__")
        if params is None:  # the class statement itself; @dataclass(slots=True) makes the class checked here
            return
        loose = [f.name for f in fields(cls) if not f.kw_only]  # type: ignore[arg-type]  # a dataclass
        if not params.frozen or "__slots__" not in vars(cls) or loose:
            raise TypeError(f"{cls.__name__} must be @dataclass(frozen=True, kw_only=True, slots=True)")
        _SHAPED.add(cls)

    def __post_init__(self) -> None:
        cls = type(self)
        if cls not in _SHAPED:
            raise TypeError(f"{cls.__name__} must be @dataclass(frozen=True, kw_only=True, slots=True)")
        for name, (hint, rules) in self._fields().items():
            value = getattr(self, name)
            base = _base(hint)
            if isinstance(base, type) and issubclass(base, Enum) and value is not None and not isinstance(value, base):
                value = self._enum(name, base, value)
            elif base is Path and isinstance(value, str):
                value = Path(value)
            problem = type_problem(value, hint)  # a tuple field takes a JSON list: named as given
            if typing.get_origin(base) is tuple and isinstance(value, list):
                value = tuple(value)
            self._set(name, value)
            problem = problem or next((p for r in rules if (p := problem_with(r, value)) is not None), None)
            if problem is not None:
                raise self.bad(name, problem)
        self.validate()

    def bad(self, name: str, problem: str) -> FieldError:
        """The error naming field `name` (dotted for a nested object's field) and its problem."""
        return FieldError(self.WHAT, name, problem)

    def _enum(self, name: str, enum: type[E], value: Any) -> E:
        try:
            return enum(value)
        except ValueError:
            choices = ", ".join(repr(m.value) for m in enum)
            raise self.bad(name, f"must be one of {choices}, not {value!r}") from None

    @classmethod
    def _fields(cls) -> dict[str, tuple[Any, tuple[Rule, ...]]]:
        """Each field's annotation and rules (engine.rules), read once per class."""
        if cls not in _FIELDS:
            hints = typing.get_type_hints(cls, include_extras=True)
            _FIELDS[cls] = {f.name: (hints[f.name], field_rules(hints[f.name])) for f in fields(cls)}  # type: ignore[arg-type]  # a dataclass
        return _FIELDS[cls]

    @classmethod
    def rules_of(cls, name: str) -> tuple[Rule, ...]:
        """The rules declared on field `name` (for a widget's bounds or choices)."""
        return cls._fields()[name][1]

    def validate(self) -> None:
        """Rules that join several fields, or normalise one (override where a class has some)."""

    def _set(self, name: str, value: Any) -> None:
        """Normalise a field in `validate` (the instance is frozen)."""
        object.__setattr__(self, name, value)

    def to_dict(self) -> dict[str, Any]:
        return {f.name: _plain(getattr(self, f.name)) for f in fields(self)}  # type: ignore[arg-type]  # a dataclass

    @classmethod
    def from_dict(cls: type[S], d: Any) -> S:
        """Inverse of `to_dict`; TraceError on a non-object or an unknown field."""
        if not isinstance(d, dict):
            raise TraceError(f"{cls.WHAT} must be a JSON object, not {type(d).__name__}")
        reject_unknown_fields(d, {f.name for f in fields(cls)}, cls.WHAT)  # type: ignore[arg-type]  # a dataclass
        return cls(**d)


@dataclass(frozen=True, kw_only=True, slots=True)
class DashboardSettings(Settings):
    """The dashboard's own settings (`mystique app --scheduler`, and the Ranks page's setting).

    scheduler: where the fan-out over ranks that the UI starts runs (store builds, rank
    summaries): "serial", "local" or "tcp://HOST:PORT" (engine.fanout.resolve checks it; a bad
    value is one line naming it)."""

    WHAT = "dashboard settings"
    scheduler: str = "local"

    def validate(self) -> None:
        from engine.fanout import resolve

        self._set("scheduler", resolve(str(self.scheduler)))


__all__ = ["Applies", "DashboardSettings", "FieldError", "Settings", "choose"]
