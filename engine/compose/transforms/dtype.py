"""dtype change: floating tensors become fp32/bf16/fp16; integer and bool tensors are kept.

Why rewrite the type strings and itemsize: the replayer builds tensors from them, so this is
all it takes to run the same graph in another precision (index tensors must stay integral).
ScalarType arguments (e.g. `aten::to(dtype=float)`) holding a float type are rewritten too.

Why a meta run after the rewrite: retyping every float tensor can produce an op the target
dtype does not support, or a mix of dtypes an op refuses (a GPT-2 matmul against a tensor the
trace created in fp32), which used to pass compose and fail at replay. Every replayed op is run
on meta tensors of the new dtypes; an op that fails there (and ran before the change) refuses
the transform, naming the node. Some dtypes are slow on the target device (bf16/fp16
convolutions on CPU fall back to reference kernels, 10-100x slower); that is a warning in
`meta["warnings"]` before anything runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from engine.compose.nodes import get_slot, set_slot, tensor_slots
from engine.errors import TraceError

if TYPE_CHECKING:
    from engine.compose.benchmark import Benchmark

_TARGET = {"fp32": ("float", 4, 6), "bf16": ("c10::BFloat16", 2, 15), "fp16": ("c10::Half", 2, 5)}
_FLOAT_NAMES = ("float", "c10::BFloat16", "c10::Half", "BFloat16", "Half", "at::Half", "at::BFloat16")
_FLOAT_SCALAR_TYPES = (5, 6, 15)


def _retype(t: str, name: str) -> str:
    if t.startswith("Tensor(") and t.endswith(")") and t[7:-1] in _FLOAT_NAMES:
        return f"Tensor({name})"
    return t


def change_dtype(bench: Benchmark, rank: int, dtype: str) -> dict:
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
    info["meta_check"] = validate(bench, rank, dtype)
    warn = slow_on_device(bench, rank, dtype)
    if warn:
        bench.meta["warnings"].append(warn)
    bench.meta["transforms"].append(info)
    return info


_BENIGN = ("no meta kernel", "data-dependent", "meta")


def _failures(rep) -> dict[str, str]:
    out: dict[str, str] = {}
    for u in rep.unchecked:
        name, _, msg = u.partition(": ")
        if not any(b in msg.lower() for b in _BENIGN):
            out.setdefault(f"{name}: {msg}", u)
    return out


def validate(bench: Benchmark, rank: int, dtype: str, baseline=None) -> dict:
    """Meta-run every replayed op with the new dtypes; TraceError on an op that fails now but
    did not with the recorded dtypes (module docstring)."""
    from engine.compose.meta_check import propagate

    nodes, ids = bench.ranks[rank], bench.replay_ids[rank]
    rep = propagate(nodes, ids, mutate=False, strict=False, label=f"dtype {dtype}")
    new = _failures(rep)
    if new:
        before = _failures(baseline) if baseline is not None else bench.context.dtype_baseline_failures
        bad = [k for k in new if k not in before]
        if bad:
            raise TraceError(
                f"dtype {dtype}: {len(bad)} op(s) fail with the new dtypes (checked on meta tensors), "
                f"e.g. {bad[0][:200]}; keep this model in its recorded dtype"
            )
    return rep.to_dict()


_SLOW = {("cpu", "bf16"), ("cpu", "fp16")}
_CONV = ("aten::conv", "aten::convolution", "aten::_convolution", "aten::mkldnn_convolution")


def slow_on_device(bench: Benchmark, rank: int, dtype: str) -> str | None:
    """A warning when the target device runs this dtype's heavy ops slowly (module docstring)."""
    dev = "cpu" if str(bench.spec.device).startswith("cpu") else "cuda"
    if (dev, dtype) not in _SLOW:
        return None
    want = set(bench.replay_ids[rank])
    convs = sum(1 for n in bench.ranks[rank] if n["id"] in want and n["name"].startswith(_CONV))
    if not convs:
        return None
    return (
        f"dtype {dtype} on {dev}: {convs} convolution(s) will run on slow reference kernels "
        "(10-100x slower than fp32 on CPU; measured in benchmarks/memory.py's README); consider fp32 on CPU"
    )


def _schema_arg_types(schema: str) -> list[str]:
    """Argument type spellings of an op schema, in order (the `*` marker dropped).

    Why not `torch._C.parse_schema`: it reports `ScalarType?` as `Optional[int]`, so dtype
    arguments (new_zeros(dtype=float), to(dtype=float)) could not be told from plain ints."""
    start = schema.find("(")
    if start < 0:
        return []
    depth, cur, out = 0, "", []
    for ch in schema[start + 1 :]:
        if ch in "([":
            depth += 1
        elif ch in ")]":
            if depth == 0:
                break
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
            continue
        cur += ch
    if cur.strip():
        out.append(cur.strip())
    return [a.split(" ", 1)[0] for a in out if a and a != "*"]


def _retype_scalar_args(io: dict, schema: str, scalar: int) -> None:
    vals = io.get("values") or []
    for i, t in enumerate(_schema_arg_types(schema)):
        if i < len(vals) and "ScalarType" in t and vals[i] in _FLOAT_SCALAR_TYPES:
            vals[i] = scalar


__all__ = ["change_dtype"]
