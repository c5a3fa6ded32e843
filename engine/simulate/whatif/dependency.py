"""Extra dependencies between tasks (e.g. to model a new synchronisation).

Assumptions: the n-th task named like `after` must end (plus `delay_us`) before the n-th task
named like `before` starts; an impossible order is reported as a dependency cycle
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import numpy as np

from engine.rules import MAX_US, Between
from engine.simulate.taskgraph import EdgeKind
from engine.simulate.whatif.spec import Edit, register
from engine.user_regex import Regex, compile_user

if TYPE_CHECKING:
    from engine.simulate.whatif.context import EditContext


@register("dependency")
class Dependency(Edit):
    after: Annotated[str, Regex()]
    before: Annotated[str, Regex()]
    occurrence: Annotated[int, Between(0)] = 0
    delay_us: Annotated[float, Between(-MAX_US, MAX_US)] = 0.0

    def apply(self, ctx: EditContext) -> None:
        g = ctx.graph
        names = g.tasks["name"].astype(str)
        a = np.flatnonzero(compile_user(self.after, "after").mask(names))
        b = np.flatnonzero(compile_user(self.before, "before").mask(names))
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
