"""ET node dicts (chakra 1.1.1 layout) built from the Trace tables, and tensor walks over them.

Why node dicts and not the tables: a composed benchmark is exported as ET JSON and replayed by
the same loader/replayer as a captured trace, so transforms edit exactly what gets written.
A tensor value is `[tensor_id, storage_id, offset, numel, itemsize, device]`; tensor lists are
`GenericList[...]` values holding such lists.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import Any

import pandas as pd

ROOT_NAME = "[pytorch|profiler|execution_trace|process]"
ROOT_ID = 1
_ATTR_TYPES = (
    ("rf_id", "uint64"),
    ("fw_parent", "uint64"),
    ("seq_id", "int64"),
    ("scope", "uint64"),
    ("tid", "uint64"),
    ("fw_tid", "uint64"),
)


def empty_io() -> dict:
    return {"values": [], "shapes": [], "types": [], "strides": []}


def make_attrs(
    *,
    rf_id: int = -1,
    fw_parent: int = 0,
    seq_id: int = -1,
    scope: int = 0,
    tid: int = 1,
    fw_tid: int = 0,
    op_schema: str = "",
    extra: dict | None = None,
) -> list[dict]:
    vals = {"rf_id": rf_id, "fw_parent": fw_parent, "seq_id": seq_id, "scope": scope, "tid": tid, "fw_tid": fw_tid}
    out = [{"name": k, "type": t, "value": int(vals[k])} for k, t in _ATTR_TYPES]
    out.append({"name": "op_schema", "type": "string", "value": op_schema or ""})
    for k, v in (extra or {}).items():
        if k not in vals and k != "op_schema":
            out.append({"name": k, "type": "string" if isinstance(v, str) else "int64", "value": v})
    return out


def attr(node: dict, name: str, default: Any = None) -> Any:
    for a in node.get("attrs", []):
        if a.get("name") == name:
            return a.get("value")
    return default


def set_attr(node: dict, name: str, value: Any, typ: str = "uint64") -> None:
    for a in node.setdefault("attrs", []):
        if a.get("name") == name:
            a["value"] = value
            return
    node["attrs"].append({"name": name, "type": typ, "value": value})


def root_node() -> dict:
    return {
        "id": ROOT_ID,
        "name": ROOT_NAME,
        "ctrl_deps": ROOT_ID,
        "inputs": empty_io(),
        "outputs": empty_io(),
        "attrs": make_attrs(scope=7),
    }


def label_node(node_id: int, parent: int, name: str) -> dict:
    return {
        "id": node_id,
        "name": name,
        "ctrl_deps": parent,
        "inputs": empty_io(),
        "outputs": empty_io(),
        "attrs": make_attrs(scope=7),
    }


def _int(v, default: int) -> int:
    try:
        if v is None or pd.isna(v):
            return default
    except (TypeError, ValueError):
        pass
    return int(v)


def node_from_row(row: Any) -> dict:
    """An ET node dict from one `Trace.ops` row (namedtuple or Series)."""
    ins = json.loads(row.inputs) if isinstance(row.inputs, str) and row.inputs else empty_io()
    outs = json.loads(row.outputs) if isinstance(row.outputs, str) and row.outputs else empty_io()
    for io in (ins, outs):
        for k in ("values", "shapes", "types"):
            io.setdefault(k, [])
    extra = json.loads(row.attrs) if isinstance(getattr(row, "attrs", None), str) and row.attrs else {}
    attrs = make_attrs(
        rf_id=_int(row.rf_id, -1),
        fw_parent=_int(row.fw_parent, 0),
        seq_id=_int(row.seq_id, -1),
        scope=_int(row.scope, 0),
        tid=_int(row.tid, 1),
        fw_tid=_int(row.fw_tid, 0),
        op_schema=str(row.schema or ""),
        extra=extra if isinstance(extra, dict) else None,
    )
    return {
        "id": int(row.id),
        "name": str(row.name),
        "ctrl_deps": int(row.parent),
        "inputs": ins,
        "outputs": outs,
        "attrs": attrs,
    }


def is_tensor_type(t: Any) -> bool:
    return isinstance(t, str) and t.startswith("Tensor")


def is_tensor_value(v: Any) -> bool:
    return isinstance(v, list) and len(v) >= 5 and all(isinstance(x, int) and not isinstance(x, bool) for x in v[:5])


def list_elem_types(t: str) -> list[str]:
    from engine.trace.dtypes import split_list_type

    return list(split_list_type(t) or ())


def tensor_slots(io: dict) -> Iterator[tuple[int, int | None]]:
    """(arg, sub|None) of every tensor value in an inputs/outputs dict."""
    types, values = io.get("types", []), io.get("values", [])
    for i, t in enumerate(types):
        v = values[i] if i < len(values) else None
        if is_tensor_type(t):
            if is_tensor_value(v):
                yield i, None
        elif isinstance(t, str) and "Tensor" in t and isinstance(v, list):
            for j, ev in enumerate(v):
                if is_tensor_value(ev):
                    yield i, j


def get_slot(io: dict, key: str, arg: int, sub: int | None) -> Any:
    seq = io.get(key) or []
    x = seq[arg] if arg < len(seq) else None
    if sub is not None:
        x = x[sub] if isinstance(x, list) and sub < len(x) else None
    return x


def set_slot(io: dict, key: str, arg: int, sub: int | None, value: Any) -> None:
    seq = io.get(key)
    if seq is None or arg >= len(seq):
        return
    if sub is None:
        seq[arg] = value
    elif isinstance(seq[arg], list) and sub < len(seq[arg]):
        seq[arg][sub] = value


def slot_type(io: dict, arg: int, sub: int | None) -> str:
    t = io["types"][arg]
    if sub is None:
        return t
    el = list_elem_types(t)
    return el[sub] if sub < len(el) else (el[-1] if el else "Tensor")


def tensors_of(node: dict) -> Iterator[tuple[str, dict, int, int | None, list]]:
    """("in"|"out", io, arg, sub, value) for every tensor of a node, inputs first."""
    for io_name in ("inputs", "outputs"):
        io = node.get(io_name) or {}
        for arg, sub in tensor_slots(io):
            yield ("in" if io_name == "inputs" else "out"), io, arg, sub, get_slot(io, "values", arg, sub)


def is_defined(value: list) -> bool:
    return value[1] != 0 or value[3] != 0


def external_reads(nodes: Iterable[dict]) -> Iterator[tuple[dict, tuple[int, int], int, int | None, list]]:
    """(node, (tensor, storage) key, arg, list index or None, value) for every read of a tensor that
    no earlier node of `nodes` produced, in node order: what must exist before the nodes run
    (the replay materializes it; a batch-scale transform looks for the batch among it)."""
    produced: set = set()
    for n in nodes:
        for io, _, arg, sub, v in tensors_of(n):
            if not is_defined(v):
                continue
            key = (v[0], v[1])
            if io == "out":
                produced.add(key)
            elif key not in produced:
                yield n, key, arg, sub, v


__all__ = [
    "ROOT_ID",
    "ROOT_NAME",
    "attr",
    "empty_io",
    "external_reads",
    "get_slot",
    "is_defined",
    "is_tensor_value",
    "label_node",
    "make_attrs",
    "node_from_row",
    "root_node",
    "set_attr",
    "set_slot",
    "slot_type",
    "tensor_slots",
    "tensors_of",
]


def tensor_key(v) -> tuple[int, int] | None:
    """(tensor id, storage id) of a recorded tensor value, None for anything else."""
    ok = isinstance(v, list) and len(v) >= 5 and isinstance(v[0], int) and isinstance(v[1], int)
    return (v[0], v[1]) if ok and is_defined(v) else None


def producers(nodes: list[dict], want: set) -> dict[tuple[int, int], dict]:
    """tensor_key -> the first replayed node (id in `want`) that outputs it."""
    out: dict[tuple[int, int], dict] = {}
    for n in nodes:
        if n["id"] in want:
            for v in (n.get("outputs") or {}).get("values") or []:
                k = tensor_key(v)
                if k is not None:
                    out.setdefault(k, n)
    return out
