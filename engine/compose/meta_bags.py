"""Batch scaling of `nn.EmbeddingBag` lookups: offsets, indices and per-sample weights.

Why a rule of its own: a bag lookup's batch is no dim the meta run can find from the model's
inputs. Its offsets hold one entry per bag (plus the end with `include_last_offset`), and a
model-parallel DLRM pools every rank's tables over the *whole job's* batch (world size x local
batch bags, 512 on the 2-rank dlrm_a2a sample at batch 256) before an all_to_all hands each
rank its own rows. Left alone, the embedding half keeps the old batch while the dense half
doubles: the `cat` that joins them then fails at replay. Scaled here, the bags grow by the
batch scale and the indices with them at the recorded pooling factor (the lookups' work grows
with the batch, as a real batch x2 does), and the meta run carries the new shapes through the
all_to_all and the views that split the global batch into per-rank chunks.
"""

from __future__ import annotations

from engine.errors import TraceError

BAG_OPS = frozenset(("aten::embedding_bag", "aten::_embedding_bag", "aten::_embedding_bag_forward_only"))


def _key(v) -> tuple[int, int] | None:
    return (int(v[0]), int(v[1])) if isinstance(v, list) and len(v) >= 2 and isinstance(v[0], int) else None


def bag_batch_shapes(
    nodes: list[dict], want: set, scale: float, batch: int, label: str = ""
) -> dict[tuple[int, int], list[int]]:
    """Tensor key -> new shape for every replayed bag lookup whose bag count is a multiple of
    the batch: offsets [bags (+1)] and indices/per-sample weights [lookups], scaled by `scale`."""
    out: dict[tuple[int, int], list[int]] = {}
    for n in nodes:
        if n["id"] not in want or n["name"] not in BAG_OPS:
            continue
        ins = n.get("inputs") or {}
        vals, shapes = ins.get("values") or [], ins.get("shapes") or []
        if len(vals) < 3 or len(shapes) < 3:
            continue
        idx, off = shapes[1], shapes[2]
        if not (isinstance(idx, list) and isinstance(off, list) and len(idx) == 1 and len(off) == 1):
            continue  # 2-D indices: fixed-size bags, a batch dim the meta run scales on its own
        last = bool(vals[7]) if len(vals) > 7 and isinstance(vals[7], bool) else False
        bags = int(off[0]) - int(last)
        if batch < 1 or bags < batch or bags % batch:
            continue  # no multiple of the batch: not one bag per sample (and feature, or rank)
        new = bags * scale
        if abs(new - round(new)) > 1e-9:
            raise TraceError(
                f"{label or f'batch scale {scale:g}'} breaks shape at node {n['id']} ({n['name']}): "
                f"{bags} bags x {scale:g} = {new:g} is not an integer"
            )
        ko, ki = _key(vals[2]), _key(vals[1])
        if ko is not None:
            out[ko] = [round(new) + int(last)]
        lookups = [max(1, round(int(idx[0]) * scale))]
        if ki is not None:
            out[ki] = lookups
        kw = _key(vals[6]) if len(vals) > 6 else None  # per_sample_weights: one per lookup
        if kw is not None and isinstance(shapes[6], list) and shapes[6] == idx:
            out[kw] = list(lookups)
    return out


__all__ = ["BAG_OPS", "bag_batch_shapes"]
