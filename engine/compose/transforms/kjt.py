"""Batch scaling of a TorchRec KeyedJaggedTensor (KJT): the batch lives inside T x B.

A KJT is (lengths, values, weights): lengths [T * B] or [T, B] (one bag per table and sample),
values and weights sum(lengths), offsets T x B + 1. None has a dim 0 of B, so the dim-0 seeds
of `batch_seeds` never reach it, while the TBE and bag rules double the indices it feeds: at
batch x2 a TorchRec DLRM's `permute_2D_sparse_data` recorded 1536 permuted values against the
768 its unscaled lengths make (issue 31 item 20). Scaling a batch repeats each sample's run of
lookups, so lengths, values and weights all grow by the batch scale along their flat dim 0,
and a permute's `permuted_lengths_sum` argument with them. The all_to_all splits, the views
after it, the cumsum offsets and the TBE follow from the meta run.
"""

from __future__ import annotations

from engine.compose.nodes import producers, tensor_key
from engine.errors import TraceError

# permutes over (permute, lengths, values, weights, permuted_lengths_sum): the rule below
KJT_PERMUTES = frozenset(
    {"fbgemm::permute_2D_sparse_data", "fbgemm::permute_1D_sparse_data", "fbgemm::permute_sparse_data"}
)
# KJT ops with a layout of their own (row-wise bucketing, per-key selection): no rule yet
KJT_REFUSED = frozenset(
    {
        "fbgemm::permute_sparse_features",
        "fbgemm::block_bucketize_sparse_features",
        "fbgemm::keyed_jagged_index_select_dim1",
    }
)
# ops a KJT tensor passes through on its way from the model's input (same elements, new view)
_PASS = frozenset({"aten::view", "aten::reshape", "aten::_reshape_alias", "aten::flatten", "aten::to", "aten::clone"})
_LENGTHS, _VALUES, _WEIGHTS, _SUM = 1, 2, 3, 4


def _op(n: dict) -> str:
    return str(n.get("name", "")).split(".")[0]


def kjt_seeds(nodes: list[dict], replay_ids, scale: float) -> dict[tuple[int, int], int]:
    """Seeds (key -> dim 0) for the KJT tensors of every replayed permute, walked back through
    views to the model's input; rewrites each permute's `permuted_lengths_sum` by `scale` in
    place. Refuses a replayed KJT op that has no rule (`KJT_REFUSED`), naming the node."""
    want = set(replay_ids)
    producer = producers(nodes, want)
    seeds: dict[tuple[int, int], int] = {}
    for n in nodes:
        if n["id"] not in want:
            continue
        name = _op(n)
        if name in KJT_REFUSED:
            shapes = (n.get("inputs") or {}).get("shapes") or []
            raise TraceError(
                f"batch scale {scale:g} breaks shape at node {n['id']} ({n['name']}, inputs {shapes[:3]}): "
                "no rule scales this KeyedJaggedTensor op's batch (only its permutes have one)"
            )
        if name not in KJT_PERMUTES:
            continue
        vals = (n.get("inputs") or {}).get("values") or []
        for arg in (_LENGTHS, _VALUES, _WEIGHTS):
            k = tensor_key(vals[arg]) if arg < len(vals) else None
            while k is not None and k in producer and _op(producer[k]) in _PASS:
                k = tensor_key(((producer[k].get("inputs") or {}).get("values") or [None])[0])
            if k is not None and k not in producer:  # external: the model's input
                seeds[k] = 0
        if len(vals) > _SUM and isinstance(vals[_SUM], int) and not isinstance(vals[_SUM], bool):
            new = vals[_SUM] * scale
            if abs(new - round(new)) > 1e-9:
                raise TraceError(
                    f"batch scale {scale:g} breaks shape at node {n['id']} ({n['name']}): "
                    f"permuted_lengths_sum {vals[_SUM]} x {scale:g} = {new:g} is not an integer"
                )
            vals[_SUM] = round(new)
    return seeds


__all__ = ["KJT_PERMUTES", "KJT_REFUSED", "kjt_seeds"]
