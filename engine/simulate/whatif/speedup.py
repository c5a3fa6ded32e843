"""Speed-up factors by category or name regex.

Assumptions: selected tasks' own time is divided by `factor` (host tasks: their self time,
children keep theirs; GPU tasks: their duration; communication: bandwidth-bound, so the whole
duration); launch latencies, gaps and dependencies are unchanged. `rank` limits it to one rank (a
factor below 1 slows that rank down: a straggler)
"""

from __future__ import annotations

from typing import Annotated

import numpy as np

from engine.simulate.whatif.rules import MAX_FACTOR, Between, OneOf, Positive, Regex
from engine.simulate.whatif.selectors import SELECTORS, select
from engine.simulate.whatif.spec import Edit, bad, register


@register("speedup")
class Speedup(Edit):
    factor: Annotated[float, Positive(), Between(1 / MAX_FACTOR, MAX_FACTOR)]
    category: Annotated[str | None, OneOf(SELECTORS)] = None
    name: Annotated[str | None, Regex()] = None
    rank: Annotated[int | None, Between(0, 1 << 20)] = None  # only this rank's tasks (a straggler)

    def check(self) -> None:
        if self.category is None and self.name is None:
            raise bad("category", "give a category or a name regex (or both)")

    def apply(self, ctx) -> None:
        g = ctx.graph
        mask = select(g, self.category, self.name, self.rank)
        if not mask.any():
            ctx.warnings.append(f"speedup: no task matches category={self.category!r} name={self.name!r}")
            return
        f = np.ones(g.n_tasks)
        f[mask] = 1.0 / self.factor
        g.scale_tasks(f)
