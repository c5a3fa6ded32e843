"""Speed-up factors by category or name regex.

`inclusive`: a matched host span speeds up together with all the host work nested in it (its
children's segments on that thread between its start and end, at every depth). That is what "the
DataLoader 10x faster" means: the loader's own time is half its span, the rest sits in the ops it
calls (collate, transforms, copies). GPU work the span launched keeps its duration.

Assumptions: selected tasks' own time is divided by `factor` (host tasks: their self time,
children keep theirs unless `inclusive`; GPU tasks: their duration; communication:
bandwidth-bound, so the whole duration); launch latencies, gaps and dependencies are unchanged.
`rank` limits it to one rank (a factor below 1 slows that rank down: a straggler)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import numpy as np

from engine.rules import MAX_FACTOR, Between, OneOf, Positive
from engine.simulate.whatif.selectors import SELECTORS, select
from engine.simulate.whatif.spec import Edit, SpecError, bad, register
from engine.user_regex import Regex

if TYPE_CHECKING:
    from engine.simulate.whatif.context import EditContext

# categories that select GPU tasks only: nothing is nested in a GPU task
GPU_ONLY = ("gpu", "kernel", "memcpy", "memory_bound")


def nested_in(parent: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Tasks that are in `mask` or nested (at any depth, through `parent`) in a task in `mask`."""
    out = mask.copy()
    cur = parent.copy()
    live = cur >= 0
    while live.any():  # one pass per nesting level (host call stacks are tens deep)
        idx = np.flatnonzero(live)
        out[idx] |= mask[cur[idx]]
        cur[idx] = parent[cur[idx]]
        live[idx] = cur[idx] >= 0
    return out


@register("speedup")
class Speedup(Edit):
    factor: Annotated[float, Positive(), Between(1 / MAX_FACTOR, MAX_FACTOR)]
    category: Annotated[str | None, OneOf(SELECTORS)] = None
    name: Annotated[str | None, Regex()] = None
    rank: Annotated[int | None, Between(0, 1 << 20)] = None  # only this rank's tasks (a straggler)
    inclusive: bool = False  # host spans: with all the host work nested in them

    def check(self) -> None:
        if self.category is None and self.name is None:
            raise bad("category", "give a category or a name regex (or both)")
        if self.inclusive and self.category in GPU_ONLY:
            raise bad(
                "inclusive",
                f"applies to host spans; category {self.category!r} selects GPU tasks, which nest nothing",
            )

    def apply(self, ctx: EditContext) -> None:
        g = ctx.graph
        mask = select(g, self.category, self.name, self.rank)
        if not mask.any():
            ctx.warnings.append(f"speedup: no task matches category={self.category!r} name={self.name!r}")
            return
        if self.inclusive:
            gpu = g.tasks["gpu"].to_numpy(bool)
            if not (mask & ~gpu).any():
                raise SpecError(
                    "inclusive", f"applies to host spans; every task matching name={self.name!r} is GPU work"
                )
            own = nested_in(g.tasks["parent"].to_numpy(np.int64), mask & ~gpu)
            mask = (
                mask & gpu
            ) | own  # matched GPU tasks keep the plain speed-up; GPU work launched inside is not nested
            owned = g.pt_owner >= 0
            ms = float(g.pt_d[owned][mask[g.pt_owner[owned]]].sum()) / 1e3
            ctx.report.setdefault("speedup", []).append(
                {"factor": self.factor, "inclusive": True, "tasks": int(mask.sum()), "host_ms": round(ms, 3)}
            )
        f = np.ones(g.n_tasks)
        f[mask] = 1.0 / self.factor
        g.scale_tasks(f)
