"""Which host op launched each GPU task, and that op's recorded input dims (kernel_times, device).

A GPU task's launching runtime call is the task graph's `launcher` (same correlation id); the ops
enclosing that call on its thread are its `parent` chain. Two views of that chain:
- `top_ops`: the outermost operator around the launch (`aten::linear`, not the `aten::addmm` inside
  it; annotations such as ProfilerStep, nn.Module or DataLoader spans are skipped). Why the
  outermost: two vendors' libraries reach the same top op through different inner ops (flash vs
  CK attention, cuBLAS vs hipBLASLt paths), so the top op is what two traces of one program share.
- `work_ops`: per GPU task, the innermost enclosing op whose recorded shapes give its work
  (FLOPs for GEMM/attention, bytes otherwise) through the cost model's families.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from engine.trace.categories import classify
from engine.trace.input_dims import Shape, input_dims

if TYPE_CHECKING:
    from engine.simulate.taskgraph import TaskGraph
    from engine.trace.model import Trace

MAX_DEPTH = 64  # host call stacks deeper than this are cut (none seen in real traces)


def op_mask(g: TaskGraph) -> np.ndarray:
    """Host tasks that are operators (cpu_op rows that are not annotations)."""
    names = g.text("name")
    cats = g.text("cat")
    return cats.where(lambda c: c == "cpu_op") & names.where(lambda s: classify(s) != "annotation")


def top_ops(g: TaskGraph) -> np.ndarray:
    """Per task, the outermost operator enclosing its launch (GPU tasks) or itself (host); -1: none."""
    n = g.n_tasks
    parent = g.tasks["parent"].to_numpy(np.int64)
    is_op = op_mask(g)
    gpu = g.tasks["gpu"].to_numpy(bool)
    start = np.where(gpu, g.launcher[:n] if len(g.launcher) >= n else -1, np.arange(n))
    top = np.full(n, -1, np.int64)
    cur = start.copy()
    for _ in range(MAX_DEPTH):
        live = cur >= 0
        if not live.any():
            break
        idx = np.flatnonzero(live)
        hit = is_op[cur[idx]]
        top[idx[hit]] = cur[idx[hit]]
        cur[idx] = parent[cur[idx]]
    return top


def task_dims(g: TaskGraph, events, trace: Trace) -> dict[int, list[Shape]]:
    """Host task -> its recorded "Input Dims" (tasks of cpu_ops that recorded them)."""
    dims = input_dims(trace)
    if not dims or "src" not in events or "ev" not in events:
        return {}
    rows = g.tasks["row"].to_numpy(np.int64)
    src = events["src"].to_numpy(np.int64)[rows]
    ev = events["ev"].to_numpy(np.int64)[rows]
    out: dict[int, list[Shape]] = {}
    for i in np.flatnonzero(~g.tasks["gpu"].to_numpy(bool)):
        d = dims.get((int(src[i]), int(ev[i])))
        if d is not None:
            out[int(i)] = d
    return out


def chain(g: TaskGraph, task: int):
    """The host ops around GPU task `task`'s launch, innermost first."""
    h = int(g.launcher[task]) if task < len(g.launcher) else -1
    parent = g.tasks["parent"].to_numpy(np.int64)
    for _ in range(MAX_DEPTH):
        if h < 0:
            return
        yield h
        h = int(parent[h])


__all__ = ["chain", "op_mask", "task_dims", "top_ops"]
