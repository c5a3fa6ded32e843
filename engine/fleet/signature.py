"""One job's signature: where its measured step time goes, as shares that add up to 1.

For each rank, over its measured window (the union of its `ProfilerStep#N` host spans, else its
whole span), with B the union of GPU work (kernels, memcpy, memset; engine.trace.vocab.GPU_CATS)
and H the union of host work (`cpu_op` and runtime calls, step annotations left out):
  <class>         |B| split over kernel classes (engine.trace.kernels) in proportion to their
                  summed kernel time: gemm, conv, attention, embedding, memory_bound
                  (elementwise + norm + copy), collectives by type (comm_all_reduce,
                  comm_all_gather, comm_reduce_scatter, comm_all_to_all, comm_p2p, comm_other),
                  other
  host_overhead   |H \\ B|: the host busy while the GPU idles (launch-bound, data loading, python)
  idle            the rest of the window
A rank without GPU work (a CPU job) splits |H| over the classes of its operators' self time
(aten::mm -> gemm, ...; views, allocations and labels -> host_overhead). A job's shares are the
mean over its ranks. `dtype_*` shares split kernel time by the dtype its name states (bf16,
fp16, fp8, fp32; else unknown). GEMM shape buckets need the launching op's input dims, which the
trace store does not keep: not computed (an ET-backed job could give them later).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from engine.trace import intervals as iv
from engine.trace.categories import classify
from engine.trace.kernels import MEMORY_BOUND, KernelClass, kernel_classes
from engine.trace.steps import step_mask
from engine.trace.vocab import GPU_CATS, RUNTIME_CATS, is_comm

COMM_TYPES: tuple[tuple[str, re.Pattern], ...] = (
    ("comm_all_reduce", re.compile(r"all_?reduce", re.I)),
    ("comm_all_gather", re.compile(r"all_?gather", re.I)),
    ("comm_reduce_scatter", re.compile(r"reduce_?scatter", re.I)),
    ("comm_all_to_all", re.compile(r"all_?to_?all", re.I)),
    ("comm_p2p", re.compile(r"send|recv", re.I)),
)
WORK_KEYS: tuple[str, ...] = (
    "gemm",
    "conv",
    "attention",
    "embedding",
    "memory_bound",
    *(k for k, _ in COMM_TYPES),
    "comm_other",
    "other",
)
SHARE_KEYS: tuple[str, ...] = (*WORK_KEYS, "host_overhead", "idle")
"""The signature's time shares, in this order; they add up to 1 for every job."""
DTYPES: tuple[str, ...] = ("bf16", "fp16", "fp8", "fp32", "unknown")
_DTYPE_RX = (
    ("fp8", re.compile(r"fp8|e4m3|e5m2|f8", re.I)),
    ("bf16", re.compile(r"bf16|bfloat16", re.I)),
    ("fp16", re.compile(r"fp16|half|(?<![a-z])h(?:gemm|884|1688)|f16", re.I)),
    ("fp32", re.compile(r"sgemm|float|fp32|f32|tf32|scudnn", re.I)),
)
_HOST_CLASS = (
    ("gemm", re.compile(r"^aten::(addmm|mm|bmm|baddbmm|linear|matmul|_addmm_activation)$")),
    ("conv", re.compile(r"^aten::(conv\w*|_convolution\w*|mkldnn_conv\w*|cudnn_conv\w*)$")),
    ("attention", re.compile(r"scaled_dot_product|flash_attention|efficient_attention")),
    ("embedding", re.compile(r"embedding|split_embedding_codegen|fbgemm::")),
)
_MEMORY = {c.value for c in MEMORY_BOUND} - {KernelClass.EMBEDDING.value}
_CLASS_KEY = {
    KernelClass.GEMM.value: "gemm",
    KernelClass.CONV.value: "conv",
    KernelClass.ATTENTION.value: "attention",
    KernelClass.EMBEDDING.value: "embedding",
    KernelClass.OTHER.value: "other",
}
EVENT_COLUMNS = ["cat", "name", "ts_us", "dur_us", "pid", "tid"]
"""The events columns a signature reads (the store reads only these)."""


def comm_type(name: str) -> str:
    for key, rx in COMM_TYPES:
        if rx.search(name):
            return key
    return "comm_other"


def _kernel_key(cls: str, name: str) -> str:
    if cls == KernelClass.COMMUNICATION.value:
        return comm_type(name)
    if cls in _MEMORY:
        return "memory_bound"
    return _CLASS_KEY.get(cls, "other")


def _host_key(name: str) -> str:
    if is_comm(name):
        return comm_type(name)
    for key, rx in _HOST_CLASS:
        if rx.search(name):
            return key
    cat = classify(name)
    if cat in ("compute", "custom"):
        return "memory_bound"
    return "host_overhead"


def dtype_of(name: str) -> str:
    for key, rx in _DTYPE_RX:
        if rx.search(name):
            return key
    return "unknown"


@dataclass(frozen=True, kw_only=True, slots=True)
class RankSignature:
    """One rank's shares (SHARE_KEYS), window (ms), kernel time by dtype (µs) and GPU flag."""

    shares: dict[str, float]
    window_ms: float
    step_ms: list[float]
    dtype_us: dict[str, float] = field(default_factory=dict)
    gpu: bool = False


def _window(events: pd.DataFrame, host: np.ndarray) -> tuple[np.ndarray, list[float]]:
    ts = events["ts_us"].to_numpy(np.float64)
    end = ts + np.nan_to_num(events["dur_us"].to_numpy(np.float64))
    step = step_mask(events["name"], host)
    if step.any():
        return iv.union(ts[step], end[step]), sorted(((end - ts)[step] / 1000.0).tolist())
    if not len(ts):
        return np.zeros((0, 2)), []
    return np.array([[float(ts.min()), float(end.max())]]), []


def _clip(ts: np.ndarray, end: np.ndarray, win: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each interval clipped to the window union (one row per overlapping window piece)."""
    out_s, out_e, idx = [], [], []
    for a, b in win:
        s = np.maximum(ts, a)
        e = np.minimum(end, b)
        m = e > s
        out_s.append(s[m])
        out_e.append(e[m])
        idx.append(np.flatnonzero(m))
    if not out_s:
        return np.zeros(0), np.zeros(0), np.zeros(0, np.int64)
    return np.concatenate(out_s), np.concatenate(out_e), np.concatenate(idx)


def rank_signature(events: pd.DataFrame) -> RankSignature:
    """The signature of one rank's events (columns EVENT_COLUMNS)."""
    cats = events["cat"].astype(str).to_numpy()
    names = events["name"].astype(str).to_numpy()
    gpu = np.isin(cats, GPU_CATS)
    host = np.isin(cats, ("cpu_op", *RUNTIME_CATS))
    win, steps = _window(events, host | np.isin(cats, ("user_annotation",)))
    w_len = iv.length(win)
    shares = dict.fromkeys(SHARE_KEYS, 0.0)
    dtype_us = dict.fromkeys(DTYPES, 0.0)
    if w_len <= 0:
        shares["idle"] = 1.0
        return RankSignature(shares=shares, window_ms=0.0, step_ms=steps)
    ts = events["ts_us"].to_numpy(np.float64)
    end = ts + np.nan_to_num(events["dur_us"].to_numpy(np.float64))
    host &= ~step_mask(events["name"])
    hs, he, _ = _clip(ts[host], end[host], win)
    H = iv.union(hs, he)
    if gpu.any():
        gi = np.flatnonzero(gpu)
        gs, ge, k = _clip(ts[gi], end[gi], win)
        B = iv.union(gs, ge)
        busy = iv.length(B)
        cls = kernel_classes(events.iloc[gi])[k]
        knames = names[gi][k]
        dur = ge - gs
        per: dict[str, float] = {}
        memo: dict[tuple[str, str], str] = {}
        for c, n, d in zip(cls, knames, dur):
            key = memo.get((c, n))
            if key is None:
                key = memo[(c, n)] = _kernel_key(c, n)
            per[key] = per.get(key, 0.0) + float(d)
            dt = dtype_of(n)
            dtype_us[dt] += float(d)
        total = sum(per.values())
        for key, v in per.items():
            shares[key] += busy * v / total / w_len if total > 0 else 0.0
        shares["host_overhead"] = iv.exclusive(H, B) / w_len
        shares["idle"] = max(0.0, 1.0 - busy / w_len - shares["host_overhead"])
        return RankSignature(shares=shares, window_ms=w_len / 1000.0, step_ms=steps, dtype_us=dtype_us, gpu=True)
    # a CPU job: the host's busy time split by its operators' self time
    from engine.analysis.selftime import self_time

    ops = np.flatnonzero(host)
    sub = events.iloc[ops]
    st = self_time(sub)
    busy = iv.length(H)
    per = {}
    for n, s in zip(names[ops], st):
        key = _host_key(n)
        per[key] = per.get(key, 0.0) + float(s)
    total = sum(per.values())
    for key, v in per.items():
        shares[key] += busy * v / total / w_len if total > 0 else 0.0
    shares["idle"] = max(0.0, 1.0 - busy / w_len)
    return RankSignature(shares=shares, window_ms=w_len / 1000.0, step_ms=steps, dtype_us=dtype_us, gpu=False)


_DEVICE_HINTS = (
    (re.compile(r"sm100|fmhaSm100|nvjet|Sm100", re.I), "NVIDIA B200 (from kernel names)"),
    (re.compile(r"sm90_|hopper", re.I), "NVIDIA H100 (from kernel names)"),
    (re.compile(r"ampere_|sm80_", re.I), "NVIDIA A100 (from kernel names)"),
    (re.compile(r"volta_", re.I), "NVIDIA V100 (from kernel names)"),
    (re.compile(r"turing_", re.I), "NVIDIA Turing (from kernel names)"),
    (re.compile(r"Cijk_|igemm_(fwd|bwd|wrw)_gtc|_ZN2ck", re.I), "AMD Instinct (from kernel names)"),
)


def device_name(device_properties: list, kernel_names: list[str]) -> str:
    """The job's device: `deviceProperties` name, else a guess from kernel names (said so),
    "cpu" without GPU work."""
    for p in device_properties or []:
        if isinstance(p, dict) and p.get("name"):
            return str(p["name"])
    if not kernel_names:
        return "cpu"
    for rx, label in _DEVICE_HINTS:
        if any(rx.search(n) for n in kernel_names[:2000]):
            return label
    return "unknown GPU"


def job_signature(
    ranks: list[RankSignature], *, job: str, path: str, device: str, world_size: int | None
) -> dict[str, Any]:
    """One flat row: job, path, device, ranks, world_size, step_ms, steps, SHARE_KEYS (mean over
    ranks), dtype_<d> (kernel-time shares)."""
    row: dict[str, Any] = {
        "job": job,
        "path": path,
        "device": device,
        "ranks": len(ranks),
        "world_size": world_size or len(ranks),
    }
    steps = [s for r in ranks for s in r.step_ms]
    row["step_ms"] = (
        float(np.median(steps)) if steps else float(np.mean([r.window_ms for r in ranks])) if ranks else 0.0
    )
    row["step_source"] = "ProfilerStep" if steps else "window"
    row["steps"] = len(steps)
    for k in SHARE_KEYS:
        row[k] = float(np.mean([r.shares[k] for r in ranks])) if ranks else 0.0
    tot = {d: sum(r.dtype_us.get(d, 0.0) for r in ranks) for d in DTYPES}
    all_us = sum(tot.values())
    for d in DTYPES:
        row[f"dtype_{d}"] = tot[d] / all_us if all_us > 0 else 0.0
    return row
