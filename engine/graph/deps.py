"""Data-dependency DAG between executable operators, storage-aware.

Why storage-aware: ETs name tensors by `tensor_id`, but in-place ops and views mean that two
different tensor ids can be the same memory. Ordering only by tensor ids would let a replay run
``x.relu_()`` before an earlier reader of ``x``'s view, or read a base before the in-place op
that mutated it through a view. So every executable op is reduced to *accesses* of storages:

* reads: its own input tensors, plus inputs of its call-tree descendants that are not produced
  inside its own subtree (hidden reads, e.g. a buffer read by a child op);
* writes: (a) outputs whose storage is not among the op's own input storages (a fresh result;
  a view or ``aten::to`` returning its input writes nothing), and (b) in-place mutations by the
  op or any descendant: arguments marked ``Tensor(a!)`` in the schema, or argument 0 when the
  op name ends in a single ``_`` (``aten::add_``, ``c10d::allreduce_``; covers traces without
  schemas). Mutations by descendants are charged to the executable op that owns them
  (``aten::batch_norm`` updating running stats inside ``aten::cudnn_batch_norm``).

Undefined tensors (storage_id 0, numel 0: an absent bias, an unused gradient) are not memory and
take no part. Each storage then has a version history in execution order (node ids grow with op start time,
so they are the order; reads of an op happen before its own writes). Edges, producer -> consumer:

* "raw": a reader depends on the last writer of the storage (the version it reads), and on the
  op that last output the exact tensor id it reads (so a view's consumer depends on the view
  op, and a read of a base after an in-place op on a view of it depends on that in-place op);
* "war": a writer depends on every reader of the storage's previous version;
* "waw": a writer depends on the previous writer of the storage.

All edges go from a lower to a higher node id, so the graph is a DAG by construction. Parallel
edges collapse to one per pair, keeping the strongest kind (raw > war > waw) and its tensor.

Executable ops: `replay_ops(trace, mode)` (see `engine.graph.replayset`) unless `ops` is given.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from enum import Enum
from functools import lru_cache
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from engine.errors import TraceError
from engine.graph.calltree import str_list
from engine.graph.replayset import SelectionMode, replay_mask, replay_ops
from engine.trace.columns import Distinct, isin
from engine.trace.dtypes import split_top_level
from engine.trace.ranks import rank_ops, resolve_rank
from engine.trace.tree import nearest_marked, parent_positions

if TYPE_CHECKING:
    import networkx as nx

    from engine.trace.model import Trace


class DepKind(str, Enum):
    """Why one op must follow another (module docstring); a `str` so edge data reads "raw"."""

    RAW = "raw"  # read after write
    WAR = "war"  # write after read
    WAW = "waw"  # write after write

    def __str__(self) -> str:
        return self.value


_KINDS = tuple(DepKind)  # strongest first: the int8 codes of dep_edges index this
_MUTATED = re.compile(r"^Tensor\([a-z]+!\)")


@lru_cache(maxsize=4096)
def mutated_args(name: str, schema: str) -> tuple[int, ...]:
    """Input argument positions an op writes in place (schema ``(a!)`` marks, else trailing ``_``)."""
    found: list[int] = []
    if schema and "(" in schema:
        head = schema.split(" -> ")[0]
        start = head.find("(")
        args = [a for a in split_top_level(head[start + 1 : head.rfind(")")], "([{", ")]}") if a != "*"]
        found = [i for i, a in enumerate(args) if _MUTATED.match(a)]
    base = name.split("::")[-1].split(".")[0]
    if base.endswith("_") and not base.endswith("__") and 0 not in found:
        found.insert(0, 0)
    return tuple(found)


def _mutated_mask(ops: pd.DataFrame, rows: np.ndarray, args: np.ndarray) -> np.ndarray:
    """For tensor occurrences (op row position, input arg): is that argument mutated in place?"""
    if len(rows) == 0:
        return np.zeros(0, dtype=bool)
    n = Distinct(ops["name"])
    n_code, n_vals = n.codes, n.values
    if "schema" in ops.columns:
        s = Distinct(ops["schema"])
        s_code, s_vals = s.codes, s.values
    else:
        s_code, s_vals = np.zeros(len(ops), np.int64), [""]
    pair = n_code[rows] * (len(s_vals) + 1) + s_code[rows]
    uniq, inv = np.unique(pair, return_inverse=True)
    keys: list[Any] = []
    for k, p in enumerate(uniq.tolist()):
        ni, si = divmod(p, len(s_vals) + 1)
        keys.extend(k * 4096 + a for a in mutated_args(n_vals[ni], s_vals[si]))
    return np.isin(inv.astype(np.int64) * 4096 + args, np.asarray(keys, dtype=np.int64))


def _ids_of(ops: pd.DataFrame) -> np.ndarray:
    return ops["id"].to_numpy(dtype=np.int64)


def _owner(ops: pd.DataFrame, exec_mask: np.ndarray) -> np.ndarray:
    """Per row: id of the executable op on its path (ancestor-or-self), -1 when none."""
    near = nearest_marked(parent_positions(ops), exec_mask)
    ids = _ids_of(ops)
    return np.where(near >= 0, ids[np.maximum(near, 0)], -1)


def _rank_tensors(trace: Trace, rank: int) -> pd.DataFrame:
    t = trace.tensors
    if len(t) and "rank" in t.columns:
        ranks = t["rank"].to_numpy()
        if not (ranks == rank).all():
            t = t[ranks == rank]
    return t


def _pair_keys(b_all: np.ndarray, *pairs: tuple[np.ndarray, np.ndarray]) -> list[np.ndarray]:
    """Collision-free int64 keys for several (a, b) pair arrays, ordered like (a, b) tuples and
    comparable with each other.

    b is offset by min(b_all) when every key fits comfortably in int64 (ids are small in
    practice); otherwise b is densified over `b_all` first (a sort, ~10x slower)."""
    a_all = [a for a, _ in pairs if len(a)]
    if len(b_all) and a_all:
        lo, hi = int(b_all.min()), int(b_all.max())
        a_lo = min(int(a.min()) for a in a_all)
        a_hi = max(int(a.max()) for a in a_all)
        if a_lo >= 0 and (a_hi + 1) * (hi - lo + 2) < 2**62:
            m = np.int64(hi - lo + 1)
            return [a.astype(np.int64) * m + (b.astype(np.int64) - lo) for a, b in pairs]
    uniq = np.unique(b_all)
    m = np.int64(len(uniq) + 1)
    return [a.astype(np.int64) * m + np.searchsorted(uniq, b) for a, b in pairs]


def accesses(trace: Trace, exec_ids: np.ndarray, ops: pd.DataFrame, rank: int) -> pd.DataFrame:
    """Storage accesses of the executable ops: columns op, storage, tensor, write (bool).

    `ops` are the rank's rows; reads of an op come before its writes in the dependency order.
    """
    t = _rank_tensors(trace, rank)
    if len(t) == 0 or len(exec_ids) == 0:
        return pd.DataFrame(
            {
                "op": np.empty(0, np.int64),
                "storage": np.empty(0, np.int64),
                "tensor": np.empty(0, np.int64),
                "write": np.empty(0, bool),
            }
        )
    ids = _ids_of(ops)
    owner_of_row = _owner(ops, np.isin(ids, exec_ids))
    op_id = t["op_id"].to_numpy(dtype=np.int64)
    pos = pd.Index(ids).get_indexer(op_id)
    keep = pos >= 0
    pos = np.where(keep, pos, 0)
    owner = np.where(keep, owner_of_row[pos], -1)
    is_in = isin(t["io"], ("in",))
    arg = t["arg"].to_numpy(dtype=np.int64)
    tensor = t["tensor_id"].to_numpy(dtype=np.int64)
    storage = t["storage_id"].to_numpy(dtype=np.int64)
    valid = (owner >= 0) & (storage > 0)  # storage_id 0: an undefined tensor (e.g. bias=None)
    own = valid & (op_id == owner)
    desc = valid & (op_id != owner)

    # Hidden reads: descendant inputs not produced inside the owner's subtree.
    sub_out = valid & ~is_in
    d_in = np.flatnonzero(desc & is_in)
    k_in, k_out = _pair_keys(tensor, (owner[d_in], tensor[d_in]), (owner[sub_out], tensor[sub_out]))
    hidden = d_in[~np.isin(k_in, k_out)]
    reads = np.concatenate([np.flatnonzero(own & is_in), hidden])

    # Fresh outputs: own outputs whose storage is not one of the op's own input storages.
    o_out = np.flatnonzero(own & ~is_in)
    own_in = own & is_in
    k_out, k_in = _pair_keys(storage, (op_id[o_out], storage[o_out]), (op_id[own_in], storage[own_in]))
    fresh = o_out[~np.isin(k_out, k_in)]

    # In-place writes by the op or a descendant, charged to the owner.
    v_in = np.flatnonzero(valid & is_in)
    inplace = v_in[_mutated_mask(ops, pos[v_in], arg[v_in])]

    rows = np.concatenate([reads, fresh, inplace])
    write = np.concatenate([np.zeros(len(reads), bool), np.ones(len(fresh) + len(inplace), bool)])
    op, st = owner[rows], storage[rows]
    # one write per (op, storage), one read per (op, storage, tensor): a read of a view and
    # of its base by the same op both matter for the tensor-level edges.
    # order: storage, op, reads before writes
    tn = tensor[rows]
    order = np.lexsort((tn, write, op, st))
    op, st, tn, write = op[order], st[order], tn[order], write[order]
    first = np.ones(len(op), dtype=bool)
    first[1:] = (
        (op[1:] != op[:-1]) | (st[1:] != st[:-1]) | (write[1:] != write[:-1]) | (~write[1:] & (tn[1:] != tn[:-1]))
    )
    return pd.DataFrame({"op": op[first], "storage": st[first], "tensor": tn[first], "write": write[first]})


def dep_edges(acc: pd.DataFrame, produced: pd.DataFrame | None = None) -> pd.DataFrame:
    """Edges (src, dst, tensor_id, storage_id, kind) from an access table (see module docstring).

    `produced`: (op, tensor, storage) rows of executable ops' outputs, for tensor-level raw edges.
    Vectorized with numpy: versions are prefix sums of writes per storage, and every
    "which writer made version v" question is a binary search on (storage, version) keys.
    """
    op = acc["op"].to_numpy(dtype=np.int64)
    st = acc["storage"].to_numpy(dtype=np.int64)
    tn = acc["tensor"].to_numpy(dtype=np.int64)
    w = acc["write"].to_numpy(dtype=bool)
    order = np.lexsort((w, op, st))
    op, st, tn, w = op[order], st[order], tn[order], w[order]
    n = len(op)
    new_group = np.ones(n, dtype=bool)
    new_group[1:] = st[1:] != st[:-1]
    group = np.cumsum(new_group) - 1
    cw = np.cumsum(w)
    start = np.flatnonzero(new_group)
    version = cw - np.repeat(cw[start] - w[start], np.diff(np.append(start, n)))  # writes so far, incl. self
    stride = np.int64(version.max() + 2 if n else 1)
    key = group * stride + version
    wi = np.flatnonzero(w)
    wkey = key[wi]  # sorted: groups ascending, versions ascending within a group
    srcs, dsts, tids, sids, kinds = [], [], [], [], []

    def add(src: np.ndarray, dst: np.ndarray, tensor: np.ndarray, storage: np.ndarray, kind: DepKind) -> None:
        srcs.append(src)
        dsts.append(dst)
        tids.append(tensor)
        sids.append(storage)
        kinds.append(np.full(len(src), _KINDS.index(kind), np.int8))

    def lookup(want: np.ndarray) -> np.ndarray:
        pos = np.searchsorted(wkey, want)
        hit = pos < len(wkey)
        hit[hit] = wkey[pos[hit]] == want[hit]
        return np.where(hit, wi[np.minimum(pos, len(wi) - 1)], -1) if len(wi) else np.full(len(want), -1)

    ri = np.flatnonzero(~w)
    # raw: reader of version v <- the writer that made version v
    wr = lookup(key[ri])
    ok = wr >= 0
    add(op[wr[ok]], op[ri[ok]], tn[ri[ok]], st[ri[ok]], DepKind.RAW)
    # war: writer of version v+1 <- reader of version v
    nx_w = lookup(key[ri] + 1)
    ok = nx_w >= 0
    add(op[ri[ok]], op[nx_w[ok]], tn[nx_w[ok]], st[ri[ok]], DepKind.WAR)
    # waw: writer of version k <- writer of version k-1
    pw = lookup(key[wi] - 1)
    ok = pw >= 0
    add(op[pw[ok]], op[wi[ok]], tn[wi[ok]], st[wi[ok]], DepKind.WAW)
    if produced is not None and len(produced) and len(ri):
        # raw by tensor: reader <- the latest earlier op that output that exact tensor (tensor ids
        # are reused after a tensor dies, so a producer counts only with the same storage)
        p_op = produced["op"].to_numpy(dtype=np.int64)
        p_tn = produced["tensor"].to_numpy(dtype=np.int64)
        p_st = produced["storage"].to_numpy(dtype=np.int64)
        t_uniq = np.unique(np.concatenate([p_tn, tn[ri]]))
        all_ops = np.concatenate([p_op, op[ri]])
        pk, rk = _pair_keys(all_ops, (np.searchsorted(t_uniq, p_tn), p_op), (np.searchsorted(t_uniq, tn[ri]), op[ri]))
        porder = np.argsort(pk, kind="stable")
        pos = np.searchsorted(pk[porder], rk, side="left") - 1  # strictly earlier producer
        cand = porder[np.maximum(pos, 0)]
        ok = (pos >= 0) & (p_tn[cand] == tn[ri]) & (p_st[cand] == st[ri])
        add(p_op[cand[ok]], op[ri[ok]], tn[ri[ok]], st[ri[ok]], DepKind.RAW)
    src, dst = np.concatenate(srcs), np.concatenate(dsts)
    tid, sid, kind = np.concatenate(tids), np.concatenate(sids), np.concatenate(kinds)
    keep = src != dst
    src, dst, tid, sid, kind = src[keep], dst[keep], tid[keep], sid[keep], kind[keep]
    o = np.lexsort((kind, dst, src))  # strongest kind first within a pair
    src, dst, tid, sid, kind = src[o], dst[o], tid[o], sid[o], kind[o]
    first = np.ones(len(src), dtype=bool)
    first[1:] = (src[1:] != src[:-1]) | (dst[1:] != dst[:-1])
    return pd.DataFrame(
        {
            "src": src[first],
            "dst": dst[first],
            "tensor_id": tid[first],
            "storage_id": sid[first],
            "kind": pd.Categorical.from_codes(kind[first], categories=[k.value for k in _KINDS]),
        }
    )


def data_deps(
    trace: Trace,
    rank: int | None = None,
    ops: Iterable[int] | None = None,
    *,
    mode: SelectionMode | str = SelectionMode.TOP,
) -> nx.DiGraph:
    """Producer -> consumer DAG among one rank's executable ops (rules in module docstring).

    ops: the executable op ids (default: `replay_ops(trace, mode, rank=rank)`); ids not in the
    trace raise TraceError. Node attrs: name, category, phase. Edge attrs: tensor_id,
    storage_id, kind (a `DepKind`). Graph attr `rank`.
    """
    from engine.graph._nxbuild import build_digraph

    r = resolve_rank(trace.ops, rank)
    table = rank_ops(trace.ops, r)
    ids = _ids_of(table)
    if ops is None:
        exec_mask = replay_mask(table, mode)
        exec_ids = ids[exec_mask]
    else:
        exec_ids = np.unique(np.fromiter(ops, dtype=np.int64))
        unknown = exec_ids[~np.isin(exec_ids, ids)]
        if len(unknown):
            shown = ", ".join(str(int(u)) for u in unknown[:5])
            more = f" (and {len(unknown) - 5} more)" if len(unknown) > 5 else ""
            raise TraceError(f"unknown ET node ids on rank {r}: {shown}{more}")
        exec_mask = np.isin(ids, exec_ids)
    node_ids = ids[exec_mask].tolist()
    attrs = {col: str_list(table, col, exec_mask) for col in ("name", "category", "phase")}
    acc = accesses(trace, exec_ids, table, r)
    if len(acc) == 0:
        return build_digraph(node_ids, attrs, [], [], {}, rank=r)
    t = _rank_tensors(trace, r)
    outs = isin(t["io"], ("out",)) & np.isin(t["op_id"].to_numpy(dtype=np.int64), exec_ids)
    produced = pd.DataFrame(
        {
            "op": t["op_id"].to_numpy(dtype=np.int64)[outs],
            "tensor": t["tensor_id"].to_numpy(dtype=np.int64)[outs],
            "storage": t["storage_id"].to_numpy(dtype=np.int64)[outs],
        }
    )
    edges = dep_edges(acc, produced)
    kind = np.asarray(_KINDS, dtype=object)[edges["kind"].cat.codes.to_numpy()].tolist()
    return build_digraph(
        node_ids,
        attrs,
        edges["src"].tolist(),
        edges["dst"].tolist(),
        {"tensor_id": edges["tensor_id"].tolist(), "storage_id": edges["storage_id"].tolist(), "kind": kind},
        rank=r,
    )


__all__ = ["accesses", "data_deps", "dep_edges", "mutated_args", "replay_ops"]
