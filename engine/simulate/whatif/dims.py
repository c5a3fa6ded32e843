"""Batch and hidden size: change tensor dimensions, re-cost the ops through the cost model.

How: every tensor dimension equal to `size` (or to `size x m` for m in `multiples`, e.g. the
sequence length when batch and sequence are flattened together) is multiplied by `scale`: for
`batch` at most one dimension per tensor (a batch of 3 next to a q/k/v axis of 3 changes once),
for `hidden` every matching one (a hidden x hidden weight grows both ways). Each op
the ET links to a task gets work(new shapes) and work(old shapes) from its cost family
(engine/simulate/costmodel.py) and its own time is multiplied by curve(new) / curve(old):
host ops that do their own work (self time >= half their span), and the GPU kernels they launch.

Shapes come from an ET linked to the Kineto trace or, without one, from the Kineto cpu_ops'
recorded "Input Dims" (kineto_shapes.py).

Assumptions: needs shapes (an ET, or a Kineto trace recorded with record_shapes); ops without shapes or outside a
cost family (views, allocation, autograd glue, annotations) keep their time (per-call
overheads do not depend on tensor sizes); the cost curve fitted on the trace's own ops
transfers to the new sizes; memory capacity is not checked.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Annotated, ClassVar

import numpy as np
import pandas as pd

from engine.rules import MAX_FACTOR, Between, Positive
from engine.simulate.costmodel import FAMILIES, Curve, curves_from_samples, family_of
from engine.simulate.whatif.kineto_shapes import SKIP_CATEGORIES
from engine.simulate.whatif.spec import Edit, register

if TYPE_CHECKING:
    from engine.simulate.whatif.context import EditContext
    from engine.trace.model import Trace

_RANK_KEY = 1 << 40  # op ids restart on every rank: (rank, op id) as one integer key


def _key(df: pd.DataFrame, col: str) -> np.ndarray:
    ids = df[col].to_numpy(dtype=np.float64, na_value=np.nan)
    rank = df["rank"].to_numpy(dtype=np.float64, na_value=0.0) if "rank" in df else np.zeros(len(df))
    return rank * _RANK_KEY + ids


def op_shapes(trace: Trace, op_ids: np.ndarray) -> dict[int, tuple[list, list, float]]:
    """(rank, op id) key -> (input shapes, output shapes, mean itemsize), tensors in (arg, sub) order."""
    ten = trace.tensors
    if ten is None or len(ten) == 0:
        return {}
    ten = ten.assign(_key=_key(ten, "op_id"))
    t = ten[ten["_key"].isin(op_ids)].sort_values(["_key", "io", "arg", "sub"], kind="stable")
    out: dict[int, tuple[list, list, float]] = {}
    for op, grp in t.groupby("_key", sort=False):
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
    size: Annotated[int | None, Positive()] = None  # batch: inferred from the trace when left out
    multiples: Annotated[tuple[int, ...], Positive()] = ()

    def apply(self, ctx: EditContext) -> None:
        g = ctx.graph
        trace = ctx.trace
        if trace.ops is None or len(trace.ops) == 0 or "op_id" not in g.tasks:
            op_id, ids, names, shapes = self._from_kineto(ctx)
            from_kineto = True
        else:
            op_id, ids, names, shapes = self._from_et(g, trace)
            from_kineto = False
        t = g.tasks
        linked = np.isfinite(op_id)
        if self.size is not None:
            size = self.size
        elif from_kineto:
            size = self._infer_kineto(shapes)
        else:
            size = self._infer(trace)
        targets = {size} | {size * m for m in self.multiples}
        rows = []
        has_dim = False  # some tensor has a dimension the edit scales
        for oid, name in zip(ids, names):
            fam = family_of(name)
            if fam is None or int(oid) not in shapes:
                continue
            ins, outs, _item = shapes[int(oid)]
            ins1 = [scale_shape(x, targets, self.scale, self.once) for x in ins]
            outs1 = [scale_shape(x, targets, self.scale, self.once) for x in outs]
            has_dim = has_dim or ins1 != ins or outs1 != outs
            w0, w1 = fam.work(name, ins, outs), fam.work(name, ins1, outs1)
            if from_kineto and not (w0 and w1):  # no outputs recorded (convolution): input bytes
                fam = FAMILIES["memory"]
                w0, w1 = fam.work(name, ins, outs), fam.work(name, ins1, outs1)
            if w0 and w1:
                rows.append((int(oid), fam.name, float(w0), float(w1)))
        if not has_dim and self.size is not None:  # as Compose refuses a batch no input has
            from engine.simulate.whatif.spec import SpecError

            raise SpecError(
                "size",
                f"no tensor has a dimension equal to {self.size} (the current {self.kind} size given); "
                "leave it out to infer it from the trace",
            )
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
            {
                "scale": self.scale,
                "size": size,
                "inferred": self.size is None,
                "shapes_from": "Kineto Input Dims" if from_kineto else "ET",
                "multiples": list(self.multiples),
                "tasks_rescaled": changed,
            }
        )
        if self.size is None:
            how = (
                "the most common leading dim of the recorded >= 3-D inputs"
                if from_kineto
                else "dim 0 of the model's first input"
            )
            ctx.warnings.append(f"{self.kind}: no size given; inferred {size} from the trace ({how})")

    def _from_et(self, g, trace) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict]:
        """Per task its (rank, op id) key; the linked ops that can be re-costed, their names, shapes."""
        op_id = _key(g.tasks, "op_id")  # a multi-rank set repeats op ids: key them by rank
        linked = np.isfinite(op_id)
        ops = trace.ops.assign(_key=_key(trace.ops, "id").astype(np.int64)).drop_duplicates("_key").set_index("_key")
        ids = np.unique(op_id[linked]).astype(np.int64)
        cats = ops["category"].astype(str).reindex(ids).fillna("").to_numpy()
        names = ops["name"].astype(str).reindex(ids).fillna("").to_numpy()
        keep = ~np.isin(cats, SKIP_CATEGORIES)
        ids, names = ids[keep], names[keep]
        return op_id, ids, names, op_shapes(trace, ids)

    def _from_kineto(self, ctx) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict]:
        """No ET: the cpu_ops' recorded Input Dims (kineto_shapes.py), else a one-line refusal."""
        from engine.simulate.whatif.kineto_shapes import task_shapes
        from engine.simulate.whatif.spec import SpecError

        op_id, shapes, op_names = task_shapes(ctx.graph, ctx.events, ctx.trace)
        if not shapes:
            raise SpecError(
                "kind",
                f"the {self.kind} edit needs shapes: load the trace's ET with it, or record the Kineto "
                "trace with record_shapes=True (its cpu_ops carry no 'Input Dims')",
            )
        ids = np.array(sorted(shapes), dtype=np.int64)
        names = np.array([op_names[int(i)] for i in ids], dtype=object)
        return op_id, ids, names, shapes

    def _infer_kineto(self, shapes: dict) -> int:
        from engine.simulate.whatif.kineto_shapes import infer_batch
        from engine.simulate.whatif.spec import SpecError

        if self.kind != "batch":
            raise SpecError("size", f"the {self.kind} edit needs a size (the dimension to scale)")
        b = infer_batch(shapes)
        if b is None:
            raise SpecError(
                "size", "could not infer the batch: no recorded input has 2 or more dimensions; give a size"
            )
        return b

    def _infer(self, trace) -> int:
        """The batch a user does not know: dim 0 of the forward pass's first non-parameter input,
        as batch scaling in compose infers it (`engine.analysis.batch.infer_batch`)."""
        from engine.simulate.whatif.spec import SpecError

        if self.kind != "batch":
            raise SpecError("size", f"the {self.kind} edit needs a size (the dimension to scale)")
        from engine.analysis.batch import infer_batch
        from engine.errors import TraceError

        ops, ten = trace.ops, trace.tensors
        if "rank" in ops and ops["rank"].nunique() > 1:  # ranks of one SPMD job share the batch
            r0 = ops["rank"].min()
            ops, ten = ops[ops["rank"] == r0], ten[ten["rank"] == r0] if "rank" in ten else ten
            trace = replace(trace, ops=ops, tensors=ten)
        try:
            return infer_batch(trace)
        except (TraceError, KeyError, ValueError, IndexError, TypeError, AttributeError) as e:
            raise SpecError(
                "size", f"could not infer the batch from the trace ({str(e).split(': ')[-1]}); give a size"
            ) from None


@register("batch")
class Batch(DimScale):
    """Scale the batch: one axis per tensor (the first whose size matches)."""


@register("hidden")
class Hidden(DimScale):
    once: ClassVar[bool] = False
