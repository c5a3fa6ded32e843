"""`Settings`: the one shape of the engine's configuration dataclasses.

Why one shape: `ReplayConfig` was mutable and serialised by free functions, `DistConfig` had its
own `to_json`/`from_json`, `SimConfig` was frozen, raised ValueError and returned a JSON string,
so every caller (CLI, UI, workers, the torchrun entry) learned three conventions. Now each is a
`@dataclass(frozen=True, kw_only=True, slots=True)` subclass of `Settings`:

- `to_dict()` gives plain JSON values (Enum -> its value, Path -> str), `from_dict(d)` is its
  inverse and names unknown fields;
- closed sets are Enum fields; `choose(Enum, value, what)` converts a string and is what
  `__post_init__` uses (a frozen instance sets fields through `_set`);
- every invalid value raises `TraceError` with one line naming the field.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from enum import Enum
from pathlib import Path
from typing import Any, TypeVar

from engine.errors import TraceError, reject_unknown_fields

E = TypeVar("E", bound=Enum)
S = TypeVar("S", bound="Settings")


def choose(enum: type[E], value: Any, what: str) -> E:
    """`value` (a member or its value) as a member of `enum`; TraceError listing the choices."""
    if isinstance(value, enum):
        return value
    try:
        return enum(value)
    except ValueError:
        choices = ", ".join(repr(m.value) for m in enum)
        raise TraceError(f"{what} must be one of {choices}, not {value!r}") from None


def _plain(v: Any) -> Any:
    if isinstance(v, Enum):
        return v.value
    if isinstance(v, Path):
        return str(v)
    if isinstance(v, tuple):
        return [_plain(x) for x in v]
    return v


class Settings:
    """Base of the frozen, kw_only, slots settings dataclasses (module docstring)."""

    __slots__ = ()
    WHAT = "settings"  # how errors name the object ("replay", "simulate config", ...)

    def _set(self, name: str, value: Any) -> None:
        """Normalise a field in `__post_init__` (the instance is frozen)."""
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

    def __post_init__(self) -> None:
        from engine.fanout import resolve

        self._set("scheduler", resolve(str(self.scheduler)))


__all__ = ["DashboardSettings", "Settings", "choose"]
