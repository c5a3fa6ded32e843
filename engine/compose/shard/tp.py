"""Tensor-parallel (Megatron-style) splitting of linear layers across N ranks.

Why pairs: Megatron-LM splits an MLP's first linear by output features (column parallel) and the
second by input features (row parallel), so the activation between them stays sharded and one
all_reduce per pair and direction suffices: after the row-parallel forward matmul (partial sums
of the output) and after the column-parallel layer's input-gradient matmul in backward. Linears
pair when the second reads the first's output through elementwise ops only (an MLP block:
d -> 4d -> act -> d); layers that do not pair (attention projections, the classifier) stay
replicated.

How shapes follow: the weights, biases and their optimizer state are the seeds of the same
meta-tensor propagation that batch scaling uses (`engine.compose.meta_check`), with the split
dim per tensor, so every activation, gradient and optimizer op gets its per-rank shape and a
model that cannot be split this way is refused at compose time, naming the node.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from engine.compose.meta_check import propagate
from engine.compose.meta_sizes import ALL_TO_ALL
from engine.compose.nodes import attr, get_slot, is_defined, tensors_of
from engine.compose.shard.dp import allreduce_node, renumber
from engine.compose.shard.tp_attention import attention_blocks, producers_with_lists
from engine.compose.transforms.scale import prune_to_replay
from engine.errors import TraceError

if TYPE_CHECKING:
    from engine.compose.benchmark import Benchmark
    from engine.compose.shard.kinds import TpSharding

PhaseOf = Callable[[dict], str]  # a node's phase in its source (ComposeContext.phase_of)

_LINEAR_OPS = ("aten::linear",)
# addmm(bias, x, W) with a parameter W of shape [in, out]: GPT-2's Conv1D (and other libraries'
# hand-written linears) never call aten::linear
_ADDMM_OPS = ("aten::addmm",)
# ops an activation may pass through between a column- and a row-parallel layer: elementwise
# math on the hidden activation (GPT-2's gelu_new is mul/pow/add/tanh) and reshapes of it
_PASS_THROUGH = frozenset(
    f"aten::{x}"
    for x in (
        "mul",
        "mul_",
        "add",
        "add_",
        "sub",
        "div",
        "pow",
        "tanh_",
        "view",
        "reshape",
        "_unsafe_view",
        "gelu_",
        "erf",
        "exp",
        "neg",
        "square",
    )
)
_ELEMENTWISE = frozenset(
    f"aten::{x}"
    for x in (
        "relu",
        "relu_",
        "gelu",
        "silu",
        "silu_",
        "tanh",
        "sigmoid",
        "dropout",
        "native_dropout",
        "clone",
        "contiguous",
        "leaky_relu",
        "elu",
        "hardswish",
        "mish",
    )
)


@dataclass(kw_only=True, slots=True)
class Linear:
    node_id: int
    weight: tuple[int, int]  # (tensor_id, storage_id)
    bias: tuple[int, int] | None
    shape: tuple[int, int]  # (out_features, in_features)
    input_shape: list[int]
    input: tuple[int, int]
    output: tuple[int, int] | None
    out_dim: int = 0  # weight dim holding the output features (linear: 0; addmm's [in, out] weight: 1)


def _linears(nodes: list[dict], replay: set[int], params: set[int], phase_of: PhaseOf) -> list[Linear]:
    out = []
    for n in nodes:
        if n["id"] not in replay or phase_of(n) != "forward":
            continue
        if n["name"] in _ADDMM_OPS:
            lin = _addmm_linear(n, params)
            if lin is not None:
                out.append(lin)
            continue
        if n["name"] not in _LINEAR_OPS:
            continue
        ins = {
            arg: (v, get_slot(n["inputs"], "shapes", arg, None))
            for io, _, arg, sub, v in tensors_of(n)
            if io == "in" and sub is None and is_defined(v)
        }
        w = ins.get(1)
        if not w or w[0][1] not in params or len(w[1]) != 2 or 0 not in ins:
            continue
        b = ins.get(2)
        outs = [v for io, _, _, sub, v in tensors_of(n) if io == "out" and sub is None and is_defined(v)]
        out.append(
            Linear(
                node_id=n["id"],
                weight=(w[0][0], w[0][1]),
                bias=(b[0][0], b[0][1]) if b and b[0][1] in params else None,
                shape=(int(w[1][0]), int(w[1][1])),
                input_shape=list(ins[0][1]),
                input=(ins[0][0][0], ins[0][0][1]),
                output=(outs[0][0], outs[0][1]) if outs else None,
            )
        )
    return out


def _addmm_linear(n: dict, params: set[int]) -> Linear | None:
    """addmm(bias [out], x [N, in], W [in, out]) with W a parameter: a linear layer."""
    ins = {
        arg: (v, get_slot(n["inputs"], "shapes", arg, None))
        for io, _, arg, sub, v in tensors_of(n)
        if io == "in" and sub is None and is_defined(v)
    }
    w, x, b = ins.get(2), ins.get(1), ins.get(0)
    if not w or not x or w[0][1] not in params or len(w[1]) != 2 or len(x[1]) != 2 or x[1][1] != w[1][0]:
        return None
    outs = [v for io, _, _, sub, v in tensors_of(n) if io == "out" and sub is None and is_defined(v)]
    return Linear(
        node_id=n["id"],
        weight=(w[0][0], w[0][1]),
        bias=(b[0][0], b[0][1]) if b and b[0][1] in params and len(b[1]) == 1 else None,
        shape=(int(w[1][1]), int(w[1][0])),
        input_shape=list(x[1]),
        input=(x[0][0], x[0][1]),
        output=(outs[0][0], outs[0][1]) if outs else None,
        out_dim=1,
    )


def _reaches(key: tuple, target: tuple, made: dict[tuple, dict], hops: int = 0) -> bool:
    """Does `key` derive from `target` through pass-through ops only, every other tensor input
    being a scalar-sized constant or itself derived from `target`?"""
    if key == target:
        return True
    prod = made.get(key)
    if prod is None or hops > 24 or (prod["name"] not in _ELEMENTWISE and prod["name"] not in _PASS_THROUGH):
        return False
    ins = [
        (v, get_slot(prod["inputs"], "shapes", arg, None))
        for io, _, arg, sub, v in tensors_of(prod)
        if io == "in" and sub is None and is_defined(v)
    ]
    found = False
    for v, shp in ins:
        if _reaches((v[0], v[1]), target, made, hops + 1):
            found = True
        elif math.prod(shp or [1]) > 1:
            return False  # mixes in another activation (a residual): the split would not hold
    return found


def _producers(nodes: list[dict], replay: set[int]) -> dict[tuple, dict]:
    """Tensor key -> the replayed op that made it (the latest one, in replay order)."""
    made = {}
    for n in nodes:
        if n["id"] in replay:
            for io, _, _, sub, v in tensors_of(n):
                if io == "out" and sub is None and is_defined(v):
                    made[(v[0], v[1])] = n
    return made


def _pairs(linears: list[Linear], made: dict[tuple, dict]) -> list[tuple[Linear, Linear]]:
    """(column, row) pairs: the row linear reads the column linear's output through elementwise
    ops only (an MLP block's activation), so the hidden activation can stay split. A path through
    a residual add or a norm would mix split and whole tensors and does not pair."""
    pairs, used = [], set()
    by_output = {lin.output: lin for lin in linears if lin.output is not None}
    for row in linears:
        key, hops = row.input, 0
        while key not in by_output and key in made and hops < 8:
            prod = made[key]
            if prod["name"] not in _ELEMENTWISE:
                break
            ins = [v for io, _, arg, sub, v in tensors_of(prod) if io == "in" and arg == 0 and sub is None]
            if not ins:
                break
            key, hops = (ins[0][0], ins[0][1]), hops + 1
        col = by_output.get(key)
        if col is None:  # a longer path: reshapes and elementwise math with several inputs
            col = next(
                (c for c in linears if c is not row and c.output is not None and _reaches(row.input, c.output, made)),
                None,
            )
        if (
            col is not None
            and col is not row
            and col.node_id not in used
            and row.node_id not in used
            and row.shape[1] == col.shape[0]
        ):
            pairs.append((col, row))
            used |= {col.node_id, row.node_id}
    return sorted(pairs, key=lambda p: p[0].node_id)


def _optimizer_state(nodes: list[dict], replay: set[int], seeds: dict, phase_of: PhaseOf) -> None:
    """Optimizer state (momentum, exp_avg, ...) splits like its parameter: foreach optimizers pass
    state lists in parameter order, so a list of the parameter list's length and shapes maps
    position by position to the parameter list of the same op or of another op."""
    lists: list[list[tuple]] = []
    for n in nodes:
        if n["id"] not in replay or phase_of(n) != "optimizer":
            continue
        by_arg: dict[int, list] = {}
        for io, _, arg, sub, v in tensors_of(n):
            if io == "in" and sub is not None and is_defined(v):
                by_arg.setdefault(arg, []).append(((v[0], v[1]), get_slot(n["inputs"], "shapes", arg, sub)))
        lists.extend(by_arg.values())
    params = [lst for lst in lists if any(k in seeds for k, _ in lst)]
    if not params:
        return
    ref = max(params, key=lambda lst: sum(k in seeds for k, _ in lst))
    for lst in lists:
        if len(lst) == len(ref) and all(s == rs for (_, s), (_, rs) in zip(lst, ref)):
            for (k, _), (rk, _) in zip(lst, ref):
                if rk in seeds and k not in seeds:
                    seeds[k] = seeds[rk]


def _grad_input_mm(nodes: list[dict], replay: set[int], col: Linear, phase_of: PhaseOf) -> dict | None:
    """The backward matmul that makes the column-parallel layer's input gradient: it reads the
    layer's weight storage and outputs the layer input's shape."""
    for n in nodes:
        if n["id"] not in replay or phase_of(n) != "backward" or n["name"] not in ("aten::mm", "aten::matmul"):
            continue
        reads_w = any(io == "in" and is_defined(v) and v[1] == col.weight[1] for io, _, _, _, v in tensors_of(n))
        out_shapes = [
            get_slot(n["outputs"], "shapes", arg, None)
            for io, _, arg, sub, v in tensors_of(n)
            if io == "out" and sub is None
        ]
        # the matmul may run on the input flattened to 2-D ([B*T, in] for a [B, T, in] input)
        if (
            reads_w
            and out_shapes
            and out_shapes[0]
            and out_shapes[0][-1] == col.shape[1]
            and math.prod(out_shapes[0]) == math.prod(col.input_shape)
        ):
            return n
    return None


def _seed_pairs(pairs, n: int, seeds: dict) -> None:
    for col, row in pairs:
        for lin, dim in ((col, 0), (row, 1)):
            if lin.shape[dim] % n:
                raise TraceError(
                    f"tp degree {n} does not divide the {'output' if dim == 0 else 'input'} features "
                    f"({lin.shape[dim]}) of linear node {lin.node_id}"
                )
        seeds[col.weight] = col.out_dim
        if col.bias is not None:
            seeds[col.bias] = 0
        seeds[row.weight] = 1 - row.out_dim


def _replicated(nodes: list[dict], replay: set[int], phase_of: PhaseOf) -> list[dict]:
    """Norms and embeddings: Megatron keeps them whole on every rank (they are cheap next to the
    matmuls, and a vocab-parallel embedding would need its own all_reduce)."""
    counts: dict[str, int] = {}
    for nd in nodes:
        if nd["id"] in replay and phase_of(nd) == "forward":
            base = nd["name"].split("::", 1)[-1].split(".", 1)[0]
            if "norm" in base or base.startswith("embedding"):
                counts[nd["name"]] = counts.get(nd["name"], 0) + 1
    return [
        {"op": k, "count": v, "split": None, "why": "norms and embeddings stay replicated (Megatron)"}
        for k, v in sorted(counts.items())
    ]


def _blocks(pairs, attn, whole: list[dict], replicated: list[dict]) -> list[dict]:
    """What was split and what was not, and why: one entry per MLP pair, attention block, linear
    left whole and replicated op kind (benchmark.json's `sharding.blocks`)."""
    out: list[dict] = [
        {
            "block": "mlp",
            "nodes": [c.node_id, r.node_id],
            "split": "column/row pair: the hidden activation stays split, one all_reduce per direction",
        }
        for c, r in pairs
    ]
    out += [
        {
            "block": "attention",
            "nodes": [*(c.node_id for c in cols), row.node_id],
            "split": "heads: q/k/v column-parallel, out-projection row-parallel, one all_reduce per direction",
        }
        for cols, row, _ in attn
    ]
    out += [{"block": "linear", "nodes": [w["node"]], "split": None, "why": w["why"]} for w in whole]
    out += [{"block": r["op"], "count": r["count"], "split": None, "why": r["why"]} for r in replicated]
    return out


def _exchange_shapes(nodes: list[dict], replay: set[int]) -> dict[int, list]:
    """Recorded tensor shapes of the all_to_all exchanges (embedding data parallelism's)."""
    return {
        nd["id"]: copy.deepcopy(nd["inputs"].get("shapes", []))
        for nd in nodes
        if nd["id"] in replay and nd["name"].split("::")[-1].split(".")[0] in ALL_TO_ALL
    }


def _check_exchanges(nodes: list[dict], before: dict[int, list], label: str) -> None:
    """Tensor parallelism keeps the batch, so an all_to_all's tensors keep their shapes: a changed
    one means a tensor there took a split weight's shape by coincidence (same recorded shape), and
    the ranks would exchange mismatched buffers. Refused, naming the node, not replayed to a crash."""
    for nd in nodes:
        rec = before.get(nd["id"])
        now = nd["inputs"].get("shapes", [])
        if rec is not None and now != rec:
            raise TraceError(
                f"{label} would change the all_to_all at node {nd['id']} ({nd['name']}) from {rec[:2]} "
                f"to {now[:2]}: a tensor there has a split weight's recorded shape"
            )


def shard_tp(bench: Benchmark, spec: TpSharding) -> dict:
    """Split bench.ranks[0] into N identical tensor-parallel ranks (module docstring)."""
    n = int(spec.degree)
    nodes = bench.ranks[0]
    replay = set(bench.replay_ids[0])
    params = set(bench.meta.get("param_storages", ()))
    phase_of = bench.context.phase_of
    linears = _linears(nodes, replay, params, phase_of)
    pairs = _pairs(linears, _producers(nodes, replay))
    used = {lin.node_id for p in pairs for lin in p}
    attn, whole = attention_blocks(linears, producers_with_lists(nodes, replay), used, n)
    if not pairs and not attn:
        raise TraceError("tp sharding found no pair of consecutive linear layers (d -> h -> d) to split")
    seeds: dict[tuple[int, int], int] = {}
    _seed_pairs(pairs, n, seeds)
    mlp_seeds = dict(seeds)
    _seed_pairs([(c, row) for cols, row, _ in attn for c in cols], n, seeds)
    _optimizer_state(nodes, replay, seeds, phase_of)
    label = f"tp degree {n}"
    exchanges = _exchange_shapes(nodes, replay)
    backup = copy.deepcopy(nodes) if attn and pairs else None
    try:
        rep = propagate(nodes, bench.replay_ids[0], scale=1.0 / n, seeds=seeds, mutate=True, params=params, label=label)
    except TraceError as e:
        if backup is None:
            raise
        # heads that do not split (a head count the degree does not divide, an op the meta run
        # cannot follow): keep attention whole, split the MLPs, and say why
        nodes[:] = backup
        for cols, row, _ in attn:
            for lin in (*cols, row):
                whole.append({"node": lin.node_id, "weight": list(lin.shape), "split": None, "why": f"attention: {e}"})
        attn = []
        _optimizer_state(nodes, replay, mlp_seeds, phase_of)
        rep = propagate(
            nodes, bench.replay_ids[0], scale=1.0 / n, seeds=mlp_seeds, mutate=True, params=params, label=label
        )
    _check_exchanges(nodes, exchanges, label)
    nodes = prune_to_replay(nodes, bench.replay_ids[0])
    by_id = {nd["id"]: nd for nd in nodes}
    tid = max(max(v[0], v[1]) for nd in nodes for _, _, _, _, v in tensors_of(nd) if is_defined(v)) + 1
    inserts: dict[int, dict] = {}  # after node id -> all_reduce node
    comms: list = []
    units = [([col], row, "mlp") for col, row in pairs] + [(cols, row, "attention") for cols, row, _ in attn]
    for k, (cols, row, _kind) in enumerate(units):
        sites = [("forward", by_id[row.node_id], [*row.input_shape[:-1], row.shape[0]])]
        mms = [m for m in (_grad_input_mm(nodes, replay, c, phase_of) for c in cols) if m is not None]
        # separate q/k/v: their input gradients are summed, one all_reduce after the last suffices
        mm = max(mms, key=lambda m: m["id"]) if mms else None
        if mm is not None:
            shape = next(
                get_slot(mm["outputs"], "shapes", arg, None)
                for io, _, arg, sub, _ in tensors_of(mm)
                if io == "out" and sub is None
            )
            sites.append(("backward", mm, list(shape)))
        for phase, after, shape in sites:
            v = next(v for io, _, _, sub, v in tensors_of(after) if io == "out" and sub is None)
            et_dtype = next(
                (t for t in after["outputs"]["types"] if isinstance(t, str) and t.startswith("Tensor")), "Tensor(float)"
            )[len("Tensor(") : -1]  # already the ET spelling ("float", "c10::Half")
            node = allreduce_node(-2 - len(comms), [tid, tid + 1], shape, int(v[4]), et_dtype, n, pair=k)
            node["ctrl_deps"] = after["ctrl_deps"]  # a sibling of the op whose partial sums it reduces
            tid += 2
            inserts[after["id"]] = node
            comms.append(
                {
                    "after_node": after["id"],
                    "phase": phase,
                    "pair": k,
                    "block": _kind,
                    "shape": shape,
                    "bytes": attr(node, "comm_bytes"),
                }
            )
    merged = []
    for nd in nodes:
        merged.append(nd)
        if nd["id"] in inserts:
            merged.append(inserts[nd["id"]])
    merged, rids = renumber(merged, sorted(replay & {nd["id"] for nd in nodes}) + [c["id"] for c in inserts.values()])
    bench.ranks = {r: (merged if r == 0 else copy.deepcopy(merged)) for r in range(n)}
    bench.replay_ids = {r: list(rids) for r in range(n)}
    info = {
        "kind": "tp",
        "degree": n,
        "pairs": [
            {
                "column": {"node": c.node_id, "weight": list(c.shape), "split": "out_features"},
                "row": {"node": r.node_id, "weight": list(r.shape), "split": "in_features"},
            }
            for c, r in pairs
        ],
        "attention": [
            {
                "qkv": [{"node": c.node_id, "weight": list(c.shape), "split": "out_features (by heads)"} for c in cols],
                "out_proj": {"node": row.node_id, "weight": list(row.shape), "split": "in_features (by heads)"},
                "heads_ops": w.core,
            }
            for cols, row, w in attn
        ],
        "blocks": _blocks(pairs, attn, whole, _replicated(nodes, replay, phase_of)),
        "collectives": comms,
        "meta_check": rep.to_dict(),
    }
    bench.meta["sharding"] = info
    return info


__all__ = ["shard_tp"]
