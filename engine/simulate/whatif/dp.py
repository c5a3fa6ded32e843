"""Data-parallel degree: collective durations from an alpha-beta ring model, by symmetry.

Model: a ring collective over N ranks takes `steps(N) * alpha + bytes * share(N) / bandwidth`,
with steps/share per kind (all_reduce: 2(N-1) steps, 2(N-1)/N of the bytes; all_gather,
reduce_scatter, all_to_all: N-1 steps, (N-1)/N; broadcast: N-1 steps, 1). Calibration on the
trace's own collectives at its world size N0 (distributedInfo): alpha is the smallest
collective's duration / steps(N0) (a latency-bound message), unless the spec gives `alpha_us`;
each collective's remaining time is its bandwidth term and scales by share(N) / share(N0)
(bytes per rank are unchanged in data parallelism). Kernel names give the kind.

Symmetry: in data parallelism every rank runs the same step, so all members of a collective
arrive together and one simulated rank stands for all N; 1,024 ranks cost the same as one.
Assumptions: ranks are identical (no stragglers), a flat ring (no tree/hierarchy), bandwidth
per link independent of N, compute per rank unchanged (same per-rank batch).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Annotated

import numpy as np

from engine.rules import MAX_US, Between
from engine.simulate.collectives import comm_mask
from engine.simulate.whatif.spec import Edit, SpecError, register

if TYPE_CHECKING:
    from engine.simulate.whatif.context import EditContext

KINDS = {
    "all_reduce": (re.compile(r"all_?reduce", re.IGNORECASE), lambda n: 2 * (n - 1), lambda n: 2 * (n - 1) / n),
    "reduce_scatter": (re.compile(r"reduce_?scatter", re.IGNORECASE), lambda n: n - 1, lambda n: (n - 1) / n),
    "all_gather": (re.compile(r"all_?gather", re.IGNORECASE), lambda n: n - 1, lambda n: (n - 1) / n),
    "all_to_all": (re.compile(r"all_?to_?all|sendrecv", re.IGNORECASE), lambda n: n - 1, lambda n: (n - 1) / n),
    "broadcast": (re.compile(r"broadcast", re.IGNORECASE), lambda n: n - 1, lambda n: 1.0),
}


def kind_of(name: str) -> str:
    for k, (rx, _, _) in KINDS.items():
        if rx.search(name):
            return k
    return "all_reduce"


@register("data_parallel")
class DataParallel(Edit):
    ranks: Annotated[int, Between(1, 1_000_000)]
    from_ranks: Annotated[int | None, Between(2, why="the trace's collectives must span ranks to calibrate")] = None
    alpha_us: Annotated[float | None, Between(0, MAX_US)] = None

    def apply(self, ctx: EditContext) -> None:
        g = ctx.graph
        cm = comm_mask(g)
        n0 = self.from_ranks or ctx.trace.meta.get("world_size")
        if not cm.any():
            raise SpecError(
                "kind", "data_parallel needs the trace's collectives (none found) to calibrate the ring model"
            )
        if not n0 or int(n0) < 2:
            raise SpecError("from_ranks", "the trace records no world size >= 2; give from_ranks")
        n0 = int(n0)
        n = self.ranks
        idx = np.flatnonzero(cm)
        names = g.tasks["name"].astype(str).to_numpy()[idx]
        kinds = [kind_of(x) for x in names]
        dur = g.pt_d[g.tasks["ep"].to_numpy()[idx]]
        steps0 = np.array([KINDS[k][1](n0) for k in kinds], np.float64)
        alpha = self.alpha_us if self.alpha_us is not None else float(np.min(dur / steps0))
        lat0 = alpha * steps0
        bw_part = np.maximum(dur - lat0, 0.0)
        steps1 = np.array([KINDS[k][1](n) if n > 1 else 0 for k in kinds], np.float64)
        share_ratio = np.array([(KINDS[k][2](n) if n > 1 else 0.0) / KINDS[k][2](n0) for k in kinds])
        new = alpha * steps1 + bw_part * share_ratio
        factor = np.ones(g.n_tasks)
        factor[idx] = np.where(dur > 0, new / np.maximum(dur, 1e-12), 1.0)
        g.scale_tasks(factor)
        ctx.report["dp"] = {
            "from_ranks": n0,
            "ranks": n,
            "alpha_us": round(alpha, 4),
            "collectives": len(idx),
            "collective_ms_before": round(float(dur.sum()) / 1000, 4),
            "collective_ms_after": round(float(new.sum()) / 1000, 4),
            "simulated_ranks": 1,
            "symmetry": "identical ranks: one simulated rank stands for all",
        }
