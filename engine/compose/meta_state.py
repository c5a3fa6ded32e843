"""What one shape propagation (meta_check.propagate) carries from op to op, and what it reports.

Apart from meta_check.py so that meta_outputs.py, which binds an op's outputs into the walk,
imports the walk's type from below instead of from the module that calls it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from engine.compose.meta_run import meta_dtype, meta_tensor
from engine.compose.nodes import get_slot, set_slot, slot_type
from engine.errors import TraceError


@dataclass(kw_only=True, slots=True)
class MetaReport:
    checked: int = 0
    unchecked: list[str] = field(default_factory=list)
    mismatches: list[str] = field(default_factory=list)
    batch_dims: list[int] = field(default_factory=list)
    reshaped: list[int] = field(default_factory=list)  # views run as reshape (_strided_by_scale)

    def to_dict(self) -> dict:
        return {
            "checked": self.checked,
            "unchecked": len(self.unchecked),
            "unchecked_ops": self.unchecked[:20],
            "mismatches": self.mismatches[:20],
            "reshaped": self.reshaped[:20],
        }


class MetaWalk:
    """The state of one `propagate` walk: a meta tensor per recorded tensor key, what made it,
    and the rules that scale a recorded shape (meta_check.py drives it; meta_outputs.py binds
    an op's outputs into it)."""

    def __init__(self, scale: float, batch: int | None, seeds: dict, mutate: bool, label: str | None = None):
        self.s, self.batch, self.seeds, self.mutate = scale, batch, seeds, mutate
        self.env: dict[tuple, tuple[torch.Tensor, list]] = {}
        self.inner: dict = {}  # key -> first node id producing it (not replayed)
        self.inner_storages: dict = {}  # storage -> first node id producing it
        self.params: set = set()
        self.from_replay: set = set()  # keys whose meta tensor a replayed op made (children never override)
        self.is_replay = True
        self.S: set[int] = {batch} if batch else set()
        self.label = label or f"batch scale {scale:g}"  # names the transform in error messages
        self.by_storage: dict[int, tuple] = {}  # storage id -> latest (meta tensor, recorded shape)
        self.shapes: dict[tuple, list[int]] = {}  # key -> its exact new shape (a rule beyond dim x s)
        self.report = MetaReport()
        # recorded shape -> the one new shape every tensor recorded so became (None: several)
        self.by_shape: dict[tuple, list[int] | None] = {}
        self.parent: dict[int, int | None] = {}  # node id -> ctrl_deps
        self.maker: dict[tuple, int] = {}  # key -> the node whose meta run made it last
        self.names: dict[int, str] = {}  # node id -> name
        self.maker_name: dict[tuple, str] = {}  # key -> the name of the op that made it last
        self.rounded: dict[int, int] = {}  # recorded size -> the size an op's meta run rounded it to

    def made_by_ancestor(self, key: tuple, node_id: int) -> bool:
        """Was `key` made by an op enclosing `node_id`? Its kernel's inner ops (a layer norm's
        views of its saved mean) read recycled tensor keys and must not redo its outputs."""
        m = self.maker.get(key)
        p, hops = self.parent.get(node_id), 0
        while m is not None and p is not None and hops < 64:
            if p == m:
                return True
            p, hops = self.parent.get(p), hops + 1
        return False

    def put(self, key: tuple, t: torch.Tensor, rec: list) -> None:
        self.env[key] = (t, rec)
        self.by_storage[key[1]] = (t, rec)
        seen = self.by_shape.get(tuple(rec), list(t.shape))
        self.by_shape[tuple(rec)] = seen if seen == list(t.shape) else None

    def scaled(self, d: int, node) -> int:
        v = d * self.s
        if d in self.rounded:  # an op's own run rounded this size (variable-length indices)
            return self.rounded[d]
        if abs(v - round(v)) > 1e-9:
            raise TraceError(
                f"{self.label} breaks shape at node {node['id']} ({node['name']}): "
                f"dim {d} x {self.s:g} = {v:g} is not an integer"
            )
        return round(v)

    def input_tensor(self, node, io, arg, sub) -> torch.Tensor:
        v = get_slot(io, "values", arg, sub)
        shp = list(get_slot(io, "shapes", arg, sub) or [])
        key = (v[0], v[1])
        hit = self.env.get(key)
        if hit is not None and hit[1] == shp:
            t = hit[0]
            if self.mutate and list(t.shape) != shp:
                self._write(io, arg, sub, t)
            return t
        st = get_slot(io, "strides", arg, sub) if io.get("strides") else None
        if key in self.shapes and shp:
            shp, st = list(self.shapes[key]), None
        elif key in self.seeds and shp:
            d = self.seeds[key]
            shp = shp[:d] + [self.scaled(shp[d], node)] + shp[d + 1 :]
            st = None
        elif (
            (self.batch is not None or "backward" in node["name"])
            and self.s != 1.0
            and shp
            and v[1] in self.by_storage
            and self.by_storage[v[1]][1] == shp
        ):
            # an alias never made by an op (a tensor autograd saved): same storage and recorded
            # shape as a tensor already made, so it has that tensor's new shape. Under a weight
            # split only for backward ops reading saved tensors: storage ids are recycled, and a
            # norm's internal [S] buffer would take a split [H/tp] tensor's shape where S == H
            shp = list(self.by_storage[v[1]][0].shape)
            st = None
        elif self.batch is None and "backward" in node["name"] and self.by_shape.get(tuple(shp)):
            # a weight split, a saved tensor under a recycled key: every tensor of its recorded
            # shape (a [B, heads, S, S] score) became the same shape, so this one did too
            shp, st = list(self.by_shape[tuple(shp)] or shp), None
        elif (
            (self.inner.get(key, 1 << 62) < node["id"] or self.inner_storages.get(v[1], 1 << 62) < node["id"])
            and v[1] not in self.params
            and shp
            and self.s != 1.0
        ):
            # made by a child of a replayed op (e.g. log_softmax saved inside cross_entropy):
            # scale the dims known to carry the batch
            shp = self.value_rule(shp, node)
            st = None
        t = meta_tensor(shp, st, meta_dtype(slot_type(io, arg, sub)))
        self.put(key, t, list(get_slot(io, "shapes", arg, sub) or []))
        if self.mutate and list(t.shape) != list(get_slot(io, "shapes", arg, sub) or []):
            self._write(io, arg, sub, t)
        return t

    def bind_shape(self, io, arg, sub, key: tuple, rec: list, dtype) -> None:
        """Bind an output whose new shape a rule fixed (`shapes`): dims it scaled by s carry the batch."""
        new = list(self.shapes[key])
        t = meta_tensor(new, None, dtype)
        if len(new) == len(rec):
            self.S.update(d for g, d in zip(new, rec) if g != d and d > 1 and abs(g - d * self.s) < 1e-9)
        if self.mutate and new != rec:
            self._write(io, arg, sub, t)
        self.put(key, t, rec)

    def value_rule(self, shp: list, node) -> list:
        """Scale the first dim known to carry the batch (batch dims lead; a later dim that
        happens to equal B, e.g. 10 classes at batch 10, is left alone)."""
        out = list(shp)
        if self.batch is None:  # a weight split (tensor parallel): dims equal to a split width are
            return out  # no batch; only the meta runs say which tensors change
        for i, d in enumerate(out):
            if d in self.S and (d > 1 or (i == 0 and self.batch == 1)):  # batch 1 leads as a dim of 1
                out[i] = self.scaled(d, node)
                break
        return out

    def _write(self, io, arg, sub, t: torch.Tensor) -> None:
        v = list(get_slot(io, "values", arg, sub))
        v[3] = int(t.numel())
        set_slot(io, "values", arg, sub, v)
        set_slot(io, "shapes", arg, sub, list(t.shape))
        if io.get("strides"):
            set_slot(io, "strides", arg, sub, list(t.stride()))
