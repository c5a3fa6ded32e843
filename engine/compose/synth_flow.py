"""Data dependencies of a synthesized ET (engine/compose/synth.py): outputs, and who reads them.

Kineto records no outputs, so they are computed: each replayed-level op (the highest operator
on its call path, what a replay runs) is run once on meta tensors built from its recorded
inputs, which gives its outputs' shapes, dtypes and strides at no memory cost. An output that
the schema says aliases an input (`Tensor(a!)`: in-place / out=; `Tensor(a)`: a view) shares
that input's storage (and, when written in place, is that tensor).

The rule that feeds them forward, kept conservative: a tensor input of an op reads an output of
the *previous replayed-level op on the same thread* when shape, dtype and strides are equal (the
first such output, each output feeding one argument of the op; shape and dtype where the trace
records no strides), except between two calls of one operator on the same shapes in a row: that
is a loop over parameters (an optimizer step, zeroing grads), not a chain. Anything else is a fresh (external) input. An op whose meta run fails (no
meta kernel, a guessed value it rejects) gets no outputs and breaks no chain silently: it is
counted (`flow["no_meta"]`).
"""

from __future__ import annotations

import warnings

_CTYPE = {
    "float32": "float",
    "float64": "double",
    "float16": "c10::Half",
    "bfloat16": "c10::BFloat16",
    "int64": "long int",
    "int32": "int",
    "int16": "short int",
    "int8": "signed char",
    "uint8": "unsigned char",
    "bool": "bool",
    "complex64": "c10::complex<float>",
    "complex128": "c10::complex<double>",
    "float8_e4m3fn": "c10::Float8_e4m3fn",
    "float8_e5m2": "c10::Float8_e5m2",
}


def _ctype(dtype: str) -> str:
    """The C type name an ET writes for a torch dtype name (the dtypes table read backwards)."""
    if dtype in _CTYPE:
        return _CTYPE[dtype]
    from engine.trace.dtypes import _C10

    return next((c for c, d in _C10.items() if d == dtype), dtype)


def _sig(shape, et: str, strides) -> tuple:
    return (tuple(shape or ()), et, tuple(strides or ()))


# (op, schema, types, shapes, strides, non-tensor values) -> _meta_outputs' answer. A training
# step calls the same few signatures again and again (every layer, every micro-batch): on the
# 2022 DLRM-like trace 32,347 meta runs had 1,512 distinct signatures. A meta run reads nothing
# else (meta tensors hold no data; the recorded tensor ids and offsets do not enter it), so the
# answer is the same; callers only read the outputs' shape, strides and dtype. Bounded: cleared
# when full.
_MEMO: dict[str, tuple | None] = {}
_MEMO_MAX = 65_536


def _memo_key(node: dict) -> str:
    ins = node["inputs"]
    types = ins["types"]
    vals = [None if t.startswith(("Tensor(", "GenericList[Tensor")) else v for t, v in zip(types, ins["values"])]
    schema = next((a["value"] for a in node["attrs"] if a["name"] == "op_schema"), "")
    return repr((node["name"], schema, types, ins["shapes"], ins["strides"], vals))


def _meta_outputs(node: dict):
    """The op's outputs on meta tensors (a list of tensors), or None when it cannot run there."""
    key = _memo_key(node)
    if key not in _MEMO:
        if len(_MEMO) >= _MEMO_MAX:
            _MEMO.clear()
        _MEMO[key] = _run_meta(node)
    got = _MEMO[key]
    return None if got is None else (got[0], list(got[1]))


def _run_meta(node: dict):
    from engine.compose.meta_run import meta_dtype, meta_tensor, run_on_meta
    from engine.replay.dispatch import resolve
    from engine.replay.resolved import DispatchError

    ins = node["inputs"]
    types = ins["types"]
    schema = next((a["value"] for a in node["attrs"] if a["name"] == "op_schema"), "")
    try:
        res = resolve(node["name"], schema, types, "cpu")
    except DispatchError:
        return None
    tensors: dict = {}
    for i, t in enumerate(types):
        if t.startswith("Tensor("):
            tensors[i] = meta_tensor(ins["shapes"][i], ins["strides"][i], meta_dtype(t))
        elif t.startswith("GenericList[Tensor"):
            tensors[i] = [
                meta_tensor(s, st, meta_dtype(t))
                for s, st in zip(ins["shapes"][i], ins["strides"][i] or [[]] * len(ins["shapes"][i]))
            ]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out = run_on_meta(res, node, ins, types, tensors)
    except Exception:  # noqa: BLE001 -- any op error on meta means "outputs unknown", never a crash
        return None
    outs = list(out) if isinstance(out, (tuple, list)) else [out]
    return res, outs


def infer_flow(nodes: list[dict], top: list[int], thread_of: dict[int, int], fresh, device: str) -> dict:
    """Add outputs to the replayed-level nodes `top` (positions in `nodes`, in order) and feed
    them to the next replayed-level op on the same thread (module docstring); the counts."""
    import torch

    from engine.trace.dtypes import itemsize_of

    prev: dict[int, list[tuple]] = {}
    prev_op: dict[int, tuple] = {}
    links = outputs = no_meta = 0
    for pos in top:
        node = nodes[pos]
        t = thread_of[pos]
        ins = node["inputs"]
        cand = list(prev.get(t, []))  # each output feeds one argument of this op at most
        sig_op = (node["name"], tuple(map(str, ins["shapes"])))
        if prev_op.get(t) == sig_op:  # a run of one call per parameter (optimizer, grad zeroing)
            cand = []
        prev_op[t] = sig_op
        for k, et in enumerate(ins["types"]):
            if not et.startswith("Tensor(") or not cand:
                continue
            sig = _sig(ins["shapes"][k], et, ins["strides"][k])
            if sig[2]:
                rec = next((r for s, r in cand if s == sig), None)
            else:  # strides not recorded (before PyTorch 2.0): shape and dtype
                rec = next((r for s, r in cand if s[:2] == sig[:2]), None)
            if rec is not None:
                ins["values"][k] = list(rec)
                cand = [c for c in cand if c[1] is not rec]
                links += 1
        got = _meta_outputs(node)
        if got is None:
            no_meta += 1
            prev[t] = []
            continue
        res, outs = got
        schema = res.overload._schema
        in_alias = {}
        for j, a in enumerate(schema.arguments):
            if a.alias_info is not None and j < len(ins["types"]) and ins["types"][j].startswith("Tensor("):
                in_alias[frozenset(a.alias_info.before_set)] = j
        vals, shapes, types, strides = [], [], [], []
        for r, x in zip(schema.returns, outs):
            if not isinstance(x, torch.Tensor):
                continue
            dt = str(x.dtype).removeprefix("torch.")
            et = f"Tensor({_ctype(dt)})"
            shape, st = list(x.shape), list(x.stride())
            src = in_alias.get(frozenset(r.alias_info.before_set)) if r.alias_info is not None else None
            if src is not None and r.alias_info.is_write:
                rec = list(ins["values"][src])
            elif src is not None:  # a view: same storage, a new tensor
                rec = [fresh(), ins["values"][src][1], 0, x.numel(), itemsize_of(dt), device]
            else:
                rec = [fresh(), fresh(), 0, x.numel(), itemsize_of(dt), device]
            vals.append(rec)
            shapes.append(shape)
            types.append(et)
            strides.append(st)
        node["outputs"] = {"values": vals, "shapes": shapes, "types": types, "strides": strides}
        outputs += len(vals)
        prev[t] = [(_sig(s, e, st), v) for v, s, e, st in zip(vals, shapes, types, strides)]
    return {"links": links, "outputs": outputs, "no_meta": no_meta, "replayed_level_ops": len(top)}


__all__ = ["infer_flow"]
