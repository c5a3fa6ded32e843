"""Data-parallel sharding: every rank runs the model on B/N samples and all-reduces gradients.

Why buckets: DDP does not all-reduce each gradient; it packs parameters, in reverse
registration order, into ~25 MB buckets and issues one all_reduce per bucket as the backward
pass fills them. The per-rank ET reproduces that: the batch is scaled by 1/N (the same
batch-scaling transform, meta-checked), and one `c10d::allreduce_` node per bucket (with the
bucket's element count and bytes) is inserted after the last backward op.
"""

from __future__ import annotations

import copy
import math
from typing import TYPE_CHECKING

from engine.compose.nodes import label_node, make_attrs, set_attr
from engine.errors import TraceError

if TYPE_CHECKING:
    from engine.compose.benchmark import Benchmark
    from engine.compose.shard.kinds import DpSharding

BUCKET_CAP_BYTES = 25 * 1024 * 1024
ALLREDUCE_SCHEMA = (
    "c10d::allreduce_(Tensor[] tensors, __torch__.torch.classes.c10d.ProcessGroup process_group, "
    "__torch__.torch.classes.c10d.ReduceOp reduce_op, Tensor? sparse_indices, int timeout) -> "
    "(Tensor[], __torch__.torch.classes.c10d.Work)"
)


def buckets(param_bytes: list[tuple[int, int, str]], cap: int = BUCKET_CAP_BYTES) -> list[list[tuple[int, int, str]]]:
    """DDP-style buckets over (numel, itemsize, dtype) params in reverse order."""
    out: list[list] = []
    cur: list = []
    size = 0
    for p in reversed(param_bytes):
        nb = p[0] * p[1]
        if cur and (size + nb > cap or p[2] != cur[0][2]):
            out.append(cur)
            cur, size = [], 0
        cur.append(p)
        size += nb
    if cur:
        out.append(cur)
    return out


def allreduce_node(
    node_id: int, ids: list[int], shape: list[int], itemsize: int, et_dtype: str, pg_size: int, **extra: int
) -> dict:
    """A `c10d::allreduce_` ET node over one tensor (`ids` = [tensor_id, storage_id]) of `shape`,
    with comm_type / pg_size / comm_bytes attributes (and `extra` int attributes) for the
    distributed replay and for simulators that read them (chakra)."""
    numel = math.prod(int(d) for d in shape)
    ts = f"Tensor({et_dtype})"
    strides = [1] * len(shape)
    for k in range(len(shape) - 2, -1, -1):
        strides[k] = strides[k + 1] * int(shape[k + 1])
    t = [ids[0], ids[1], 0, numel, itemsize, "cpu"]
    node = {
        "id": node_id,
        "name": "c10d::allreduce_",
        "ctrl_deps": -1,
        "inputs": {
            "values": [[t], "default_pg", 0, "<None>", 1800000],
            "shapes": [[list(shape)], [], [], [], []],
            "types": [f"GenericList[{ts}]", "String", "Int", "None", "Int"],
            "strides": [[strides], [], [], [], []],
        },
        "outputs": {
            "values": [[t]],
            "shapes": [[list(shape)]],
            "types": [f"GenericList[{ts}]"],
            "strides": [[strides]],
        },
        "attrs": make_attrs(op_schema=ALLREDUCE_SCHEMA),
    }
    set_attr(node, "comm_type", "all_reduce", "string")
    set_attr(node, "pg_size", pg_size, "int64")
    set_attr(node, "comm_bytes", numel * itemsize, "int64")
    for attr, value in extra.items():
        set_attr(node, attr, value, "int64")
    return node


def renumber(nodes: list[dict], replay_ids: list[int]) -> tuple[list[dict], list[int]]:
    """Sequential ids in list order (the replay order), parents and replay ids remapped."""
    new = {n["id"]: k + 1 for k, n in enumerate(nodes)}
    for n in nodes:
        p = n["ctrl_deps"]
        n["id"] = new[n["id"]]
        n["ctrl_deps"] = new.get(p, p)
    return nodes, sorted(new[i] for i in replay_ids if i in new)


def shard_dp(bench: Benchmark, spec: DpSharding) -> dict:
    from engine.compose.transforms.scale import scale_batch

    n = int(spec.degree)
    batch = int(bench.meta["batch_size"])
    scale = bench.spec.batch_scale
    global_batch = round(batch * scale)
    if global_batch % n:
        raise TraceError(
            f"dp degree {n} does not divide the batch {global_batch}; "
            f"set batch_scale to a multiple of {n} / {batch} (each rank runs batch / degree samples)"
        )
    # per-rank batch = traced batch x batch_scale / N, in one scaling step (compose leaves
    # batch_scale to us): with batch_scale == N every rank keeps the traced shapes, which is what
    # makes DP of a batch-1 trace possible
    per_rank = scale / n
    if abs(per_rank - 1.0) > 1e-12:
        scale_batch(bench, 0, per_rank, batch)
    params = bench.context.params
    if not params:
        raise TraceError("dp sharding found no parameters (tensors the optimizer updates) in the trace")
    bks = buckets(params)
    nodes = bench.ranks[0]
    replay = set(bench.replay_ids[0])
    phase_of = bench.context.phase_of
    last_bwd = max(
        (k for k, nd in enumerate(nodes) if nd["id"] in replay and phase_of(nd) == "backward"), default=len(nodes) - 1
    )
    tid = (
        max(
            max(v[0], v[1])
            for nd in nodes
            for io in ("inputs", "outputs")
            for v in (nd.get(io) or {}).get("values", [])
            if isinstance(v, list) and len(v) >= 5 and all(isinstance(x, int) for x in v[:2])
        )
        + 1
    )
    new_nodes, new_ids = [], []
    label = label_node(-1, 1, "## DDP gradient all_reduce ##")
    new_nodes.append(label)
    for i, b in enumerate(bks):
        node = allreduce_node(
            -2 - i, [tid + 2 * i, tid + 2 * i + 1], [sum(p[0] for p in b)], b[0][1], b[0][2], n, bucket=i
        )
        new_nodes.append(node)
        new_ids.append(node["id"])
    merged = nodes[: last_bwd + 1] + new_nodes + nodes[last_bwd + 1 :]
    merged, rids = renumber(merged, list(bench.replay_ids[0]) + new_ids)
    bench.ranks = {r: (merged if r == 0 else copy.deepcopy(merged)) for r in range(n)}
    bench.replay_ids = {r: list(rids) for r in range(n)}
    info = {
        "kind": "dp",
        "degree": n,
        "global_batch": global_batch,
        "per_rank_batch": global_batch // n,
        "params": len(params),
        "grad_bytes": sum(p[0] * p[1] for p in params),
        "buckets": [{"params": len(b), "bytes": sum(p[0] * p[1] for p in b)} for b in bks],
        "bucket_cap_bytes": BUCKET_CAP_BYTES,
    }
    bench.meta["sharding"] = info
    return info


__all__ = ["allreduce_node", "buckets", "renumber", "shard_dp"]
