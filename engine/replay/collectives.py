"""Collectives (c10d::*, record_param_comms) in a replay: what the trace recorded, and the seam
that runs them.

`collective_call` reads one recorded collective into a `CollectiveCall`: its kind, process group,
tensor shapes and dtype, split sizes, root/peer, async flag and sequence number, taken from the
c10d op's own arguments (by schema name) and, when present, from its `record_param_comms` child
(`pg_name`, `in_split_size`, `out_split_size`, `collective_name`), which is what NCCL traces carry.

The plan asks a `CollectiveBackend` for each collective; the backends and their registry live
in engine.replay.comm_backend, above this module (they use its `CollectiveCall`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from engine.replay.reasons import SkipReason
from engine.trace.vocab import COMM_PREFIXES

COLLECTIVE_PREFIXES = COMM_PREFIXES
SKIP_REASON = SkipReason.COLLECTIVE_SINGLE_PROCESS  # kept for callers of the old constant


def is_collective(name: str) -> bool:
    """A recorded op the replay runs through the collective backend: the vocabulary's
    communication prefixes (engine.trace.vocab), i.e. the ops `collective_call` can read."""
    return name.startswith(COMM_PREFIXES)


class CollKind(str, Enum):
    ALL_REDUCE = "all_reduce"
    ALL_TO_ALL = "all_to_all"
    ALL_GATHER = "all_gather"
    REDUCE_SCATTER = "reduce_scatter"
    BROADCAST = "broadcast"
    REDUCE = "reduce"
    GATHER = "gather"
    SCATTER = "scatter"
    BARRIER = "barrier"
    SEND = "send"
    RECV = "recv"
    WAIT = "wait"

    def __str__(self) -> str:
        return self.value


class ReplayMode(str, Enum):
    """What a replay runs: everything, only compute, or only communication (as Mystique/param)."""

    FULL = "full"
    COMPUTE_ONLY = "compute-only"
    COMM_ONLY = "comm-only"

    def __str__(self) -> str:
        return self.value


# c10d op (without namespace) -> kind; the `base`/`into_tensor` forms take one tensor each side
_C10D = {
    "allreduce_": CollKind.ALL_REDUCE,
    "allreduce_coalesced_": CollKind.ALL_REDUCE,
    "alltoall_base_": CollKind.ALL_TO_ALL,
    "alltoall_": CollKind.ALL_TO_ALL,
    "allgather_": CollKind.ALL_GATHER,
    "_allgather_base_": CollKind.ALL_GATHER,
    "allgather_into_tensor_coalesced_": CollKind.ALL_GATHER,
    "allgather_coalesced_": CollKind.ALL_GATHER,
    "reduce_scatter_": CollKind.REDUCE_SCATTER,
    "_reduce_scatter_base_": CollKind.REDUCE_SCATTER,
    "reduce_scatter_tensor_coalesced_": CollKind.REDUCE_SCATTER,
    "broadcast_": CollKind.BROADCAST,
    "reduce_": CollKind.REDUCE,
    "gather_": CollKind.GATHER,
    "scatter_": CollKind.SCATTER,
    "barrier": CollKind.BARRIER,
    "send": CollKind.SEND,
    "recv_": CollKind.RECV,
    "recv_any_source_": CollKind.RECV,
}
# record_param_comms `collective_name` -> kind
_PARAM = {
    "allreduce": CollKind.ALL_REDUCE,
    "all_reduce": CollKind.ALL_REDUCE,
    "allreduce_coalesced": CollKind.ALL_REDUCE,
    "all_to_all": CollKind.ALL_TO_ALL,
    "all_to_allv": CollKind.ALL_TO_ALL,
    "alltoall": CollKind.ALL_TO_ALL,
    "alltoall_base": CollKind.ALL_TO_ALL,
    "all_gather": CollKind.ALL_GATHER,
    "allgather": CollKind.ALL_GATHER,
    "_allgather_base": CollKind.ALL_GATHER,
    "all_gather_into_tensor_coalesced": CollKind.ALL_GATHER,
    "allgather_into_tensor_coalesced": CollKind.ALL_GATHER,
    "reduce_scatter": CollKind.REDUCE_SCATTER,
    "_reduce_scatter_base": CollKind.REDUCE_SCATTER,
    "reduce_scatter_tensor_coalesced": CollKind.REDUCE_SCATTER,
    "broadcast": CollKind.BROADCAST,
    "reduce": CollKind.REDUCE,
    "gather": CollKind.GATHER,
    "scatter": CollKind.SCATTER,
    "barrier": CollKind.BARRIER,
    "send": CollKind.SEND,
    "recv": CollKind.RECV,
    "recvAnySource": CollKind.RECV,
    "wait": CollKind.WAIT,
}


@dataclass(kw_only=True, slots=True)
class Buf:
    """One tensor a collective sends or receives (recorded shape and dtype)."""

    shape: tuple[int, ...]
    dtype: str

    @property
    def numel(self) -> int:
        n = 1
        for s in self.shape:
            n *= int(s)
        return n

    def nbytes(self) -> int:
        import torch

        dt = getattr(torch, self.dtype, None)
        size = dt.itemsize if isinstance(dt, torch.dtype) else 4
        return self.numel * size


@dataclass(kw_only=True, slots=True)
class CollectiveCall:
    op_id: int
    name: str
    kind: CollKind
    pg: str = "0"  # process-group name ("0": the default group)
    inputs: list[Buf] = field(default_factory=list)
    outputs: list[Buf] = field(default_factory=list)
    in_splits: list[int] = field(default_factory=list)
    out_splits: list[int] = field(default_factory=list)
    root: int = 0  # broadcast/reduce/gather/scatter root; send/recv peer (global rank as recorded)
    async_op: bool = False
    seq: int | None = None  # record_param_comms sequence number (a `wait` names the one it waits on)
    list_form: bool = False  # list-of-tensors API (all_gather list, alltoall list, reduce_scatter list)

    def nbytes(self) -> int:
        """Bytes this rank contributes (what param counts as the message size)."""
        bufs = self.inputs or self.outputs
        return sum(b.nbytes() for b in bufs)

    def signature(self) -> tuple:
        """What must agree between ranks for the collective to match."""
        n_in = sum(b.numel for b in self.inputs)
        dt = self.inputs[0].dtype if self.inputs else (self.outputs[0].dtype if self.outputs else "")
        sized = self.kind in (CollKind.ALL_REDUCE, CollKind.BROADCAST, CollKind.REDUCE, CollKind.ALL_GATHER)
        return (self.kind.value, self.pg, dt, n_in if sized else None)

    def describe(self) -> str:
        n_in = sum(b.numel for b in self.inputs)
        dt = self.inputs[0].dtype if self.inputs else ""
        return f"op {self.op_id} {self.name} ({self.kind.value} of {n_in} {dt} elements, group {self.pg})"


def _attrs(row_attrs: Any) -> dict:
    if isinstance(row_attrs, dict):
        return row_attrs
    if isinstance(row_attrs, str) and row_attrs:
        try:
            v = json.loads(row_attrs)
        except ValueError:
            return {}
        return v if isinstance(v, dict) else {}
    return {}


def _bufs(value: Any, shape: Any, type_str: str) -> list[Buf]:
    """Tensors of one recorded argument (a tensor, a list of them, or a list of lists)."""
    from engine.trace.dtypes import dtype_of, split_list_type

    if not isinstance(type_str, str):
        return []
    if type_str.startswith("Tensor"):
        if "nullptr" in type_str or not isinstance(shape, list):
            return []
        return [Buf(shape=tuple(int(s) for s in shape if isinstance(s, int)), dtype=dtype_of(type_str))]
    if type_str.startswith("GenericList[") and isinstance(value, list):
        out: list[Buf] = []
        el_types = split_list_type(type_str)
        for j, et in enumerate(el_types):
            sj = shape[j] if isinstance(shape, list) and j < len(shape) else None
            vj = value[j] if j < len(value) else None
            out.extend(_bufs(vj, sj, et))
        return out
    return []


def _int_list(v: Any) -> list[int]:
    if isinstance(v, str):
        try:
            v = json.loads(v)
        except ValueError:
            return []
    return [int(x) for x in v] if isinstance(v, list) and all(isinstance(x, int) for x in v) else []


def collective_call(row: dict, child_attrs: dict | None = None) -> CollectiveCall | None:
    """The recorded collective of one ET op row (keys: id, name, schema, inputs, outputs, attrs);
    None when the op is not a collective we model (e.g. an `init` record)."""
    import torch

    name = str(row.get("name", ""))
    ins = row.get("inputs") or {}
    outs = row.get("outputs") or {}
    if isinstance(ins, str):
        ins = json.loads(ins) if ins else {}
    if isinstance(outs, str):
        outs = json.loads(outs) if outs else {}
    attrs = {**_attrs(row.get("attrs")), **(child_attrs or {})}
    values, shapes, types = ins.get("values", []), ins.get("shapes", []), ins.get("types", [])
    call = CollectiveCall(op_id=int(row.get("id", -1)), name=name, kind=CollKind.BARRIER)
    if name == "record_param_comms":
        cname = str(attrs.get("collective_name") or (values[3] if len(values) > 3 else ""))
        # inputs: [tensors?, seq, (pg_name, pg_desc), rank, collective_name, in_split, out_split, ...]
        off = 0 if (types and types[0] == "Int") else 1
        kind = _PARAM.get(cname)
        if kind is None:
            return None
        call.kind = kind
        if len(values) > off and isinstance(values[off], int):
            call.seq = values[off]
        if off == 1:
            call.inputs = _bufs(values[0], shapes[0] if shapes else None, types[0])
            ov = outs.get("values", [])
            if ov:
                call.outputs = _bufs(ov[0], (outs.get("shapes") or [None])[0], (outs.get("types") or [""])[0])
        call.async_op = kind != CollKind.WAIT
    else:
        op = name.split("::", 1)[1] if "::" in name else name
        kind = _C10D.get(op)
        if kind is None:
            return None
        call.kind = kind
        schema = str(row.get("schema") or "")
        names: list[str] = []
        if schema:
            try:
                names = [a.name for a in torch._C.parse_schema(schema).arguments]
            except RuntimeError:
                names = []
        by = {n: i for i, n in enumerate(names)} if len(names) == len(types) else {}

        def arg(*cands: str):
            for c in cands:
                if c in by:
                    i = by[c]
                    return values[i], (shapes[i] if i < len(shapes) else None), types[i]
            return None

        src = arg("input", "input_tensor", "input_tensors", "tensors", "tensor")
        dst = arg("output", "output_tensor", "output_tensors")
        if src is None and types:  # no schema: the first tensor argument
            src = (values[0], shapes[0] if shapes else None, types[0])
        call.inputs = _bufs(*src) if src else []
        call.outputs = _bufs(*dst) if dst else []
        call.list_form = op in ("alltoall_", "allgather_", "reduce_scatter_", "allgather_coalesced_")
        sp = arg("input_split_sizes")
        call.in_splits = _int_list(sp[0]) if sp else []
        sp = arg("output_split_sizes")
        call.out_splits = _int_list(sp[0]) if sp else []
        r = arg("root_rank", "dstRank", "srcRank", "dst", "src")
        if r is not None and isinstance(r[0], int):
            call.root = r[0]
        a = arg("async_op", "asyncOp")
        call.async_op = bool(a[0]) if a is not None and isinstance(a[0], bool) else False
    pg = attrs.get("pg_name")
    if isinstance(pg, str) and pg:
        call.pg = pg
    if not call.in_splits:
        call.in_splits = _int_list(attrs.get("in_split_size", []))
    if not call.out_splits:
        call.out_splits = _int_list(attrs.get("out_split_size", []))
    if call.seq is None and isinstance(child_attrs, dict) and "seq" in child_attrs:
        call.seq = child_attrs["seq"]
    return call
