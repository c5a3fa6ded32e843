"""Shapes for the batch / hidden edits from a Kineto trace alone: its cpu_ops' "Input Dims".

Why: most traces users bring are Kineto-only (no ET), and a trace recorded with
`record_shapes=True` carries every cpu_op's input shapes in `args["Input Dims"]` (the 2021
profiler's legacy `Operator` events: `args["Input dims"]`). The events
table does not keep those args (they would double its size for one edit), so this module reads
them back from the source files, matching each X event by its position in its file (`ev`,
assigned in parse order by engine.trace.kineto) and source (`src`).

A GPU kernel takes the shapes of the innermost cpu_op that encloses its launch (the task graph's
`launcher` and `parent`), as the ET path links a kernel to its op. Kineto records inputs only:
outputs are empty, and a family whose work needs the output (convolution) falls back to the
bytes of its inputs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from engine.trace.input_dims import input_dims

if TYPE_CHECKING:
    from engine.trace.model import Trace

# Op categories whose shapes say nothing about the work (shared with dims.py, which imports it:
# this module is the lower of the two)
SKIP_CATEGORIES = ("view", "allocation", "autograd", "annotation", "communication")


def task_shapes(g, events, trace: Trace) -> tuple[np.ndarray, dict[int, tuple[list, list, float]], dict[int, str]]:
    """Per task an op key (NaN: none), key -> (input shapes, [], 4.0), key -> op name.

    The key of a cpu_op with recorded dims is its task index; a GPU task takes the key of the
    innermost such cpu_op around its launch."""
    dims = input_dims(trace)
    t = g.tasks
    n = g.n_tasks
    key = np.full(n, np.nan)
    if not dims or "src" not in events or "ev" not in events:
        return key, {}, {}
    rows = t["row"].to_numpy(np.int64)
    src = events["src"].to_numpy(np.int64)[rows]
    ev = events["ev"].to_numpy(np.int64)[rows]
    gpu = t["gpu"].to_numpy(bool)
    names = t["name"].astype(str).to_numpy()
    shapes: dict[int, tuple[list, list, float]] = {}
    op_names: dict[int, str] = {}
    from engine.trace.categories import classify

    cats = t["cat"].astype(str).to_numpy()
    for i in np.flatnonzero(~gpu):
        d = dims.get((int(src[i]), int(ev[i])))
        if d is not None and cats[i] == "cpu_op" and classify(names[i]) not in SKIP_CATEGORIES:
            key[i] = i
            shapes[int(i)] = (d, [], 4.0)
            op_names[int(i)] = names[i]
    parent = t["parent"].to_numpy(np.int64)
    launcher = getattr(g, "launcher", np.full(n, -1))
    for i in np.flatnonzero(gpu):
        h = int(launcher[i]) if i < len(launcher) else -1
        for _ in range(64):  # up the host call stack to the innermost op with shapes
            if h < 0 or np.isfinite(key[h]):
                break
            h = int(parent[h])
        if h >= 0 and np.isfinite(key[h]):
            key[i] = key[h]
    return key, shapes, op_names


def infer_batch(shapes: dict[int, tuple[list, list, float]]) -> int | None:
    """The batch from activations: the most common leading dimension of inputs of >= 3 dims
    ([B, S, H] in a transformer, [B, C, H, W] in a CNN; weights are mostly 2-D and vary); else,
    for a model of 2-D activations (an MLP), of the first inputs of 2-D ops."""
    for pick in (lambda ins: [s for s in ins if len(s) >= 3], lambda ins: [s for s in ins[:1] if len(s) == 2]):
        counts: dict[int, int] = {}
        for ins, _outs, _item in shapes.values():
            for s in pick(ins):
                if s[0] > 0:
                    counts[s[0]] = counts.get(s[0], 0) + 1
        if counts:
            return max(counts.items(), key=lambda kv: (kv[1], -kv[0]))[0]
    return None


__all__ = ["infer_batch", "input_dims", "task_shapes"]
