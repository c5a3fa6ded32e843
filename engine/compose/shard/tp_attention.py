"""Megatron-style tensor parallelism of attention blocks: QKV column-parallel, out-projection
row-parallel, heads split across ranks.

Why a walk back from the out-projection: an attention block is recognised by its data flow, not
by module names (an ET may carry none). The out-projection's input is reached from the QKV
projection(s) through head-parallel ops only: reshapes into heads, split/chunk of a fused QKV,
transposes, the score and context matmuls (`matmul`/`bmm`/`baddbmm`, heads being a batch dim),
softmax, masking, dropout and the fused SDPA/flash kernels. Each rank then holds its heads' q, k
and v columns (a fused [H, 3H] Conv1D weight becomes [H, 3H/tp]; the split sizes and head counts
in views follow through the meta propagation) and the out-projection's input rows, so one
all_reduce per direction suffices, as for the MLP pair. A walk that meets anything else (a norm,
a residual through another linear) leaves the block replicated and says which op stopped it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from engine.compose.nodes import is_defined, tensors_of

_HEAD_PARALLEL = frozenset(
    f"aten::{x}"
    for x in """view reshape _unsafe_view _reshape_alias permute transpose t contiguous clone
split split_with_sizes chunk unbind select slice narrow expand expand_as unsqueeze squeeze
matmul bmm baddbmm softmax _softmax log_softmax div div_ mul mul_ add add_ sub rsub masked_fill
masked_fill_ where dropout native_dropout to _to_copy type_as copy_ detach alias lift_fresh
full full_like zeros zeros_like ones ones_like empty empty_like arange scalar_tensor tril triu
lt le gt ge eq ne logical_not logical_and bitwise_not bitwise_and __and__ __or__ fill_
scaled_dot_product_attention _scaled_dot_product_flash_attention
_scaled_dot_product_flash_attention_for_cpu _scaled_dot_product_efficient_attention
_scaled_dot_product_cudnn_attention _flash_attention_forward _efficient_attention_forward
rotary_embedding cat stack neg cos sin""".split()
)


def _is_core(name: str) -> bool:
    """Ops that compute heads' scores or contexts: a walk that passes none is no attention."""
    base = name.split("::", 1)[-1].split(".", 1)[0]
    return base in ("matmul", "bmm", "baddbmm") or "attention" in name or "flash" in name


def _allowed(name: str) -> bool:
    return name in _HEAD_PARALLEL or "attention" in name or "flash" in name


@dataclass(kw_only=True, slots=True)
class Walk:
    columns: list = field(default_factory=list)  # Linear objects reached (QKV projections)
    core: list[str] = field(default_factory=list)  # attention ops passed (score/context matmuls, SDPA)
    blocked: str | None = None  # "op (node id)" that stopped the walk


def producers_with_lists(nodes: list[dict], replay: set[int]) -> dict[tuple, dict]:
    """Tensor key -> the replayed op that made it, list outputs included (`split`'s q, k, v)."""
    made = {}
    for n in nodes:
        if n["id"] in replay:
            for io, _, _, _, v in tensors_of(n):
                if io == "out" and is_defined(v):
                    made[(v[0], v[1])] = n
    return made


def walk_back(row, by_output: dict, made: dict[tuple, dict], limit: int = 400) -> Walk:
    """Walk from the row linear's input back to the linears it reads through head-parallel ops."""
    w = Walk()
    stack: list[tuple] = [row.input]
    seen: set[tuple] = set()
    while stack and len(seen) < limit:
        key = stack.pop()
        if key in seen:
            continue
        seen.add(key)
        col = by_output.get(key)
        if col is not None and col is not row:
            if col not in w.columns:
                w.columns.append(col)
            continue
        prod = made.get(key)
        if prod is None:
            continue  # read from outside the replayed ops (a mask buffer, an input)
        if not _allowed(prod["name"]):
            w.blocked = w.blocked or f"{prod['name']} (node {prod['id']})"
            continue
        if _is_core(prod["name"]) and prod["name"] not in w.core:
            w.core.append(prod["name"])
        for io, _, _, _, v in tensors_of(prod):
            if io == "in" and is_defined(v):
                stack.append((v[0], v[1]))
    return w


def attention_blocks(linears: list, made: dict[tuple, dict], used: set[int], n: int) -> tuple[list, list[dict]]:
    """[(columns, row, walk)] for attention blocks that split by heads, and the linears left
    whole with why (one dict each, for benchmark.json)."""
    by_output = {lin.output: lin for lin in linears if lin.output is not None}
    blocks, whole = [], []
    taken = set(used)
    for row in linears:
        if row.node_id in taken:
            continue
        w = walk_back(row, by_output, made)
        cols = [c for c in w.columns if c.node_id not in taken]
        why = None
        if not w.core:
            why = "its input comes through no attention op (score/context matmul, SDPA)"
        elif not cols or len(cols) != len(w.columns):
            why = "no unsplit q/k/v projection feeds it"
        elif w.blocked:
            why = f"the path from q/k/v passes {w.blocked}, which is not head-parallel"
        elif row.shape[1] % n or any(c.shape[0] % n for c in cols):
            why = f"tp degree {n} does not divide its width"
        if why is not None:
            continue
        blocks.append((sorted(cols, key=lambda c: c.node_id), row, w))
        taken |= {row.node_id, *(c.node_id for c in cols)}
    for lin in linears:
        if lin.node_id not in taken:
            whole.append(
                {
                    "node": lin.node_id,
                    "weight": list(lin.shape),
                    "split": None,
                    "why": "pairs with no column/row partner (a classifier or projection whose neighbours "
                    "are not elementwise or head-parallel): replicated",
                }
            )
    return blocks, whole


__all__ = ["attention_blocks", "producers_with_lists", "walk_back"]
