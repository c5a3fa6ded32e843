"""Extra dependencies between tasks (e.g. to model a new synchronisation)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from engine.simulate.graph import EdgeKind
from engine.simulate.whatif.spec import Edit, bad, register


@register
@dataclass(kw_only=True, slots=True)
class Dependency(Edit):
    kind: ClassVar[str] = "dependency"
    stage: ClassVar[str] = "graph"
    assumptions: ClassVar[str] = (
        "the n-th task named like `after` must end (plus `delay_us`) before the n-th task named like "
        "`before` starts; an impossible order is reported as a dependency cycle"
    )
    after: str
    before: str
    occurrence: int = 0
    delay_us: float = 0.0

    def __post_init__(self) -> None:
        for f in ("after", "before"):
            try:
                re.compile(getattr(self, f))
            except re.error as exc:
                raise bad(f, f"not a valid regex ({exc})") from None
        if self.occurrence < 0:
            raise bad("occurrence", "must be >= 0")

    def apply(self, ctx) -> None:
        g = ctx.graph
        names = g.tasks["name"].astype(str)
        a = np.flatnonzero(names.str.contains(self.after, regex=True).to_numpy())
        b = np.flatnonzero(names.str.contains(self.before, regex=True).to_numpy())
        if len(a) <= self.occurrence or len(b) <= self.occurrence:
            ctx.warnings.append(
                f"dependency: fewer than {self.occurrence + 1} tasks match {self.after!r}/{self.before!r}"
            )
            return
        ta, tb = a[self.occurrence], b[self.occurrence]
        g.add_edges(
            np.array([g.tasks["ep"].iat[ta]]),
            np.array([g.tasks["sp"].iat[tb]]),
            np.array([self.delay_us]),
            EdgeKind.USER,
        )
