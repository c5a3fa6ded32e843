"""dtype change: floating tensors become fp32/bf16/fp16; integer and bool tensors are kept.

Why rewrite the type strings and itemsize: the replayer builds tensors from them, so this is
all it takes to run the same graph in another precision (index tensors must stay integral).
ScalarType arguments (e.g. `aten::to(dtype=float)`) holding a float type are rewritten too.
"""

from __future__ import annotations

from engine.compose.nodes import get_slot, set_slot, tensor_slots
from engine.errors import TraceError

_TARGET = {"fp32": ("float", 4, 6), "bf16": ("c10::BFloat16", 2, 15), "fp16": ("c10::Half", 2, 5)}
_FLOAT_NAMES = ("float", "c10::BFloat16", "c10::Half", "BFloat16", "Half", "at::Half", "at::BFloat16")
_FLOAT_SCALAR_TYPES = (5, 6, 15)


def _retype(t: str, name: str) -> str:
    if t.startswith("Tensor(") and t.endswith(")") and t[7:-1] in _FLOAT_NAMES:
        return f"Tensor({name})"
    return t


def change_dtype(bench, rank: int, dtype: str) -> dict:
    if dtype not in _TARGET:
        raise TraceError(f"dtype must be one of {', '.join(_TARGET)}, not {dtype!r}")
    name, itemsize, scalar = _TARGET[dtype]
    changed = 0
    for n in bench.ranks[rank]:
        for io_name in ("inputs", "outputs"):
            io = n.get(io_name) or {}
            types = io.get("types") or []
            for arg, sub in list(tensor_slots(io)):
                t = types[arg]
                if sub is None:
                    nt = _retype(t, name)
                    if nt != t:
                        types[arg] = nt
                else:
                    from engine.compose.nodes import list_elem_types

                    els = [_retype(e, name) for e in list_elem_types(t)]
                    nt = "GenericList[" + ",".join(els) + "]"
                    if nt != t:
                        types[arg] = nt
                elem = _retype(
                    t if sub is None else (list_elem_types(t)[sub] if sub < len(list_elem_types(t)) else t), name
                )
                if elem == f"Tensor({name})":
                    v = list(get_slot(io, "values", arg, sub))
                    if v[4] != itemsize:
                        v[4] = itemsize
                        set_slot(io, "values", arg, sub, v)
                        changed += 1
            schema = next((a.get("value") for a in n.get("attrs", []) if a.get("name") == "op_schema"), "") or ""
            if io_name == "inputs" and "ScalarType" in schema:
                _retype_scalar_args(io, schema, scalar)
    info = {"kind": "dtype", "dtype": dtype, "tensors_changed": changed}
    bench.meta["transforms"].append(info)
    return info


def _retype_scalar_args(io: dict, schema: str, scalar: int) -> None:
    import torch

    try:
        args = torch._C.parse_schema(schema).arguments
    except RuntimeError:
        return
    vals = io.get("values") or []
    for i, a in enumerate(args):
        if i < len(vals) and "ScalarType" in str(a.type) and vals[i] in _FLOAT_SCALAR_TYPES:
            vals[i] = scalar


__all__ = ["change_dtype"]
