"""Batch scaling: multiply the model's batch by s and propagate it through every replayed op.

The batch B is inferred from the trace (`engine.analysis.batch.infer_batch`, shared with the
simulator's batch what-if); `spec.batch_size` overrides the guess. Propagation and the shape check are the meta run of
`engine.compose.meta_check` (size arguments of view/reshape/expand are rewritten there).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from engine.analysis.batch import infer_batch, param_storages, parameters
from engine.compose.nodes import external_reads, get_slot, is_defined, tensors_of
from engine.compose.transforms.kjt import kjt_seeds
from engine.errors import TraceError

if TYPE_CHECKING:
    from engine.compose.benchmark import Benchmark

# aten op -> (arg, most dims or 0 for any) of operands whose dim 0 is never a batch dim: a matrix
# product's reduction operand (mm/addmm's mat2, a 1-D/2-D matmul `other`), a row-broadcast
# addmm bias, linear/conv weights and biases, a norm's affine parameters and running stats, an
# embedding table. Why: an inference or torch.compile'd ET passes weights as graph inputs that
# no optimizer touches, so `param_storages` cannot tell them from the batch, and where a feature
# size equals the batch (param_pt2: batch 4, mm [4, 4] x [4, 4]) scaling them breaks the op.
_NOT_BATCH_OPERANDS: dict[str, tuple[tuple[int, int], ...]] = {
    "mm": ((1, 0),),
    "addmm": ((0, 1), (2, 0)),
    "matmul": ((1, 2),),
    "linear": ((1, 0), (2, 0)),
    **dict.fromkeys(
        ("convolution", "_convolution", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d"),
        ((1, 0), (2, 0)),
    ),
    **dict.fromkeys(("cudnn_convolution", "mkldnn_convolution", "native_group_norm"), ((1, 0), (2, 0))),
    **dict.fromkeys(
        ("batch_norm", "native_batch_norm", "_native_batch_norm_legit", "_native_batch_norm_legit_no_training"),
        ((1, 0), (2, 0), (3, 0), (4, 0)),
    ),
    **dict.fromkeys(("layer_norm", "native_layer_norm", "group_norm"), ((2, 0), (3, 0))),
    **dict.fromkeys(("embedding", "embedding_bag", "_embedding_bag"), ((0, 0),)),
}


def _not_batch_operand(node: dict, arg: int, shape: list) -> bool:
    """Is argument `arg` of `node` an operand whose dim 0 never carries the batch (above)?"""
    name = str(node.get("name", ""))
    if not name.startswith("aten::"):
        return False
    for a, most in _NOT_BATCH_OPERANDS.get(name[6:].split(".")[0], ()):
        if a == arg and (most == 0 or len(shape) <= most):
            return True
    return False


def batch_seeds(
    nodes: list[dict], replay_ids, batch: int, params: set[int], phase_of: Callable[[dict], str] = lambda n: ""
) -> set[tuple[int, int]]:
    """External (never produced) non-parameter tensors whose dim 0 is the batch; `phase_of` a
    node's phase (ComposeContext.phase_of), "" when unknown. A tensor first read as an operand
    whose dim 0 is no batch dim (a weight, mm's reduction operand) is no seed: an external
    tensor is not produced from the batch, so its first use says what its dim 0 is."""
    want = set(replay_ids)
    seeds: set = set()
    seen: set = set()
    # when phases are known, the model's inputs are never first read by an optimizer op
    # (phase labels of backward vs forward are not reliable enough to use: param's resnet
    # computes its loss under a backward label)
    phased = any(phase_of(n) == "forward" for n in nodes if n["id"] in want)
    for n, key, arg, sub, v in external_reads(n for n in nodes if n["id"] in want):
        if key in seen or v[1] in params:
            continue
        seen.add(key)
        # tensors first passed inside a list (DDP buffer broadcast, foreach optimizers)
        # are parameters/buffers, not the model's batch
        if (
            (not phased or phase_of(n) != "optimizer")
            and sub is None
            and not _not_batch_operand(n, arg, list(get_slot(n.get("inputs") or {}, "shapes", arg, None) or []))
        ):
            seeds.add(key)
    shapes: dict = {}
    for n in nodes:
        if n["id"] in want:
            ins = n.get("inputs") or {}
            for _, _, arg, sub, v in (x for x in tensors_of(n) if x[0] == "in"):
                shp = ins["shapes"][arg] if sub is None else ins["shapes"][arg][sub]
                shapes.setdefault((v[0], v[1]), shp)
    primary = [shapes[k] for k in seeds if shapes.get(k) and shapes[k][0] == batch]
    # inputs flattened outside the step (targets of shape [B*T]) carry the batch too
    flat = {batch}
    for shp in primary:
        if len(shp) > 2:  # only token-like [B, T] inputs flatten to [B*T] targets; a product over
            continue  # image/activation dims ([B, C, H, W] -> B*C) would seed BatchNorm's [C] buffers
        prod = batch
        for d in shp[1:]:
            prod *= int(d)
            flat.add(prod)
    return {k for k in seeds if shapes.get(k) and shapes[k][0] in flat}


def prune_to_replay(nodes: list[dict], replay_ids) -> list[dict]:
    """Drop descendants of replayed nodes: after a shape rewrite they would be stale."""
    want = set(replay_ids)
    drop: set = set()
    for n in nodes:  # id order: parents precede children
        p = n.get("ctrl_deps")
        if p in want or p in drop:
            drop.add(n["id"])
    return [n for n in nodes if n["id"] not in drop]


_EMB_BWD = ("aten::embedding_backward", "aten::embedding_dense_backward")


def _unbroadcast_embedding_grads(nodes: list[dict], replay_ids) -> list[int]:
    """Embedding backwards whose gradient no longer matches their indices after scaling.

    Why: at batch 1 a tensor broadcast over the batch (GPT-2's position embeddings, [1, T, D]
    added to [B, T, D]) gets the very same gradient tensor as the batch branch: autograd records
    no reduction because the shapes are equal. Scaled, that shared gradient carries the new batch
    while the position ids keep batch 1, and the op fails ("shape '[64, 128]' is invalid for input
    of size 16384"). Such an op gets a fresh gradient of shape indices.shape + [D] (the missing
    sum over the batch is a small reduction next to the lookups)."""
    want = set(replay_ids)
    top = max((max(v[0], v[1]) for n in nodes for _, _, _, _, v in tensors_of(n) if is_defined(v)), default=0)
    fixed = []
    for n in nodes:
        if n["id"] not in want or n["name"] not in _EMB_BWD:
            continue
        ins = n.get("inputs") or {}
        try:
            g, idx = ins["values"][0], ins["values"][1]
            g_shape, idx_shape = list(ins["shapes"][0]), list(ins["shapes"][1])
        except (KeyError, IndexError, TypeError):
            continue
        if not (is_defined(g) and is_defined(idx) and g_shape):
            continue
        want_shape = [*idx_shape, g_shape[-1]]
        if int(np.prod(g_shape)) == int(np.prod(want_shape)):
            continue
        top += 2
        ins["values"][0] = [top - 1, top, 0, int(np.prod(want_shape)), *g[4:]]
        ins["shapes"][0] = want_shape
        if ins.get("strides"):
            ins["strides"][0] = [int(np.prod(want_shape[i + 1 :])) for i in range(len(want_shape))]
        fixed.append(int(n["id"]))
    return fixed


def scale_batch(bench: Benchmark, rank: int, scale: float, batch: int, params: set[int] | None = None) -> dict:
    """Scale the batch of `bench.ranks[rank]` in place; returns the meta report as a dict."""
    nodes = bench.ranks[rank]
    if params is None:
        params = set(bench.meta.get("param_storages", ()))
    new_b = batch * scale
    if abs(new_b - round(new_b)) > 1e-9 or round(new_b) < 1:
        raise TraceError(f"batch scale {scale:g} gives a non-integer batch: {batch} x {scale:g} = {new_b:g}")
    seeds: dict = dict.fromkeys(batch_seeds(nodes, bench.replay_ids[rank], batch, params, bench.context.phase_of), 0)
    if not seeds:
        raise TraceError(f"batch scale {scale:g}: no input tensor has the batch size {batch} as dim 0")
    from engine.compose.meta_bags import bag_batch_shapes
    from engine.compose.meta_check import propagate  # torch: only scaling needs it, not infer_batch
    from engine.compose.shard.tbe import tbe_batch_shapes

    # a TorchRec KJT carries the batch inside T x B (transforms/kjt.py)
    seeds.update(kjt_seeds(nodes, bench.replay_ids[rank], scale))
    want = set(bench.replay_ids[rank])
    shapes = {**bag_batch_shapes(nodes, want, scale, batch), **tbe_batch_shapes(nodes, want, scale)}
    rep = propagate(
        nodes,
        bench.replay_ids[rank],
        scale=scale,
        batch=batch,
        seeds=seeds,
        mutate=True,
        params=params,
        shapes=shapes,
    )
    bench.ranks[rank] = prune_to_replay(nodes, bench.replay_ids[rank])
    unbroadcast = _unbroadcast_embedding_grads(bench.ranks[rank], bench.replay_ids[rank])
    if unbroadcast:
        bench.meta["warnings"].append(
            f"batch scale: {len(unbroadcast)} embedding backward(s) read a gradient the batch-{batch} trace "
            f"shared with a batch-broadcast input (nodes {', '.join(map(str, unbroadcast[:5]))}); they get "
            "a gradient of their own lookups' shape (the batch reduction was not recorded)"
        )
    info = {
        "kind": "batch_scale",
        "scale": scale,
        "batch": batch,
        "new_batch": round(new_b),
        "seeds": len(seeds),
        **rep.to_dict(),
    }
    bench.meta["transforms"].append(info)
    if rep.reshaped:
        bench.meta["warnings"].append(
            f"batch scale: {len(rep.reshaped)} view(s) of a tensor that was contiguous only at batch {batch} "
            f"(a dim of 1 has no stride) run as aten::reshape, the copy `.contiguous()` makes at batch "
            f"{round(new_b)} (nodes {', '.join(map(str, rep.reshaped[:5]))})"
        )
    if rep.unchecked:
        bench.meta["warnings"].append(
            f"batch scale: {len(rep.unchecked)} op(s) had no meta check (e.g. {rep.unchecked[0]})"
        )
    return info


__all__ = [
    "batch_seeds",
    "infer_batch",
    "param_storages",
    "parameters",
    "prune_to_replay",
    "scale_batch",
]
