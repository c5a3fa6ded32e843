"""The one kernel classifier: which class of work a GPU task's name is, across vendors.

Why one module: the GEMM category drove What-if speed-ups, breakdowns and compare with an
NVIDIA-only regex that matched none of MI300X's hipBLASLt kernels and counted flash attention as
GEMM ("cutlass" in its name) (issue 32). Every page, the What-if selectors, the device retarget
and the fleet signatures ask here.

Classes (`KernelClass`), first rule that matches wins; names are matched case-insensitively:
  communication  NCCL/RCCL/MSCCL kernels, multimem/one-shot all-reduce (`vocab.is_comm`)
  attention      flash / FMHA / `attn_fwd|bwd` (Triton, aiter, CK), `*attention*`, SDPA, paged
                 attention, xformers
  conv           convolution: cuDNN (`scudnn`, winograd, implicit/explicit_convolve, wgrad/dgrad,
                 fprop, fft2d), MIOpen `igemm_fwd|bwd|wrw`, CK grouped conv, `conv`
  gemm           cuBLAS/cuBLASLt (`sgemm`, `xmma_gemm`, `nvjet`, `cublas`), CUTLASS gemm,
                 hipBLASLt/Tensile `Cijk_`, rocBLAS, CK gemm, `bmm_`, `wmma`, Triton matmul
                 (`triton_tem`, `*matmul*`, `*_mm_*`)
  embedding      embedding lookups (FBGEMM TBE `split_embedding_*`, `embedding_bag`, `embedding`)
  norm           reductions and normalisation: batch/layer/RMS norm (`bn_fw`, `bn_bw`), softmax,
                 pooling, `reduce_kernel`, Triton `triton_red|per`
  copy           data movement (KV-cache writes first: their names say "flash"): memcpy/memset rows, copies, transposes, cat, gather/scatter/index,
                 fill, KV-cache writes
  elementwise    pointwise: `elementwise`, `vectorized`, functors, activations, optimizer
                 multi-tensor kernels, Triton `triton_poi`
  other          anything else
`MEMORY_BOUND` groups the classes whose time is set by bytes moved (elementwise, norm, copy,
embedding): what a device retarget scales by HBM bandwidth rather than FLOP/s.
"""

from __future__ import annotations

import re
from enum import Enum
from functools import lru_cache

import numpy as np
import pandas as pd

from engine.trace import columns as _cols
from engine.trace.vocab import GPU_CATS, is_comm


class KernelClass(str, Enum):
    COMMUNICATION = "communication"
    ATTENTION = "attention"
    CONV = "conv"
    GEMM = "gemm"
    EMBEDDING = "embedding"
    NORM = "norm"
    COPY = "copy"
    ELEMENTWISE = "elementwise"
    OTHER = "other"


MEMORY_BOUND: tuple[KernelClass, ...] = (
    KernelClass.ELEMENTWISE,
    KernelClass.NORM,
    KernelClass.COPY,
    KernelClass.EMBEDDING,
)
"""Classes whose time is set by bytes moved, not FLOPs."""

_RULES: tuple[tuple[KernelClass, re.Pattern], ...] = tuple(
    (cls, re.compile(rx, re.IGNORECASE))
    for cls, rx in (
        (KernelClass.COPY, r"reshape_and_cache|copy_page|kv_?cache_(?:copy|write)"),  # KV-cache writes name "flash"
        (
            KernelClass.ATTENTION,
            r"flash|fmha|(?<![a-z])attn_(?:fwd|bwd)|attention|sdpa|(?<![a-z])mha_|paged_?attn|xformers|_attn_",
        ),
        (
            KernelClass.CONV,
            r"conv(?!ert)|winograd|scudnn|wgrad|dgrad|fprop|fft2d_|igemm_(?:fwd|bwd|wrw)|implicit_gemm|cudnn::cnn|cudnn::detail::(?:d|w)grad",
        ),
        (
            KernelClass.GEMM,
            r"gemm|cijk_|cublas|nvjet|xmma|(?<![a-z])bmm_|wmma|rocblas|hipblaslt|tensile|matmul|triton_tem|(?<![a-z])mm_|_mm(?![a-z])",
        ),
        (KernelClass.EMBEDDING, r"(?<!rotary_)embedding|(?<![a-z])tbe(?![a-z])"),
        (
            KernelClass.NORM,
            r"(?<![a-z])norm|_norm|norm_|layernorm|batchnorm|rmsnorm|bn_fw|bn_bw|softmax|reduce_kernel|reduce(?:_|\b)|welford|pool|triton_(?:red|per)_|(?<![a-z])(?:sum|mean)_",
        ),
        (
            KernelClass.COPY,
            r"copy|memcpy|memset|transpose|catarray|(?<![a-z])cat_|gather|scatter|index|fill|reshape_and_cache|nchwtonhwc|nhwctonchw|permute",
        ),
        (
            KernelClass.ELEMENTWISE,
            r"elementwise|vectorized|unrolled|pointwise|functor|triton_poi_|relu|gelu|silu|sigmoid|tanh|dropout|clamp|threshold|adam|sgd|multi_tensor_apply|subtensorop|rotary|quant",
        ),
    )
)


@lru_cache(maxsize=65536)
def classify_kernel(name: str, cat: str = "kernel") -> KernelClass:
    """The class of one GPU task (rules in the module docstring); memcpy/memset rows are `copy`."""
    if cat in ("gpu_memcpy", "gpu_memset"):
        return KernelClass.COPY
    if is_comm(name):
        return KernelClass.COMMUNICATION
    for cls, rx in _RULES:
        if rx.search(name):
            return cls
    return KernelClass.OTHER


def kernel_classes(events: pd.DataFrame) -> np.ndarray:
    """The class value (str) of every row of an events table; "" for rows that are no GPU work.
    One classification per distinct (name, category)."""
    n = len(events)
    out = np.full(n, "", dtype=object)
    if not n:
        return out
    gpu = _cols.isin(events["cat"], GPU_CATS)
    if not gpu.any():
        return out
    sub = events.loc[gpu, ["name", "cat"]]
    names = sub["name"].astype(str).to_numpy()
    cats = sub["cat"].astype(str).to_numpy()
    memo: dict[tuple[str, str], str] = {}
    vals = []
    for nm, c in zip(names, cats, strict=True):
        k = (nm, c)
        v = memo.get(k)
        if v is None:
            v = memo[k] = classify_kernel(nm, c).value
        vals.append(v)
    out[gpu] = vals
    return out


def class_mask(events: pd.DataFrame, classes: KernelClass | tuple[KernelClass, ...]) -> np.ndarray:
    """Rows of GPU work whose class is one of `classes`."""
    want = {classes.value} if isinstance(classes, KernelClass) else {c.value for c in classes}
    return np.isin(kernel_classes(events), list(want))


def class_shares(events: pd.DataFrame) -> pd.DataFrame:
    """GPU time per kernel class: columns class, kernels, dur_us, share (of summed GPU task time),
    every class present, largest first. Summed task time, so overlapping streams count twice."""
    cls = kernel_classes(events)
    gpu = cls != ""
    df = pd.DataFrame({"class": cls[gpu], "dur_us": events["dur_us"].to_numpy(np.float64)[gpu]})
    if not len(df):
        return pd.DataFrame({"class": [], "kernels": [], "dur_us": [], "share": []})
    t = df.groupby("class", sort=False).agg(kernels=("dur_us", "size"), dur_us=("dur_us", "sum")).reset_index()
    total = float(t["dur_us"].sum())
    t["share"] = t["dur_us"] / total if total > 0 else 0.0
    return t.sort_values(["dur_us", "class"], ascending=[False, True]).reset_index(drop=True)
