"""GEMM and attention tables: shapes, FLOPs, achieved TFLOP/s and the share of the device's peak.

Which kernels: those the one classifier (engine.trace.kernels) calls `gemm` or `attention`. Each
is tied to its launching runtime call (same rank and correlation id) and from there to the host
ops that enclose the call on its thread (cpu_op events, properly nested); walking from the innermost
op outwards, the first op whose recorded "Input Dims" give FLOPs by the one formula
(engine.trace.flops.gemm_flops: mm, addmm, bmm, baddbmm, SDPA) is the kernel's op. All GEMM /
attention kernels launched under one op instance share its FLOPs: the row's time is their sum.

Achieved TFLOP/s = FLOPs / summed kernel time. The peak is the device catalog's dense figure
(engine.trace.devices) for the kernels' dtype (from the kernel name, else the trace's most common
GEMM dtype, else fp32; a dtype the device lacks falls back to its fp32 peak); the device comes from
the trace's deviceProperties, else its kernel names (`devices.detect`). No device, no peak share.
Without "Input Dims" (record_shapes off) the table is empty and `why` says so.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from engine.trace import columns as _cols
from engine.trace.devices import CATALOG, Dtype, detect, dtypes
from engine.trace.flops import gemm_flops
from engine.trace.input_dims import input_dims
from engine.trace.kernels import KernelClass, kernel_classes
from engine.trace.vocab import RUNTIME_CATS

if TYPE_CHECKING:
    from engine.trace.model import Trace

COMPUTE = (KernelClass.GEMM.value, KernelClass.ATTENTION.value)
MAX_DEPTH = 64
COLUMNS = (
    "class",
    "op",
    "input_dims",
    "dtype",
    "calls",
    "kernel",
    "dur_us",
    "gflops_per_call",
    "tflops_s",
    "peak_tflops",
    "peak_share",
)


def _parents(ts: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Per op of one thread (sorted by start), the index of the op enclosing it; -1: none."""
    par = np.full(len(ts), -1, np.int64)
    stack: list[int] = []
    for i in range(len(ts)):
        while stack and end[stack[-1]] < ts[i]:
            stack.pop()
        if stack:
            par[i] = stack[-1]
        stack.append(i)
    return par


def op_instances(trace: Trace) -> tuple[pd.DataFrame, str]:
    """One row per op instance with FLOPs: rank, class, op, input_dims, kernel, kernels, dur_us,
    flops, dtype hint; and a sentence saying why the table is empty ("" when it is not)."""
    ev = trace.events
    empty = pd.DataFrame({c: [] for c in ("rank", "class", "op", "input_dims", "kernel", "dur_us", "flops", "dtype")})
    if not len(ev) or "correlation" not in ev:
        return empty, "no Kineto events with correlation ids"
    cls = kernel_classes(ev)
    km = np.isin(cls, COMPUTE) & ev["correlation"].notna().to_numpy()
    if not km.any():
        return empty, "no GEMM or attention kernels"
    dims = input_dims(trace)
    if not dims:
        return empty, "the trace's cpu_ops carry no 'Input Dims' (record it with record_shapes=True)"
    rt = ev.loc[_cols.isin(ev["cat"], RUNTIME_CATS) & ev["correlation"].notna().to_numpy()]
    launch = {
        (int(r), int(c)): (p, t, float(ts))
        for r, c, p, t, ts in zip(
            rt["rank"], rt["correlation"], rt["pid"].astype(str), rt["tid"].astype(str), rt["ts_us"], strict=True
        )
    }
    ops = ev.loc[_cols.isin(ev["cat"], ("cpu_op",))]
    threads: dict[tuple, tuple] = {}
    for key, idx in ops.groupby(
        [ops["rank"], ops["pid"].astype(str), ops["tid"].astype(str)], sort=False
    ).indices.items():
        sub = ops.iloc[idx].sort_values("ts_us", kind="stable")
        ts = sub["ts_us"].to_numpy(np.float64)
        end = ts + np.nan_to_num(sub["dur_us"].to_numpy(np.float64))
        keys = list(zip(sub["src"].to_numpy(np.int64).tolist(), sub["ev"].to_numpy(np.int64).tolist(), strict=True))
        threads[(int(key[0]), key[1], key[2])] = (ts, end, _parents(ts, end), sub["name"].astype(str).to_numpy(), keys)
    k = ev.loc[km]
    inst: dict[tuple, dict] = {}
    for r, c, name, dur, kc in zip(
        k["rank"], k["correlation"], k["name"].astype(str), k["dur_us"], cls[km], strict=True
    ):
        hit = launch.get((int(r), int(c)))
        th = threads.get((int(r), hit[0], hit[1])) if hit else None
        if th is None or hit is None:
            continue
        ts, end, par, names, keys = th
        h = int(np.searchsorted(ts, hit[2], side="right")) - 1
        for _ in range(MAX_DEPTH):  # up from the last op started before the launch
            if h < 0:
                break
            if end[h] >= hit[2]:
                d = dims.get(keys[h])
                fl = gemm_flops(names[h], list(d), []) if d else None
                if fl:
                    row = inst.setdefault(
                        (int(r), keys[h]),
                        {"rank": int(r), "class": kc, "op": names[h], "input_dims": str([list(s) for s in d or []])}
                        | {"kernel": name, "kernels": 0, "dur_us": 0.0, "flops": float(fl)},
                    )
                    row["kernels"] += 1
                    row["dur_us"] += float(dur)
                    break
            h = int(par[h])
    if not inst:
        return empty, "no GEMM or attention kernel's launching op has Input Dims that give FLOPs"
    df = pd.DataFrame(list(inst.values()))
    hint = dtypes(df["kernel"].to_numpy())
    df["dtype"] = [d.value if d is not None else "" for d in hint]
    return df, ""


def gemm_table(trace: Trace) -> tuple[pd.DataFrame, dict]:
    """Rows (`COLUMNS`) per (class, op, input dims, dtype), most time first; and a header: device,
    how it was found, default dtype, why the table is empty."""
    inst, why = op_instances(trace)
    ev = trace.events
    gpu_names = ev.loc[kernel_classes(ev) != "", "name"] if len(ev) else pd.Series([], dtype=str)
    dev_name, how = detect(trace.meta.get("device_properties") or [], gpu_names)
    head = {"device": dev_name, "device_from": how, "why": why}
    if not len(inst):
        return pd.DataFrame({c: [] for c in COLUMNS}), head
    known = [d for d in inst["dtype"] if d]
    default = max(set(known), key=known.count) if known else Dtype.FP32.value
    head["default_dtype"] = default
    inst["dtype"] = inst["dtype"].replace("", default)
    g = inst.groupby(["class", "op", "input_dims", "dtype"], sort=False)
    t = g.agg(
        calls=("flops", "size"),
        kernel=("kernel", "first"),
        dur_us=("dur_us", "sum"),
        flops=("flops", "sum"),
        per_call=("flops", "first"),
    ).reset_index()
    t["gflops_per_call"] = t["per_call"] / 1e9
    t["tflops_s"] = np.where(t["dur_us"] > 0, t["flops"] / np.maximum(t["dur_us"], 1e-12) / 1e6, np.nan)
    dev = CATALOG.get(dev_name) if dev_name else None
    if dev is not None:
        t["peak_tflops"] = [dev.peak_or_fp32(Dtype(d))[0] for d in t["dtype"]]
        t["peak_share"] = t["tflops_s"] / t["peak_tflops"]
    else:
        t["peak_tflops"] = np.nan
        t["peak_share"] = np.nan
    t = t.sort_values(["dur_us", "op"], ascending=[False, True]).reset_index(drop=True)
    return t[list(COLUMNS)], head


__all__ = ["COLUMNS", "gemm_table", "op_instances"]
