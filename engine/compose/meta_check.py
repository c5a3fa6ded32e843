"""Shape propagation on meta tensors: the check behind batch scaling, dtype changes and validation.

Why meta tensors: they run every ATen op's real shape logic without memory or time, so a
batch scale that a model cannot take (a hard-coded `view`, a batch that no longer divides) is
caught at compose time, naming the node, instead of at replay time on a GPU.

`propagate(nodes, replay_ids, scale=s, batch=B, seeds=...)` walks the replayed nodes in id
order with one meta tensor per recorded tensor. Seed tensors (the model's batch inputs) get
dim 0 scaled by s; size arguments of view/reshape/expand/factory ops are rewritten (the entry
carrying the batch); every output's meta shape must equal its recorded shape with some dims
multiplied by s, and with `mutate` the recorded shapes/numels/strides are rewritten to it.
Ops without a meta kernel keep recorded shapes scaled by the dims known to carry the batch
and are counted as `unchecked`. The rules that rewrite an op's own size/slice/split arguments
live in meta_sizes.py.
"""

from __future__ import annotations

from typing import Any

import torch

from engine.compose.meta_outputs import bind_outputs, keep_recorded, sync_out_args
from engine.compose.meta_run import meta_tensor, run_on_meta
from engine.compose.meta_sizes import (
    ALL_TO_ALL,
    FACTORIES,
    RESHAPES,
    SIZE_ARG_OPS,
    SPLITS,
    base_name,
    layout_candidate,
    rescale_slice,
    rescale_split,
    rescale_splits,
    shapes_note,
    size_candidates,
    split_slice,
)
from engine.compose.meta_state import MetaReport, MetaWalk
from engine.compose.nodes import get_slot, is_defined, tensor_slots, tensors_of
from engine.errors import TraceError
from engine.replay.dispatch import resolve
from engine.replay.resolved import DispatchError
from engine.trace.categories import OP_NAME

DDP_BUCKET_TO_GRAD = "reducer::copy_bucket_to_grad"  # the record_function around DDP's bucket -> grad copy


def _follow_destination(run: MetaWalk, ins: dict, orig_shapes: list, tensors: dict, mutate: bool) -> None:
    """copy_(dst, src) where dst changed shape and src, a view of a buffer that no replayed op
    made, still has dst's recorded shape: DDP's `copy_bucket_to_grad` copies a parameter's slice
    of the flat gradient bucket (an as_strided view made inside the communication hook) into
    its gradient, so under a weight split the slice is the split gradient's shape."""
    dst, src = tensors.get(0), tensors.get(1)
    if not isinstance(dst, torch.Tensor) or not isinstance(src, torch.Tensor) or len(orig_shapes) < 2:
        return
    rec = orig_shapes[0]
    if not isinstance(rec, list) or orig_shapes[1] != rec or list(dst.shape) == rec or list(src.shape) != rec:
        return
    v = get_slot(ins, "values", 1, None)
    key = (v[0], v[1])
    if run.maker_name.get(key) != "aten::as_strided":  # only a view cut from a buffer by recorded sizes
        return
    t = meta_tensor(list(dst.shape), None, src.dtype)
    run.put(key, t, rec)
    tensors[1] = t
    if mutate:
        run._write(ins, 1, None, t)


_META_ERRORS = (RuntimeError, ValueError, TypeError, IndexError, AssertionError)  # an op refusing its inputs


def propagate(
    nodes: list[dict],
    replay_ids,
    *,
    scale: float = 1.0,
    batch: int | None = None,
    seeds: set | dict | None = None,
    mutate: bool = False,
    strict: bool = True,
    params: set | None = None,
    label: str | None = None,
    shapes: dict | None = None,
) -> MetaReport:
    """Run the replayed nodes on meta tensors (module docstring); returns a MetaReport.

    `seeds`: tensor keys (tensor_id, storage_id) whose dim 0 is scaled, or a dict key -> the dim
    to scale (tensor-parallel splits a weight's output or input dim). `shapes`: tensor key -> its
    exact new shape, for tensors whose size is no multiple of the batch (a TBE's T x B + 1
    offsets); inputs and outputs with such a key take it as is."""
    run = MetaWalk(
        scale, batch, dict(seeds) if isinstance(seeds, dict) else dict.fromkeys(seeds or (), 0), mutate, label
    )
    run.params = set(params or ())
    run.shapes = {k: list(v) for k, v in (shapes or {}).items()}
    want = {int(i) for i in replay_ids}
    run.parent = {n["id"]: n.get("ctrl_deps") for n in nodes}
    run.names = {n["id"]: n["name"] for n in nodes}
    run_ids = set(want)
    if scale != 1.0:  # children too: tensors they make (saved for backward) get real meta shapes
        run_ids |= {n["id"] for n in nodes if OP_NAME.match(n["name"]) and not n["name"].startswith("c10d::")}
    _mark_inner(run, nodes, run_ids)
    for node in nodes:
        if node["id"] in run_ids:
            _run_node(run, node, node["id"] in want, strict)
    if mutate:  # wrappers that do not run (autograd nodes, labels) show the new shapes too
        _write_wrappers(run, nodes, run_ids)
    run.report.batch_dims = sorted(run.S)
    return run.report


def _mark_inner(run: MetaWalk, nodes: list[dict], run_ids: set) -> None:
    """Where each tensor and storage is first made: by a node that does not run (`inner`: its
    outputs get scaled by rule, not by a meta run) or by any node (`inner_storages`)."""
    for node in nodes:
        runs = node["id"] in run_ids
        for io, _, _, _, v in tensors_of(node):
            if io == "out" and is_defined(v):
                if not runs:
                    run.inner.setdefault((v[0], v[1]), node["id"])
                run.inner_storages.setdefault(v[1], node["id"])


def _run_node(run: MetaWalk, node: dict, is_replay: bool, strict: bool) -> None:
    """One node on meta tensors: its inputs from the walk, its size arguments rewritten, its
    outputs bound (meta_outputs.py); an op that cannot run keeps its recorded shapes."""
    scale, mutate = run.s, run.mutate
    ins, outs = node.get("inputs") or {}, node.get("outputs") or {}
    if (
        not is_replay
        and node["name"] == "aten::as_strided"
        and all((v[0], v[1]) in run.env for io, _, _, _, v in tensors_of(node) if io == "out" and is_defined(v))
    ):
        # the view op above it (t, transpose, expand, ...) already made this tensor with the
        # new shape; its recorded sizes/strides would undo a rewritten weight or batch dim
        return
    types = list(ins.get("types", []))
    name = node["name"]
    schema = next((a.get("value") or "" for a in reversed(node.get("attrs", [])) if a.get("name") == "op_schema"), "")
    orig_shapes = [list(x) if isinstance(x, list) else x for x in ins.get("shapes", [])]
    tensors = _input_tensors(run, node, ins)
    if (
        scale != 1.0
        and is_replay
        and name.split("::")[-1].split(".")[0] == "copy_"
        and run.names.get(run.parent.get(node["id"]) or -1, "").endswith(DDP_BUCKET_TO_GRAD)
    ):
        _follow_destination(run, ins, orig_shapes, tensors, mutate)
    if not is_replay:  # a child's in-place op (resize_, as_strided_) must not edit shared tensors
        tensors = {a: _cloned(t) for a, t in tensors.items()}
    if scale != 1.0 and mutate and is_replay and base_name(name) in ALL_TO_ALL:
        rescale_splits(ins, orig_shapes, tensors)
    try:
        res = resolve(name, schema, types, "cpu")
    except DispatchError as e:
        keep_recorded(run, node, outs, f"{name}: {e}", count=is_replay)
        return
    base = name.split("::", 1)[-1].split(".", 1)[0]
    sliced = scale != 1.0 and base in ("slice", "narrow") and isinstance(tensors.get(0), torch.Tensor)
    if sliced and (run.batch is not None or not (mutate and split_slice(base, ins, orig_shapes, tensors[0], scale))):
        rescale_slice(base, ins, orig_shapes, tensors[0], mutate)
    if scale != 1.0 and base in SPLITS and isinstance(tensors.get(0), torch.Tensor):
        rescale_split(base, ins, orig_shapes, tensors[0], scale, mutate)
    size_arg = _size_arg(run, base, types, ins)
    try:
        if size_arg is None:
            out = run_on_meta(res, node, ins, types, tensors)
        else:
            out, res = _run_with_sizes(run, node, ins, res, types, tensors, orig_shapes, size_arg, is_replay)
            if out is None:  # a child no size fits: kept as recorded
                return
    except TraceError:
        raise
    except NotImplementedError as e:
        keep_recorded(run, node, outs, f"{name}: no meta kernel ({str(e).splitlines()[0][:80]})", count=is_replay)
        return
    except _META_ERRORS as e:
        changed = any(_changed(t, orig_shapes[a]) for a, t in tensors.items() if a < len(orig_shapes))
        msg = str(e).strip().splitlines()[0][:200] if str(e).strip() else type(e).__name__
        if (
            scale != 1.0
            and changed
            and strict
            and is_replay
            and "meta" not in msg.lower()
            and "data-dependent" not in msg
        ):
            raise TraceError(
                f"{run.label} breaks shape at node {node['id']} ({name}): {msg}{shapes_note(tensors)}"
            ) from None
        keep_recorded(run, node, outs, f"{name}: {msg[:100]}", count=is_replay)
        return
    run.report.checked += int(is_replay)
    run.is_replay = is_replay
    bind_outputs(run, node, res, outs, out)
    if mutate and scale != 1.0:
        sync_out_args(run, ins, outs)


def _input_tensors(run: MetaWalk, node: dict, ins: dict) -> dict[int, Any]:
    """Argument position -> its meta tensor (None where undefined), or a list of them for a
    tensor list (element by element, None where undefined)."""
    tensors: dict[int, Any] = {}
    lists: dict[int, dict] = {}
    for arg, sub in tensor_slots(ins):
        if not is_defined(get_slot(ins, "values", arg, sub)):
            if sub is None:
                tensors[arg] = None
            continue
        t = run.input_tensor(node, ins, arg, sub)
        if sub is None:
            tensors[arg] = t
        else:
            lists.setdefault(arg, {})[sub] = t
    for arg, got in lists.items():
        tensors[arg] = [got.get(j) for j in range(len(ins["values"][arg]))]
    return tensors


def _cloned(t: Any) -> Any:
    if isinstance(t, torch.Tensor):
        return t.clone()
    if isinstance(t, list):
        return [x.clone() if isinstance(x, torch.Tensor) else x for x in t]
    return t


def _size_arg(run: MetaWalk, base: str, types: list, ins: dict) -> int | None:
    """The position of the size list a scaled op's own arguments carry (view, reshape, expand,
    factories), or None.

    Under a weight split (batch None) a factory keeps its recorded sizes: a dim that equals a
    split width by coincidence (dlrm_a2a's [512, 128] all_to_all buffer of the embedding
    gradient next to a split [512, 128] weight) is no dataflow of the split; tensors that are
    (empty_like, a view of a split activation) follow their inputs' meta shapes."""
    if run.s == 1.0 or base not in SIZE_ARG_OPS or (run.batch is None and base in FACTORIES):
        return None
    for i, (t, v) in enumerate(zip(types, ins.get("values", []))):
        if isinstance(t, str) and t.startswith("GenericList[Int") and isinstance(v, list):
            return i
    return None


def _run_with_sizes(run: MetaWalk, node, ins, res, types, tensors, orig_shapes, size_arg: int, is_replay: bool):
    """Run an op whose size argument must follow the scale: each candidate size in turn (the
    input's own layout first for a reshape), a `view` the scale made strided as a reshape.
    Returns (output, resolved op); (None, op) for a child no size fits (kept as recorded);
    TraceError for a replayed op no size fits."""
    name = node["name"]
    base = name.split("::", 1)[-1].split(".", 1)[0]
    err: BaseException | None = None
    out = None
    cands = size_candidates(ins["values"][size_arg], run.S, run.batch, run.s)
    t0 = tensors.get(0)
    if base in RESHAPES and isinstance(t0, torch.Tensor) and orig_shapes and isinstance(orig_shapes[0], list):
        lay = layout_candidate(list(t0.shape), orig_shapes[0], ins["values"][size_arg], run.s, run.S)
        if list(t0.shape) == orig_shapes[0]:  # an unchanged input reshapes as recorded
            lay = list(ins["values"][size_arg])
        if lay is not None:
            cands = [lay] + [c for c in cands if c != lay]
    for cand in cands:
        try:
            out = run_on_meta(res, node, ins, types, tensors, size_arg, cand)
        except _META_ERRORS as e:
            err = e
            continue
        if run.mutate and cand != ins["values"][size_arg]:
            ins["values"][size_arg] = cand
        break
    if out is None and is_replay and base in VIEWS and _strided_by_scale(err, t0, orig_shapes):
        out, res = _as_reshape(node, ins, types, tensors, size_arg, cands, run.mutate)
        if out is not None:
            run.report.reshaped.append(int(node["id"]))
    if out is None and not is_replay:
        keep_recorded(run, node, node.get("outputs") or {}, f"{name}: {str(err).splitlines()[0][:100]}", count=False)
        return None, res
    if out is None:
        raise TraceError(
            f"{run.label} breaks shape at node {node['id']} ({name}): no batch "
            f"dim in size {ins['values'][size_arg]} fits: {str(err).splitlines()[0][:160]}"
        )
    return out, res


def _write_wrappers(run: MetaWalk, nodes: list[dict], run_ids: set) -> None:
    """Nodes that did not run show the new shapes of the tensors they name, where they recorded
    the same shape as the op that made them."""
    for node in nodes:
        if node["id"] in run_ids:
            continue
        for _, io_d, arg, sub, v in tensors_of(node):
            hit = run.env.get((v[0], v[1])) if is_defined(v) else None
            if (
                hit is not None
                and hit[1] == list(get_slot(io_d, "shapes", arg, sub) or [])
                and list(hit[0].shape) != hit[1]
            ):
                run._write(io_d, arg, sub, hit[0])


VIEWS = ("view", "_unsafe_view")
RESHAPE_SCHEMA = "aten::reshape(Tensor(a) self, SymInt[] shape) -> Tensor(a)"


def _strided_by_scale(err, t0, orig_shapes: list) -> bool:
    """Did a `view` fail only because the scaled batch made its input strided?

    At batch 1 a dim of size 1 has no meaningful stride, so a slice along another dim
    (HF's causal-LM loss: `labels[..., 1:]` of the padded [1, T + 1] labels) is contiguous and its
    `.contiguous()` copies nothing and records no op; at batch 2 the same slice is strided and the
    recorded `view(-1)` cannot take it (issue 31 item 20: GPT-2 at node 4703)."""
    return (
        isinstance(t0, torch.Tensor)
        and not t0.is_contiguous()
        and bool(orig_shapes)
        and isinstance(orig_shapes[0], list)
        and 1 in orig_shapes[0]
        and "view size is not compatible" in str(err)
    )


def _as_reshape(node, ins, types, tensors, size_arg, cands, mutate: bool):
    """Run a `view` as `aten::reshape` (a copy where a view cannot be: the copy the program's
    `.contiguous()` makes at this batch); with `mutate` the node becomes that reshape.
    Returns (output or None, the resolved op)."""
    res = resolve("aten::reshape", RESHAPE_SCHEMA, types, "cpu")
    for cand in cands:
        try:
            out = run_on_meta(res, node, ins, types, tensors, size_arg, cand)
        except (RuntimeError, ValueError, TypeError, IndexError, AssertionError):
            continue
        if mutate:
            ins["values"][size_arg] = cand
            node["name"] = "aten::reshape"
            for a in node.get("attrs", []):
                if a.get("name") == "op_schema":
                    a["value"] = RESHAPE_SCHEMA
        return out, res
    return None, res


def _changed(t, rec) -> bool:
    """Does a meta input differ from its recorded shape? Tensor lists element by element (a
    `cat` of a scaled and an unscaled piece is the scaling's fault, not a missing kernel)."""
    if isinstance(t, list):
        return isinstance(rec, list) and any(_changed(x, r) for x, r in zip(t, rec))
    return isinstance(t, torch.Tensor) and list(t.shape) != rec


__all__ = ["SIZE_ARG_OPS", "MetaReport", "propagate"]
