"""Resolve a recorded operator to a callable `OpOverload` and lay out its arguments.

Why not `eval`/`torch.ops` by string at run time: the timed loop must do no lookups, so each op
is resolved once into (overload, layout) here. A layout lists, per argument of the overload
that will be called, where its value comes from: ("rec", i) = the i-th recorded input,
("const", v) = a fixed value (used by device substitutions). Binding goes by argument *name*
through the recorded schema when there is one, so a trace recorded by an older PyTorch whose
schema gained/lost defaulted arguments still binds; traces without a schema (ET 1.0.1) are
matched on name + argument count and kinds against every overload of the op.

Device substitutions: CUDA-library ops (`cudnn_*`, `miopen_*`) have no CPU kernel; they are
rewritten to their device-agnostic ATen equivalents with the same math and counted as
"substituted" in the coverage report (the PARAM replayer fails these on CPU).
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch

from engine.replay import oppolicy, standins
from engine.replay.accel import ACCELERATOR_OPS
from engine.replay.accel import remap as accel_remap
from engine.replay.collectives import is_collective
from engine.replay.reasons import SkipReason
from engine.replay.resolved import DispatchError, Resolved

# recorded ScalarType / Layout / MemoryFormat enums are written as ints
SCALAR_TYPES = {
    0: torch.uint8,
    1: torch.int8,
    2: torch.int16,
    3: torch.int32,
    4: torch.int64,
    5: torch.float16,
    6: torch.float32,
    7: torch.float64,
    8: torch.complex32,
    9: torch.complex64,
    10: torch.complex128,
    11: torch.bool,
    15: torch.bfloat16,
}
LAYOUTS = {0: torch.strided, 1: torch.sparse_coo}
MEMORY_FORMATS = {
    0: torch.contiguous_format,
    1: torch.preserve_format,
    2: torch.channels_last,
    3: torch.channels_last_3d,
}


# namespaces whose operators are registered by importing a well-known library (a fixed list:
# never a module named by the trace)
OP_LIBRARIES = {
    "fbgemm": "fbgemm_gpu",
    "torchvision": "torchvision",
    "torchaudio": "torchaudio",
    "torchrec": "torchrec",
}
# what to install for each library's namespace (named in the skip detail)
OP_PACKAGES = {
    "fbgemm": "fbgemm-gpu-cpu==1.8.0 on CPU / fbgemm-gpu on CUDA (pip install -e '.[dlrm]')",
    "torchvision": "torchvision",
    "torchaudio": "torchaudio",
    "torchrec": "torchrec",
}
_tried_libs: set[str] = set()


def _load_library(ns: str) -> None:
    lib = OP_LIBRARIES.get(ns)
    if lib and lib not in _tried_libs:
        _tried_libs.add(lib)
        import importlib

        with contextlib.suppress(ImportError):  # stays unresolved; the op is reported with its namespace
            importlib.import_module(lib)


def _packet(name: str):
    if "::" not in name:
        raise DispatchError(f"not a registered operator name: {name}", SkipReason.UNKNOWN_OPERATOR)
    ns, op = name.split("::", 1)
    _load_library(ns)
    try:
        namespace = getattr(torch.ops, ns)
        return getattr(namespace, op)
    except (AttributeError, RuntimeError):
        if ns == "aten":
            raise DispatchError(
                f"operator {name} not found in torch {torch.__version__}", SkipReason.UNKNOWN_OPERATOR
            ) from None
        if ns in standins.NAMESPACES:  # vLLM's ops without vLLM: torch stand-ins (standins.py)
            if name in standins.NOT_MODELLED:
                raise DispatchError(f"{name} {standins.NOT_MODELLED[name]}", SkipReason.LIBRARY_NOT_LOADED) from None
            standins.register(ns)
            if name in standins.SCHEMAS:
                return getattr(getattr(torch.ops, ns), op)
        if ns in OP_PACKAGES:
            raise DispatchError(
                f"operator {name} needs {OP_PACKAGES[ns]} (not installed)", SkipReason.LIBRARY_NOT_LOADED
            ) from None
        raise DispatchError(
            f"operator namespace '{ns}' not loaded (op {name})", SkipReason.LIBRARY_NOT_LOADED
        ) from None


def _overload(name: str, overload_name: str):
    packet = _packet(name)
    try:
        return getattr(packet, overload_name or "default")
    except (AttributeError, RuntimeError):
        return None


def _kind_ok(rec_type: str, schema_type: str) -> bool:
    """Can a recorded value of ET type `rec_type` feed a schema argument of type `schema_type`?"""
    st = schema_type
    optional = st.startswith("Optional[")
    if rec_type == "None":
        return optional
    if optional:
        st = st[len("Optional[") : -1]
    if rec_type.startswith("Tensor"):
        return st == "Tensor"
    if rec_type.startswith(("GenericList[", "Tuple[")):
        inner = rec_type[rec_type.index("[") + 1 : -1]
        if st.startswith("List["):
            if not inner:
                return True
            el = st[5:-1]
            first = inner.split(",")[0]
            if first.startswith("Tensor") or first == "None":
                return "Tensor" in el
            return "Tensor" not in el
        return False
    if rec_type == "Int":
        return st in ("int", "SymInt", "float", "Scalar", "number", "bool", "ScalarType", "Layout", "MemoryFormat")
    if rec_type == "Double":
        return st in ("float", "Scalar", "number")
    if rec_type == "Bool":
        return st in ("bool", "Scalar", "int", "number")
    if rec_type == "Device":
        return st == "Device"
    if rec_type == "String":
        return st in ("str", "string")
    return False


def _by_kinds(name: str, types: list[str]):
    """Pick the overload of `name` whose arguments accept the recorded kinds (no-schema traces)."""
    packet = _packet(name)
    best = None
    for ov_name in packet.overloads():
        if ov_name == "out" or ov_name.endswith("_out"):  # not "dtype_layout"
            continue
        ov = getattr(packet, ov_name)
        args = ov._schema.arguments
        required = sum(1 for a in args if not a.has_default_value() and not a.kwarg_only)
        if not (required <= len(types) <= len(args)):
            continue
        if all(_kind_ok(t, str(getattr(a, "real_type", a.type))) for t, a in zip(types, args)):
            exact = len(types) == len(args)
            if best is None or (exact and not best[1]):
                best = (ov, exact)
    if best is None:
        raise DispatchError(f"no overload of {name} accepts the recorded arguments ({', '.join(types)})")
    return best[0]


def _layout(target, rec_names: list[str] | None, n_rec: int) -> tuple[list, dict, dict]:
    """Bind recorded inputs to `target`'s arguments (by name when names are known)."""
    positional: list[tuple[str, Any]] = []
    keywords: dict[str, tuple[str, Any]] = {}
    arg_types: dict[int, str] = {}
    index = {n: i for i, n in enumerate(rec_names)} if rec_names else None
    gap = False
    for j, a in enumerate(target._schema.arguments):
        i = index.get(a.name) if index is not None else (j if j < n_rec else None)
        if i is None or i >= n_rec:
            if not a.has_default_value():
                raise DispatchError(f"recorded call lacks required argument '{a.name}' of {target._schema.name}")
            gap = True
            continue
        arg_types[i] = str(getattr(a, "real_type", a.type))
        if a.kwarg_only or gap:
            keywords[a.name] = ("rec", i)
        else:
            positional.append(("rec", i))
    return positional, keywords, arg_types


# --- device substitutions -------------------------------------------------------------------
def _substitute(target: str, into: str, positional: list[tuple[str, Any]], **more: Any) -> Resolved:
    """Replay device-library op `target` as the portable `aten::<into>`, every argument positional."""
    return Resolved(
        overload=getattr(torch.ops.aten, into).default,
        positional=positional,
        keywords={},
        arg_types={},
        substituted=f"{target} -> aten::{into}",
        **more,
    )


def _sub_bn(target: str):
    def make(rec_names, n_rec):
        # cudnn/miopen_batch_norm(input, weight, bias, running_mean, running_var, training, factor, eps)
        return _substitute(target, "native_batch_norm", [("rec", i) for i in range(8)], out_map=[0, 1, 2, -1])

    return make


def _sub_bn_backward(target: str):
    def make(rec_names, n_rec):
        # (input, grad_output, weight, running_mean, running_var, save_mean, save_var[invstd], eps, ...)
        pos = [
            ("rec", 1),
            ("rec", 0),
            ("rec", 2),
            ("rec", 3),
            ("rec", 4),
            ("rec", 5),
            ("rec", 6),
            ("const", True),
            ("rec", 7),
            ("const", [True, True, True]),
        ]
        return _substitute(target, "native_batch_norm_backward", pos)

    return make


def _sub_conv(target: str, transposed: bool, has_bias: bool):
    def make(rec_names, n_rec):
        # cudnn_convolution(self, weight, padding, stride, dilation, groups, ...)
        # cudnn_convolution_transpose(self, weight, padding, output_padding, stride, dilation, groups, ...)
        # miopen_convolution(self, weight, bias, padding, stride, dilation, groups, ...)
        b = 1 if has_bias else 0
        bias = ("rec", 2) if has_bias else ("const", None)
        if transposed:
            pad, outpad, stride, dil, groups = 2 + b, 3 + b, 4 + b, 5 + b, 6 + b
            tail: list[tuple[str, Any]] = [("const", True), ("rec", outpad)]
        else:
            pad, stride, dil, groups = 2 + b, 3 + b, 4 + b, 5 + b
            tail = [("const", False), ("const", [0])]
        # aten::convolution(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups)
        pos = [("rec", 0), ("rec", 1), bias, ("rec", stride), ("rec", pad), ("rec", dil), *tail, ("rec", groups)]
        return _substitute(target, "convolution", pos, extra={"zero_outpad": not transposed})

    return make


SUBSTITUTIONS = {
    "aten::cudnn_batch_norm": _sub_bn("aten::cudnn_batch_norm"),
    "aten::miopen_batch_norm": _sub_bn("aten::miopen_batch_norm"),
    "aten::cudnn_batch_norm_backward": _sub_bn_backward("aten::cudnn_batch_norm_backward"),
    "aten::miopen_batch_norm_backward": _sub_bn_backward("aten::miopen_batch_norm_backward"),
    "aten::cudnn_convolution": _sub_conv("aten::cudnn_convolution", False, False),
    "aten::cudnn_convolution_transpose": _sub_conv("aten::cudnn_convolution_transpose", True, False),
    "aten::miopen_convolution": _sub_conv("aten::miopen_convolution", False, True),
    "aten::miopen_convolution_transpose": _sub_conv("aten::miopen_convolution_transpose", True, True),
}
# CPU-library ops recorded on CPU, replayed on CUDA
SUBSTITUTIONS_ON_CUDA = {
    "aten::mkldnn_convolution": _sub_conv("aten::mkldnn_convolution", False, True),
}
NO_EQUIVALENT = (
    "aten::_cudnn_rnn",
    "aten::_cudnn_rnn_backward",
    "aten::miopen_rnn",
    "aten::_cudnn_ctc_loss",
    "aten::cudnn_grid_sampler",
    "aten::cudnn_affine_grid_generator",
)


def resolve(name: str, schema: str, types: list[str], device: str, *, allow_trace_code: bool = False) -> Resolved:
    """Resolve one recorded op for `device` ("cpu" / "cuda:N"); DispatchError says why not.

    Every op a trace asks for passes `oppolicy` here (the one gate of replay, distributed ranks,
    the dashboard's worker and compose's shape check): an op that may touch files, devices or
    the network is refused with `SkipReason.UNSAFE_OP` unless `allow_trace_code`."""
    if is_collective(name):
        raise DispatchError(f"collective {name}", SkipReason.COLLECTIVE_SINGLE_PROCESS)
    on_gpu = device.startswith("cuda")
    if name in ACCELERATOR_OPS:
        remapped = accel_remap(name, on_gpu)
        if remapped is not None:
            return remapped
    if not on_gpu and name in SUBSTITUTIONS:
        return SUBSTITUTIONS[name](None, len(types))
    if on_gpu and name in SUBSTITUTIONS_ON_CUDA:
        return SUBSTITUTIONS_ON_CUDA[name](None, len(types))
    if not on_gpu and name in NO_EQUIVALENT:
        raise DispatchError(f"{name} is CUDA-library only and has no CPU equivalent", SkipReason.NO_CPU_EQUIVALENT)
    if not allow_trace_code and (why := oppolicy.denied_name(name)):  # before any lookup or library import
        raise DispatchError(f"{why} ({oppolicy.HINT})", SkipReason.UNSAFE_OP)
    rec_names = None
    target = None
    if schema:
        try:
            parsed = torch._C.parse_schema(schema)
        except RuntimeError:
            parsed = None
        if parsed is not None:
            rec_names = [a.name for a in parsed.arguments]
            target = _overload(name, parsed.overload_name)
            if len(rec_names) != len(types):
                rec_names = None  # schema and values disagree: fall back to kind matching
                target = None
    if target is None:
        target = _by_kinds(name, types)
    substituted = standins.substitution(name)  # "" unless a vLLM stand-in: our code, it opens no path
    if not allow_trace_code and not substituted and (why := oppolicy.refusal(target._schema, name)):
        raise DispatchError(f"{why} ({oppolicy.HINT})", SkipReason.UNSAFE_OP)
    positional, keywords, arg_types = _layout(target, rec_names, len(types))
    for i, t in enumerate(types):
        st = arg_types.get(i)
        if st is not None and t != "None" and not _kind_ok(t, st):
            raise DispatchError(f"recorded argument {i} of type {t} does not fit '{st}' of {target._schema.name}")
    if not on_gpu:  # pinned host memory needs an accelerator: a CPU replay allocates plain memory
        args = target._schema.arguments
        for j, a in enumerate(args[: len(positional)]):
            if a.name == "pin_memory":
                positional[j] = ("const", False if not str(a.type).startswith("Optional") else None)
        if "pin_memory" in keywords:
            keywords["pin_memory"] = ("const", None)
    return Resolved(
        overload=target,
        positional=positional,
        keywords=keywords,
        arg_types=arg_types,
        substituted=substituted,
    )


def convert_scalar(value: Any, rec_type: str, schema_type: str | None, device: str) -> Any:
    """A recorded non-tensor value as the Python object the overload expects."""
    if rec_type == "None" or value == "<None>":
        return None
    st = (schema_type or "").replace("Optional[", "").rstrip("]")
    if rec_type == "Device":
        return torch.device(device)
    if rec_type == "Int" and isinstance(value, int):
        if st == "ScalarType":
            return SCALAR_TYPES.get(value, torch.float32)
        if st == "Layout":
            return LAYOUTS.get(value, torch.strided)
        if st == "MemoryFormat":
            return MEMORY_FORMATS.get(value, torch.contiguous_format)
        if st == "bool":
            return bool(value)
    if rec_type == "Double" and isinstance(value, (int, float)):
        return float(value)
    return value
