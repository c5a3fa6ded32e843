"""`SelectionMode`: which rebuildable ops a replay runs (the rule is in engine/graph/replayset.py).

Its own module, free of pandas: the CLI's parser and the configs read it, and a process that only
refuses its input or prints `--help` should not import the trace model.
"""

from __future__ import annotations

from enum import Enum

from engine.errors import TraceError


class SelectionMode(str, Enum):
    """Which rebuildable ops a replay runs (module docstring); a `str` so "top" == TOP."""

    TOP = "top"  # the highest rebuildable op on each call path
    LEAF = "leaf"  # the lowest rebuildable ops

    def __str__(self) -> str:
        return self.value

    @classmethod
    def parse(cls, value: str | SelectionMode) -> SelectionMode:
        try:
            return cls(value)
        except ValueError:
            raise TraceError(f"replay mode must be 'top' or 'leaf', not {value!r}") from None
