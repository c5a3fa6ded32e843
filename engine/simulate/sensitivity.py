"""Sensitivity: the predicted step's change for a small speed-up of each kind of work.

The "what should I optimise" table: for each category (`CATEGORIES`, the what-if selectors of
engine/simulate/whatif/selectors.py) the graph's segments owned by that category's tasks are
divided by `factor` (as the `speedup` edit does) and the graph is scheduled again. Why
re-simulate rather than read the critical path: the path gives only an upper bound (a
category's time on it x (1 - 1/factor)); once the path shortens, another path can bind.

Cost: one schedule per category that has tasks (the graph is built once); categories without
tasks are skipped and reported as such.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from engine.simulate.schedule import solve
from engine.simulate.taskgraph import TaskGraph
from engine.trace.steps import step_mask

CATEGORIES = ("gpu", "cpu", "communication", "gemm", "memory_bound", "attention")
FACTOR = 1.1


def step_points(g: TaskGraph) -> tuple[np.ndarray, np.ndarray] | None:
    """(start points, end points) of the host ProfilerStep tasks, None without any: the steps
    `step_ms` measures and the critical path walks (one walk per step, from its end point)."""
    t = g.tasks
    step = step_mask(g.text("name"), host=~t["gpu"].to_numpy())
    if not step.any():
        return None
    return t["sp"].to_numpy()[step], t["ep"].to_numpy()[step]


def step_ms(g: TaskGraph, times: np.ndarray) -> float:
    """The step of a schedule: the mean host ProfilerStep span (ms), else the whole span (as the
    prediction's `predicted_iteration_ms`)."""
    steps = step_points(g)
    if steps is not None:
        sp, ep = steps
        return float(np.mean(times[ep] - times[sp])) / 1e3
    return float(np.nanmax(times) - np.nanmin(times)) / 1e3 if len(times) else 0.0


def sensitivity(
    g: TaskGraph, base_times: np.ndarray, *, factor: float = FACTOR, categories=CATEGORIES, max_rounds: int = 1_000_000
) -> dict[str, Any]:
    """{"factor", "step_ms", "categories": {name: {"tasks", "delta_ms", "delta_pct"} or
    {"tasks": 0}}}: delta < 0 is a shorter step. `g` is left as it was."""
    from engine.simulate.whatif.selectors import SELECTORS

    base = step_ms(g, base_times)
    out: dict[str, Any] = {}
    d0 = g.pt_d.copy()
    try:
        for cat in categories:
            mask = SELECTORS[cat](g)
            n = int(mask.sum())
            if not n:
                out[cat] = {"tasks": 0, "delta_ms": None, "delta_pct": None}
                continue
            f = np.ones(g.n_tasks)
            f[mask] = 1.0 / factor
            g.scale_tasks(f)
            new = step_ms(g, solve(g, max_rounds).times)
            g.pt_d[:] = d0
            delta = new - base
            out[cat] = {
                "tasks": n,
                "delta_ms": round(delta, 6),
                "delta_pct": round(100 * delta / base, 4) if base > 0 else None,
            }
    finally:
        g.pt_d[:] = d0
    return {"factor": factor, "step_ms": round(base, 6), "categories": out}
