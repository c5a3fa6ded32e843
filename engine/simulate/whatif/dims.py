"""Batch and hidden size: change tensor dimensions, re-cost the ops through the cost model.

How: every tensor dimension equal to `size` (or to `size x m` for m in `multiples`, e.g. the
sequence length when batch and sequence are flattened together) is multiplied by `scale`: for
`batch` at most one dimension per tensor (a batch of 3 next to a q/k/v axis of 3 changes once),
for `hidden` every matching one (a hidden x hidden weight grows both ways). Each op
the ET links to a task gets work(new shapes) and work(old shapes) from its cost family
(engine/simulate/costmodel.py) and its own time is multiplied by curve(new) / curve(old):
host ops that do their own work (self time >= half their span), and the GPU kernels they launch.

Assumptions: needs an ET linked to the Kineto trace (shapes); ops without shapes or outside a
cost family (views, allocation, autograd glue, annotations) keep their time (per-call
overheads do not depend on tensor sizes); the cost curve fitted on the trace's own ops
transfers to the new sizes; memory capacity is not checked.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, ClassVar

import numpy as np
import pandas as pd

from engine.simulate.costmodel import Curve, curves_from_samples, family_of
from engine.simulate.whatif.rules import MAX_FACTOR, Between, Positive
from engine.simulate.whatif.spec import Edit, register

if TYPE_CHECKING:
    from engine.trace.model import Trace

SKIP_CATEGORIES = ("view", "allocation", "autograd", "annotation", "communication")


def op_shapes(trace: Trace, op_ids: np.ndarray) -> dict[int, tuple[list, list, float]]:
    """op id -> (input shapes, output shapes, mean itemsize), tensors in (arg, sub) order."""
    ten = trace.tensors
    if ten is None or len(ten) == 0:
        return {}
    t = ten[ten["op_id"].isin(op_ids)].sort_values(["op_id", "io", "arg", "sub"], kind="stable")
    out: dict[int, tuple[list, list, float]] = {}
    for op, grp in t.groupby("op_id", sort=False):
        io = grp["io"].astype(str).to_numpy()
        shapes = [tuple(int(x) for x in s) if s is not None else () for s in grp["shape"]]
        ins = [s for s, k in zip(shapes, io) if k == "in"]
        outs = [s for s, k in zip(shapes, io) if k == "out"]
        item = float(grp["itemsize"].mean()) if len(grp) else 4.0
        out[int(op)] = (ins, outs, item)
    return out


def scale_shape(shape: tuple[int, ...], targets: set[int], scale: float, once: bool = True) -> tuple[int, ...]:
    """Scale dimensions found in `targets`: only the first one (`once`, a batch axis) or all."""
    out = list(shape)
    for i, d in enumerate(shape):
        if d in targets:
            out[i] = max(1, round(d * scale))
            if once:
                break
    return tuple(out)


@dataclass(kw_only=True, slots=True)
class DimScale(Edit):
    once: ClassVar[bool] = True  # batch: one axis per tensor; hidden: every matching axis
    scale: Annotated[float, Positive(), Between(1 / MAX_FACTOR, MAX_FACTOR)]
    size: Annotated[int, Positive()]
    multiples: Annotated[tuple[int, ...], Positive()] = ()

    def apply(self, ctx) -> None:
        g = ctx.graph
        trace = ctx.trace
        if trace.ops is None or len(trace.ops) == 0 or "op_id" not in g.tasks:
            from engine.simulate.whatif.spec import SpecError

            raise SpecError(
                "kind", f"the {self.kind} edit needs the trace's ET (shapes); load the ET with the Kineto trace"
            )
        t = g.tasks
        op_id = t["op_id"].to_numpy(dtype=np.float64, na_value=np.nan)
        linked = np.isfinite(op_id)
        ops = trace.ops.set_index("id")
        ids = np.unique(op_id[linked]).astype(np.int64)
        cats = ops["category"].astype(str).reindex(ids).fillna("").to_numpy()
        names = ops["name"].astype(str).reindex(ids).fillna("").to_numpy()
        keep = ~np.isin(cats, SKIP_CATEGORIES)
        ids, names = ids[keep], names[keep]
        shapes = op_shapes(trace, ids)
        targets = {self.size} | {self.size * m for m in self.multiples}
        rows = []
        for oid, name in zip(ids, names):
            fam = family_of(name)
            if fam is None or int(oid) not in shapes:
                continue
            ins, outs, _item = shapes[int(oid)]
            w0 = fam.work(name, ins, outs)
            w1 = fam.work(
                name,
                [scale_shape(x, targets, self.scale, self.once) for x in ins],
                [scale_shape(x, targets, self.scale, self.once) for x in outs],
            )
            if w0 and w1:
                rows.append((int(oid), fam.name, float(w0), float(w1)))
        if not rows:
            ctx.warnings.append(f"{self.kind}: no op has a dimension equal to {sorted(targets)}; nothing changed")
            return
        work = pd.DataFrame(rows, columns=["op_id", "family", "w0", "w1"])
        # self time per task (host) / duration (GPU), then per op
        self_t = np.bincount(g.pt_owner[g.pt_owner >= 0], weights=g.pt_d[g.pt_owner >= 0], minlength=g.n_tasks)
        dur = t["dur_us"].to_numpy(np.float64)
        gpu = t["gpu"].to_numpy()
        does_work = gpu | (self_t >= 0.5 * np.maximum(dur, 1e-9))
        per = pd.DataFrame({"op_id": op_id, "t": np.where(does_work, self_t, 0.0), "gpu": gpu})[linked]
        use_gpu = bool(gpu.any())
        per = per[per["gpu"] == use_gpu] if use_gpu else per
        t_op = per.groupby("op_id")["t"].sum()
        work["t_us"] = t_op.reindex(work["op_id"].astype(float)).fillna(0.0).to_numpy()
        samples = work[work["t_us"] > 0].rename(columns={"w0": "work"})
        curves: dict[str, Curve] = curves_from_samples(samples)
        f = np.array([curves[fam](w1) / curves[fam](w0) for fam, w0, w1 in zip(work["family"], work["w0"], work["w1"])])
        factor_by_op = dict(zip(work["op_id"].tolist(), f.tolist()))
        factor = np.ones(g.n_tasks)
        sel = linked & does_work
        factor[sel] = [factor_by_op.get(int(o), 1.0) for o in op_id[sel]]
        g.scale_tasks(factor)
        changed = int((np.abs(factor - 1) > 1e-9).sum())
        ctx.report.setdefault("cost_model", {}).update({k: v.to_json() for k, v in curves.items()})
        ctx.report.setdefault(self.kind, []).append(
            {"scale": self.scale, "size": self.size, "multiples": list(self.multiples), "tasks_rescaled": changed}
        )


@register("batch")
class Batch(DimScale):
    """Scale the batch: one axis per tensor (the first whose size matches)."""


@register("hidden")
class Hidden(DimScale):
    once: ClassVar[bool] = False
