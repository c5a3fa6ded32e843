"""vLLM's common custom ops as torch stand-ins, for traces of a vLLM server replayed without vLLM.

Why: a vLLM serving trace records `_C::`, `_C_cache_ops::` and `vllm::` ops (RMSNorm, RoPE, FP8
quantization, the KV-cache write, attention, collectives). Without vLLM their namespaces are not
loaded and synthesis and replay skipped them (issue 35: 327 of 4809 cpu_ops of a B200 server).
Here each is defined with vLLM's own schema (csrc/torch_bindings.cpp, the schemas that
`direct_register_custom_op` infers for the Python ops), checked against what the B200 trace
records, and implemented in plain torch with the same result shapes and about the same work. The
replay counts them `substituted`, "op -> torch stand-in (...)" (`SUBSTITUTES`).

When real vLLM has registered an op, it is used: `register` only defines the ops that are not
registered yet, through a private `torch.library.Library(ns, "FRAGMENT")` handle, and only when
`dispatch._packet` finds the op missing (lazily: nothing is defined on import).

Not modelled (said in each substitution text): the collectives are single-process (a copy, a
concatenation of `world_size` copies: no communication, no sum over ranks); attention runs over
the recorded tokens as one causal sequence (vLLM's paged KV cache, the batch's sequence
boundaries, sliding windows and sinks live in its forward context, not in the op's inputs); the
KV-cache write wraps synthesized slot values into the cache. In a vLLM trace the attention op is
the parent of its KV-cache write (`reshape_and_cache_flash`) and of the views of the caches: the
replay runs the parent's stand-in in their place, so the multi-GiB caches are never allocated. `vllm::moe_forward` stays skipped
(`NOT_MODELLED`): its experts' weights, their sizes, top-k and quantization are not in its inputs,
so no cost could be justified from the recorded ones.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

NAMESPACES = ("_C", "_C_cache_ops", "vllm")

# vLLM's schemas; arity and kinds checked against the B200 trace's "Input Dims"/"Input type"
# (tests/test_standins.py). Arguments newer vLLM added with a default are kept (they bind or not).
# One change: the string arguments (group_name, layer_name, kv_cache_dtype) get a default here.
# Kineto records a string's value as "" (no "Concrete Inputs"), and synthesis fills an unrecorded
# argument only from its default; the stand-ins never read group_name or layer_name, and take
# the KV cache's format from its dtype (a uint8 cache holds fp8 bytes in vLLM). A schema allows no
# required argument after a defaulted one, so reshape_and_cache_flash's k_scale/v_scale become
# optional (None: scale 1); the recorded tensors still bind to them.
SCHEMAS = {
    "_C::rms_norm": "rms_norm(Tensor! result, Tensor input, Tensor weight, float epsilon) -> ()",
    "_C::fused_add_rms_norm": "fused_add_rms_norm(Tensor! input, Tensor! residual, Tensor weight, float epsilon) -> ()",
    "_C::rotary_embedding": (
        "rotary_embedding(Tensor positions, Tensor! query, Tensor!? key, int head_size, "
        "Tensor cos_sin_cache, bool is_neox) -> ()"
    ),
    "_C::static_scaled_fp8_quant": (
        "static_scaled_fp8_quant(Tensor! result, Tensor input, Tensor scale, (int, int)? group_shape=None) -> ()"
    ),
    "_C_cache_ops::reshape_and_cache_flash": (
        "reshape_and_cache_flash(Tensor key, Tensor value, Tensor! key_cache, Tensor! value_cache, "
        'Tensor slot_mapping, str kv_cache_dtype="auto", Tensor? k_scale=None, Tensor? v_scale=None) -> ()'
    ),
    "vllm::all_reduce": 'all_reduce(Tensor tensor, str group_name="") -> Tensor',
    "vllm::all_gather": 'all_gather(Tensor tensor, int dim, int world_size, str group_name="") -> Tensor',
    "vllm::unified_attention_with_output": (
        'unified_attention_with_output(Tensor query, Tensor key, Tensor value, Tensor! output, str layer_name="", '
        "Tensor? output_scale=None, Tensor!? output_block_scale=None, Tensor? kv_cache_dummy_dep=None) -> ()"
    ),
}

SUBSTITUTES = {
    "_C::rms_norm": "RMSNorm in fp32, into result",
    "_C::fused_add_rms_norm": "residual += input, then RMSNorm in place",
    "_C::rotary_embedding": "cos/sin gathered by position, rotated in place (NeoX or GPT-J)",
    "_C::static_scaled_fp8_quant": "input / scale, clamped, cast into the fp8 result",
    "_C_cache_ops::reshape_and_cache_flash": "index_put_ into the caches by slot_mapping (slots wrapped)",
    "vllm::all_reduce": "a copy: single-process replay, no communication",
    "vllm::all_gather": "world_size copies concatenated: single-process replay, no communication",
    "vllm::unified_attention_with_output": (
        "SDPA over the recorded tokens as one causal sequence; vLLM's paged KV cache not modelled"
    ),
}

NOT_MODELLED = {
    "vllm::moe_forward": (
        "needs vLLM's forward context: the experts' weights, their intermediate size, top-k and "
        "quantization live in the FusedMoE layer named by layer_name, not in the op's inputs"
    ),
    "vllm::moe_forward_shared": (
        "needs vLLM's forward context: the experts' weights, their intermediate size, top-k and "
        "quantization live in the FusedMoE layer named by layer_name, not in the op's inputs"
    ),
}

_libs: dict[str, Any] = {}  # namespace -> the private Library handle (kept alive)
_defined: set[str] = set()  # the ops defined here (not by real vLLM)


# --- the implementations (plain torch; they run on CPU, CUDA and meta tensors) ---------------
def _rms(x, weight, eps: float, dtype):
    import torch

    var = x.pow(2).mean(dim=-1, keepdim=True)
    return (x * torch.rsqrt(var + eps)).to(dtype) * weight.to(dtype)


def rms_norm(result, input, weight, epsilon: float) -> None:
    result.copy_(_rms(input.float(), weight, epsilon, input.dtype))


def fused_add_rms_norm(input, residual, weight, epsilon: float) -> None:
    x = input.float() + residual.float()
    residual.copy_(x)
    input.copy_(_rms(x, weight, epsilon, input.dtype))


def _rotate(x, cos, sin, head_size: int, is_neox: bool) -> None:
    rot = cos.shape[-1] * 2
    heads = x.unflatten(-1, (-1, head_size))[..., :rot]  # [tokens, (...,) heads, rot]: a view into x
    lead = [1] * (heads.dim() - 2)
    c, s = cos.view(cos.shape[0], *lead, -1), sin.view(sin.shape[0], *lead, -1)
    if is_neox:
        x1, x2 = heads[..., : rot // 2].float(), heads[..., rot // 2 :].float()
        heads.copy_(_cat_last(x1 * c - x2 * s, x2 * c + x1 * s))
    else:  # GPT-J: interleaved pairs
        x1, x2 = heads[..., 0::2].float(), heads[..., 1::2].float()
        heads.copy_(_interleave(x1 * c - x2 * s, x2 * c + x1 * s))


def _cat_last(a, b):
    import torch

    return torch.cat([a, b], dim=-1)


def _interleave(a, b):
    import torch

    return torch.stack([a, b], dim=-1).flatten(-2)


def rotary_embedding(positions, query, key, head_size: int, cos_sin_cache, is_neox: bool) -> None:
    cos, sin = cos_sin_cache[positions.flatten() % cos_sin_cache.shape[0]].float().chunk(2, dim=-1)
    _rotate(query, cos, sin, head_size, is_neox)  # [tokens, heads * head_size] or [tokens, heads, head_size]
    if key is not None:
        _rotate(key, cos, sin, head_size, is_neox)


def static_scaled_fp8_quant(result, input, scale, group_shape=None) -> None:
    import torch

    fmax = torch.finfo(result.dtype).max if result.dtype.is_floating_point else 127.0
    result.copy_((input.float() / scale.float()).clamp(-fmax, fmax).to(result.dtype))


def _to_cache(x, cache, kv_cache_dtype: str, scale=None):
    import torch

    if cache.dtype == torch.uint8 and x.dtype.is_floating_point:  # fp8 bytes (vLLM's fp8 KV cache)
        fp8 = torch.float8_e5m2 if kv_cache_dtype == "fp8_e5m2" else torch.float8_e4m3fn
        return (x.float() / (1.0 if scale is None else scale.float())).to(fp8).view(torch.uint8)
    return x.to(cache.dtype)


def reshape_and_cache_flash(
    key, value, key_cache, value_cache, slot_mapping, kv_cache_dtype: str = "auto", k_scale=None, v_scale=None
) -> None:
    # caches [num_blocks, block_size, kv_heads, head_size]; slot = block * block_size + offset
    block_size = key_cache.shape[1]
    slots = slot_mapping.flatten()[: key.shape[0]].clamp(min=0) % (key_cache.shape[0] * block_size)
    block, offset = slots // block_size, slots % block_size
    key_cache.index_put_((block, offset), _to_cache(key, key_cache, kv_cache_dtype, k_scale))
    value_cache.index_put_((block, offset), _to_cache(value, value_cache, kv_cache_dtype, v_scale))


def all_reduce(tensor, group_name: str = ""):
    return tensor.clone()


def all_gather(tensor, dim: int, world_size: int, group_name: str = ""):
    import torch

    return torch.cat([tensor] * max(1, world_size), dim=dim)


def unified_attention_with_output(
    query, key, value, output, layer_name: str = "", output_scale=None, output_block_scale=None, kv_cache_dummy_dep=None
) -> None:
    import torch.nn.functional as F

    head_size = key.shape[-1]
    dtype = output.dtype if output.dtype.is_floating_point and output.element_size() > 1 else key.dtype
    q, k, v = (t.reshape(t.shape[0], -1, head_size).transpose(0, 1).to(dtype) for t in (query, key, value))
    o = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=q.shape[0] != k.shape[0])
    output.copy_(o.transpose(0, 1).reshape(output.shape).to(output.dtype))


_IMPLS: dict[str, Callable[..., Any]] = {
    "_C::rms_norm": rms_norm,
    "_C::fused_add_rms_norm": fused_add_rms_norm,
    "_C::rotary_embedding": rotary_embedding,
    "_C::static_scaled_fp8_quant": static_scaled_fp8_quant,
    "_C_cache_ops::reshape_and_cache_flash": reshape_and_cache_flash,
    "vllm::all_reduce": all_reduce,
    "vllm::all_gather": all_gather,
    "vllm::unified_attention_with_output": unified_attention_with_output,
}


def _registered(name: str) -> bool:
    import torch

    ns, op = name.split("::", 1)
    try:
        getattr(getattr(torch.ops, ns), op)
    except (AttributeError, RuntimeError):
        return False
    return True


def register(ns: str) -> list[str]:
    """Define the stand-ins of namespace `ns` that nothing has registered yet; the names defined."""
    import torch

    new = []
    for name, schema in SCHEMAS.items():
        if not name.startswith(ns + "::") or name in _defined or _registered(name):
            continue
        if ns not in _libs:
            _libs[ns] = torch.library.Library(ns, "FRAGMENT")  # private handle, kept alive
        lib = _libs[ns]
        lib.define(schema)
        # CompositeExplicitAutograd: one plain-torch kernel for every backend, meta included
        lib.impl(name.split("::", 1)[1], _IMPLS[name], "CompositeExplicitAutograd")
        _defined.add(name)
        new.append(name)
    return new


def substitution(name: str) -> str:
    """ "op -> torch stand-in (...)" for an op defined here, "" otherwise (real vLLM's op)."""
    return f"{name} -> torch stand-in ({SUBSTITUTES[name]})" if name in _defined else ""


__all__ = ["NAMESPACES", "NOT_MODELLED", "SCHEMAS", "register", "substitution"]
