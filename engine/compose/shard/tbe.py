"""FBGEMM table-batched embeddings (TBE) seen as the per-table lookups embedding sharding plans.

Why: TorchRec/FBGEMM models run all of a rank's tables in one op
(`fbgemm::split_embedding_codegen_lookup_*_function*`: flat weights of sum(rows x dim), one
indices and one offsets tensor of T x B + 1 entries), so the per-table `aten::embedding_bag`
search found nothing to shard. The ET records shapes, not the D_offsets / weights_offsets
contents, so the tables are recovered from the op's arguments: T = len(D_offsets) - 1 tables
of dim total_D / T (exact when max_D x T == total_D, i.e. all dims equal, as TorchRec groups
tables of one dim into one TBE), rows = weights / (T x dim), B = (len(offsets) - 1) / T,
lookups = len(indices) / T (an even split: per-table pooling factors are not recorded).

A sharded rank runs its shards as TBE again (`rank_tbe_nodes`): per source lookup, one lookup
over the rank's shards (the recorded nodes: bounds check, lookup, backward, with their table
counts, weights, indices, offsets and pooled output cut to the shards), as TorchRec runs a rank's
tables. The replay rebuilds it with FBGEMM (engine.replay.custom) or, where FBGEMM is not
installed, substitutes torch ops and counts them as substituted. Issue 31 item 19: running each
shard as a dense `embedding_bag` + `_embedding_bag_backward` (a [rows, dim] gradient per table)
took 3.3 s and GiBs per iteration on a 13.3M-row table, and coverage said "0 substituted".
`tables_from_tbe` still gives each table as embedding_bag nodes: the per-table facts the planner
reads. `meta["sharding"]["tbe"]` says what ran.
"""

from __future__ import annotations

import copy as copy_mod
import math
import re

from engine.compose.nodes import get_slot, is_defined, producers, set_slot, tensor_key, tensors_of
from engine.errors import TraceError
from engine.trace.tbe import Pooling, TbeArgs, TbeUnreadable, read_tbe, schema_positions, tbe_kind, tbe_tables

TBE_FWD_PREFIX = "fbgemm::split_embedding_codegen_lookup_"  # the first form recognised; see engine.trace.tbe
_EB_SCHEMA = (
    "aten::embedding_bag.padding_idx(Tensor weight, Tensor indices, Tensor offsets, bool scale_grad_by_freq, "
    "int mode, bool sparse, Tensor? per_sample_weights, bool include_last_offset, int? padding_idx) -> "
    "(Tensor, Tensor, Tensor, Tensor)"
)
_EBB_SCHEMA = (
    "aten::_embedding_bag_backward(Tensor grad, Tensor indices, Tensor offsets, Tensor offset2bag, "
    "Tensor bag_size, Tensor maximum_indices, SymInt num_weights, bool scale_grad_by_freq, int mode, "
    "bool sparse, Tensor? per_sample_weights, int padding_idx=-1) -> Tensor"
)


def _attrs(schema: str) -> list[dict]:
    from engine.compose.nodes import make_attrs

    return make_attrs(op_schema=schema)


def _t(ids, numel: int, itemsize: int) -> list:
    return [ids[0], ids[1], 0, int(numel), int(itemsize), "cpu"]


_LONG = "Tensor(long int)"
_SCALAR_TYPES = {bool: "Bool", int: "Int", str: "None"}  # str: only "<None>" here


def _tensor(ids, shape: list[int], itemsize: int, type_: str) -> tuple:
    """(value, shape, type, strides) of a contiguous tensor argument."""
    strides = [shape[1], 1] if len(shape) == 2 else [1]
    return _t(ids, math.prod(shape), itemsize), shape, type_, strides


def _long(ids, n: int) -> tuple:
    return _tensor(ids, [n], 8, _LONG)


def _scalar(v) -> tuple:
    return v, [], _SCALAR_TYPES[type(v)], []


def _node(name: str, tbe: dict, schema: str, inputs: list[tuple], outputs: list[tuple]) -> dict:
    """An ET node standing in for one table of TBE lookup `tbe`; arguments as (value, shape,
    type, strides) tuples, each argument's four facts side by side."""

    def io(args: list[tuple]) -> dict:
        values, shapes, types, strides = (list(c) for c in zip(*args))
        return {"values": values, "shapes": shapes, "types": types, "strides": strides}

    return {
        "id": -1,
        "name": name,
        "ctrl_deps": tbe["ctrl_deps"],
        "inputs": io(inputs),
        "outputs": io(outputs),
        "attrs": _attrs(schema),
    }


def _schema(n: dict) -> str | None:
    from engine.compose.nodes import attr

    return attr(n, "op_schema")


def _args(n: dict) -> TbeArgs | None:
    """The recognised TBE arguments of lookup node `n` (engine.trace.tbe: every optimizer, the
    `_pt2`/`_cpu` suffixes, dense); None when `n` is no lookup; a one-line TraceError naming the op
    and what is missing when it is one whose arguments cannot be read."""
    try:
        return read_tbe(n.get("name", ""), n.get("inputs") or {}, _schema(n))
    except TbeUnreadable as e:
        name, _, what = str(e).partition(": ")
        raise TraceError(f"TBE op {n.get('id')} ({name}): {what}") from None


def tbe_ops(nodes: list[dict], want: set) -> list[dict]:
    """The TBE lookup nodes among the replayed ones, in every production form (engine.trace.tbe)."""
    return [n for n in nodes if n["id"] in want and tbe_kind(n["name"]) is not None]


def tbe_weight(n: dict) -> list | None:
    """The weights tensor record of a TBE lookup node (None when it cannot be read)."""
    try:
        a = read_tbe(n.get("name", ""), n.get("inputs") or {}, _schema(n))
    except TbeUnreadable:
        return None
    return a.weight if a else None


def tables_from_tbe(n: dict, fresh, start_index: int) -> list[tuple[dict, dict, dict]]:
    """[(fwd node, bwd node, info)] per table of one TBE lookup (module docstring)."""
    a = _args(n)
    if a is None:
        return []
    if a.pooling is Pooling.NONE:
        raise TraceError(
            f"TBE op {n.get('id')} ({n.get('name')}): a sequence TBE (pooling_mode none); compose shards pooled "
            "(sum/mean) TBEs as embedding_bag, and has no per-lookup form for sequence embeddings"
        )
    tabs = tbe_tables(a)
    T, dim, rows, batch, lookups = a.tables, tabs[0].dim, tabs[0].rows, tabs[0].batch, tabs[0].lookups
    itemsize = int(a.weight[4])
    mode = 1 if a.pooling is Pooling.MEAN else 0
    # the weights arrive as a list ("GenericList[Tensor(c10::BFloat16),...]"): its element type
    wtypes = re.findall(r"Tensor\([^)]*\)", _wtype_str(n, a))
    wtype = wtypes[0] if wtypes else "Tensor(float)"
    out = []
    for t in range(T):
        w, i, o = (fresh(), fresh()), (fresh(), fresh()), (fresh(), fresh())
        pooled, o2b, bag, mx = ((fresh(), fresh()) for _ in range(4))

        # indices, offsets, offset2bag, bag_size, max_indices: named by both nodes (each node gets
        # its own lists, so one can be edited alone)
        index_args = [(i, lookups), (o, batch), (o2b, 0), (bag, batch), (mx, batch)]
        # embedding_bag(weight, indices, offsets, scale_grad_by_freq, mode=sum, sparse,
        #               per_sample_weights, include_last_offset, padding_idx)
        fwd = _node(
            "aten::embedding_bag",
            n,
            _EB_SCHEMA,
            [
                _tensor(w, [rows, dim], itemsize, wtype),
                *(_long(*a) for a in index_args[:2]),
                *map(_scalar, (False, mode, False, "<None>", False, "<None>")),
            ],
            [_tensor(pooled, [batch, dim], itemsize, wtype), *(_long(*a) for a in index_args[2:])],
        )
        # _embedding_bag_backward(grad, indices, offsets, offset2bag, bag_size, max_indices,
        #                         num_weights, scale_grad_by_freq, mode, sparse, per_sample_weights, padding_idx)
        bwd = _node(
            "aten::_embedding_bag_backward",
            n,
            _EBB_SCHEMA,
            [
                _tensor((fresh(), fresh()), [batch, dim], itemsize, wtype),
                *(_long(*a) for a in index_args),
                *map(_scalar, (rows, False, mode, False, "<None>", -1)),
            ],
            [_tensor((fresh(), fresh()), [rows, dim], itemsize, wtype)],
        )
        out.append(
            (
                fwd,
                bwd,
                {
                    "tbe_node": n["id"],
                    "table": start_index + t,
                    "rows": rows,
                    "dim": dim,
                    "lookups": lookups,
                    "batch": batch,
                    "exact_dims": a.max_d * T == a.total_d,
                    "form": a.kind.form.value,
                    "optimizer": a.kind.optimizer,
                },
            )
        )
    return out


def _wtype_str(n: dict, a: TbeArgs) -> str:
    """The recorded type string of the weights argument (a list type for the pt2 form)."""
    t = (n["inputs"].get("types") or [])[a.pos["weights"] : a.pos["weights"] + 1]
    return t[0] if t and isinstance(t[0], str) else ""


def tbe_batch_shapes(nodes: list[dict], want: set, scale: float) -> dict[tuple[int, int], list[int]]:
    """New shapes of every replayed TBE lookup's indices, offsets and pooled output at batch x `scale`.

    Why a rule of its own: a TBE's batch is no dim of its inputs. Offsets hold T x B + 1 entries
    (one bag per table and sample, plus the end), indices the lookups of all bags (they grow with
    the batch at the recorded pooling factor), and the pooled output is [B, total_D]. B is the
    lookup's own batch: the rank's samples, or the global batch when the output feeds an
    all_to_all that splits it (model-parallel embeddings); the batch scale multiplies both alike.
    Same-shape producers of indices/offsets (`aten::to`, `clone`, ...) get the new shape too, back
    to the model's input, so the replayed step stays self-consistent.
    """
    from engine.errors import TraceError

    out: dict[tuple[int, int], list[int]] = {}
    recorded: dict[tuple[int, int], list[int]] = {}
    for n in tbe_ops(nodes, want):
        a = _args(n)
        if a is None:
            continue
        T, n_off = a.tables, a.offsets_len
        if (n_off - 1) % T:
            continue  # not T x B + 1 offsets (a variable-batch TBE): leave it to the meta run
        new_b = (n_off - 1) // T * scale
        if abs(new_b - round(new_b)) > 1e-9:
            raise TraceError(
                f"batch scale {scale:g} breaks shape at node {n['id']} ({n['name']}): "
                f"TBE batch {(n_off - 1) // T} x {scale:g} = {new_b:g} is not an integer"
            )
        ki, ko = tensor_key(a.indices), tensor_key(a.offsets)
        if ki is not None:
            out[ki], recorded[ki] = [max(1, round(a.lookups * scale))], [a.lookups]
        if ko is not None:
            out[ko], recorded[ko] = [T * round(new_b) + 1], [n_off]
        outs = n.get("outputs") or {}
        shp = (outs.get("shapes") or [None])[0]
        ko_ = tensor_key((outs.get("values") or [None])[0])
        if ko_ is not None and isinstance(shp, list) and len(shp) == 2 and shp[0] == (n_off - 1) // T:
            out[ko_] = [round(new_b), int(shp[1])]
    if not recorded:
        return out
    # walk indices/offsets back through same-shape one-tensor producers (aten::to of the input)
    producer = producers(nodes, want)
    todo = list(recorded)
    while todo:
        k = todo.pop()
        p = producer.get(k)
        if p is None:
            continue
        ins = p.get("inputs") or {}
        tens = [
            (tensor_key(v), shp)
            for v, shp in zip(ins.get("values") or [], ins.get("shapes") or [])
            if tensor_key(v) is not None and isinstance(shp, list)
        ]
        if len(tens) == 1 and tens[0][1] == recorded[k] and tens[0][0] not in out:
            src = tens[0][0]
            assert src is not None
            out[src], recorded[src] = out[k], recorded[k]
            todo.append(src)
    return out


def _io_keys(n: dict) -> set[tuple[int, int]]:
    return {(v[0], v[1]) for _, _, _, _, v in tensors_of(n) if is_defined(v)}


def tbe_companions(nodes: list[dict], src: dict, want: set) -> tuple[list[dict], list[dict]]:
    """The replayed FBGEMM ops of lookup `src` other than itself, tied to it by its indices tensor:
    (before it: the bounds check; after the backward all_to_all: the backward)."""
    a = _args(src)
    key = tensor_key(a.indices) if a is not None else None
    before, after = [], []
    for n in nodes:
        if n is src or n["id"] not in want or not str(n["name"]).startswith("fbgemm::") or key not in _io_keys(n):
            continue
        if "backward" in n["name"]:
            after.append(n)
        elif "bounds_check" in n["name"]:
            before.append(n)
    return before, after


def rank_tbe_nodes(
    nodes: list[dict], src: dict, shards: list, batch: int, fresh, want: set
) -> tuple[list[dict], list[dict]]:
    """One rank's TBE over `shards` (rows, dim, lookups each) of source lookup `src` at `batch` bags
    per table: copies of the recorded lookup and its companions (`tbe_companions`) whose tables,
    weights, indices, offsets and pooled output are the shards' (module docstring). Returns
    (forward nodes, backward nodes) with fresh tensor ids, ids and parents left to the caller.

    Shapes: weights (and weight-sized state) sum(rows x dim); D_offsets / hash_size_cumsum T'+1 and
    per-table tensors T' (1-D tensors of the recorded T + 1 / T entries); indices sum(lookups);
    offsets T' x B + 1; the pooled output and its gradient [B, sum(dim)]; total_D / max_D."""
    from engine.compose.nodes import make_attrs, tensors_of

    a = _args(src)
    assert a is not None
    T, T2 = a.tables, len(shards)
    b0 = (a.offsets_len - 1) // T
    dims = [int(s.dim) for s in shards]
    total_d, max_d = sum(dims), max(dims)
    numel = sum(int(s.rows) * int(s.dim) for s in shards)
    exact = {
        tensor_key(a.weight): [numel],
        tensor_key(a.indices): [sum(int(s.lookups) for s in shards)],
        tensor_key(a.offsets): [T2 * batch + 1],
    }

    def shape_of(key, shp: list) -> list:
        if key in exact:
            return exact[key]
        if shp == [b0, a.total_d]:
            return [batch, total_d]
        if shp == [a.weight_numel]:
            return [numel]
        if len(shp) == 1 and shp[0] in (T, T + 1):
            return [T2 + shp[0] - T]
        return list(shp)

    ids: dict = {}
    before, after = tbe_companions(nodes, src, want)

    def copy(n: dict, lookup: bool) -> dict:
        c = copy_mod.deepcopy(n)
        schema = _schema(n) or ""
        c["attrs"] = make_attrs(op_schema=schema) if schema else []
        c["id"] = -1
        for _, io, arg, sub, v in tensors_of(c):
            if not is_defined(v):
                continue
            key = (v[0], v[1])
            old = list(get_slot(io, "shapes", arg, sub) or [])
            new = shape_of(key, old)
            if key not in ids:
                ids[key] = (fresh(), fresh())
            set_slot(io, "values", arg, sub, [*ids[key], 0, int(math.prod(new)), *v[4:]])
            set_slot(io, "shapes", arg, sub, new)
            if io.get("strides"):
                set_slot(io, "strides", arg, sub, [int(math.prod(new[i + 1 :])) for i in range(len(new))])
        names = schema_positions(schema)
        pos = a.pos if lookup else names
        vals = c["inputs"].get("values") or []
        for what, d in (("total_D", total_d), ("max_D", max_d)):
            i = pos.get(what)
            if i is not None and i < len(vals) and isinstance(vals[i], int) and not isinstance(vals[i], bool):
                vals[i] = d
        return c

    fwd = [copy(n, False) for n in before] + [copy(src, True)]
    return fwd, [copy(n, False) for n in after]


__all__ = ["TBE_FWD_PREFIX", "rank_tbe_nodes", "tables_from_tbe", "tbe_batch_shapes", "tbe_ops"]
