"""Meta tensors and one op's meta run: the torch half of meta_check's shape propagation.

Why apart: meta_check.py walks the graph and judges shapes; this builds the meta tensors a
recorded tensor stands for and calls the resolved overload on them with the node's recorded
arguments (scalars converted as the replay converts them), nothing else.
"""

from __future__ import annotations

import warnings

import torch


def meta_dtype(t: str) -> torch.dtype:
    from engine.trace.dtypes import dtype_of

    name = dtype_of(t) or "float32"
    return getattr(torch, name, torch.float32)


def meta_tensor(shape, strides, dtype) -> torch.Tensor:
    shape = [int(x) for x in shape]
    if strides and len(strides) == len(shape) and all(isinstance(s, int) and s >= 0 for s in strides):
        try:
            return torch.empty_strided(shape, [int(s) for s in strides], dtype=dtype, device="meta")
        except RuntimeError:
            pass
    return torch.empty(shape, dtype=dtype, device="meta")


def call_args(node, res, values, types, tensors) -> tuple[list, dict]:
    from engine.replay.dispatch import convert_scalar

    def val(i):
        if i in tensors:
            return tensors[i]
        return convert_scalar(values[i] if i < len(values) else None, types[i], res.arg_types.get(i), "meta")

    pos = [val(x) if kind == "rec" else x for kind, x in res.positional]
    kw = {k: (val(x) if kind == "rec" else x) for k, (kind, x) in res.keywords.items()}
    return pos, kw


def run_on_meta(res, node, ins, types, tensors, sizes_at=None, sizes=None):
    values = list(ins.get("values", []))
    if sizes_at is not None:
        values[sizes_at] = sizes
    pos, kw = call_args(node, res, values, types, tensors)
    with warnings.catch_warnings():
        # an `out=` argument read with a guessed batch dim (a DDP gradient bucket view) is resized
        # to the op's shape, which is what the meta run wants (`_sync_out_args` records it)
        warnings.filterwarnings("ignore", message="An output with one or more elements was resized")
        return res.overload(*pos, **kw)
