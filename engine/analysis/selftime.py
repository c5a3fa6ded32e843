"""Where the time goes by name: self (exclusive) time, tables by operator / kernel / category.

Why self time: summing inclusive durations counts a nested op once per ancestor (the step, its
module annotation, aten::conv2d, aten::convolution, aten::_convolution, cudnn_convolution each
showed the same ~2.1 s). Self times of a lane add up to its busy time, so the rows of a table
add up too. Annotations (`## ... ##`, record_function labels, profiler markers: the trace
category "annotation" of engine.trace.categories) are labelled `kind="annotation"` and kept
apart from operators: their self time is the Python between ops, not work.

Operator time comes from Kineto `cpu_op` events when the trace has them (the measured truth),
else from the ET-linked `k_dur_us`; GPU time from kernel/memcpy/memset events. An ET-only trace
has no measured time: `missing_timing` says so in one sentence the pages show.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from engine.trace import intervals as iv
from engine.trace.categories import classify
from engine.trace.vocab import GPU_CATS, cat_mask

if TYPE_CHECKING:
    from engine.trace.model import Trace


def self_time(events: pd.DataFrame) -> np.ndarray:
    """Exclusive (self) µs of every event, aligned with `events` rows: its duration minus the
    time of the events directly nested in it on the same thread (GPU: same stream)."""
    n = len(events)
    if n == 0:
        return np.zeros(0)
    start = events["ts_us"].to_numpy(float)
    dur = np.nan_to_num(events["dur_us"].to_numpy(float))
    lane_cols = [c for c in ("rank", "pid", "tid", "stream") if c in events.columns]
    lane = pd.MultiIndex.from_frame(events[lane_cols].astype(str)).codes if lane_cols else [np.zeros(n, np.int64)]
    lane_id = np.zeros(n, np.int64)
    for codes in lane:
        lane_id = lane_id * (int(np.max(codes)) + 2 if len(codes) else 1) + np.asarray(codes, np.int64)
    order = np.lexsort((-dur, start, lane_id))
    child = np.zeros(n)
    stack: list[tuple[float, int]] = []
    prev_lane = None
    for i in order.tolist():
        ln = lane_id[i]
        if ln != prev_lane:
            stack, prev_lane = [], ln
        s, e = start[i], start[i] + dur[i]
        while stack and stack[-1][0] <= s:
            stack.pop()
        if stack:
            pe, p = stack[-1]
            child[p] += min(e, pe) - s
        stack.append((e, i))
    return np.maximum(dur - child, 0.0)


def _kind(names: pd.Series) -> np.ndarray:
    """ "annotation" or "operator" per row (once per distinct name)."""
    s = names.astype(str)
    uniq = pd.unique(s)
    lut = {u: ("annotation" if classify(u) == "annotation" else "operator") for u in uniq}
    return s.map(lut).to_numpy(object)


def time_by(events: pd.DataFrame, cat: str | tuple[str, ...] = "cpu_op", key: str = "name") -> pd.DataFrame:
    """Self and total µs, count and mean of `events` of category `cat` grouped by `key`, largest
    self time first; `kind` tells annotations from operators (GPU work is all "operator")."""
    cats = (cat,) if isinstance(cat, str) else cat
    mask = cat_mask(events["cat"], tuple(cats))
    ev = events[mask]
    ev = ev.assign(self_us=self_time(events)[mask])
    g = ev.groupby(ev[key].astype(str), observed=True)
    out = pd.DataFrame(
        {
            "self_us": g["self_us"].sum(),
            "total_us": g["dur_us"].sum(),
            "count": g.size(),
            "mean_us": g["dur_us"].mean(),
        }
    )
    total = float(out["self_us"].sum())
    out["share_pct"] = 100.0 * out["self_us"] / total if total > 0 else 0.0
    out = out.sort_values("self_us", ascending=False, kind="stable")
    out.index.name = key
    out = out.reset_index()
    is_gpu = set(cats) <= set(GPU_CATS)
    out.insert(1, "kind", "operator" if is_gpu or key != "name" else _kind(out[key]))
    return out


def op_time_by(ops: pd.DataFrame, key: str = "category", time_col: str = "k_dur_us") -> pd.DataFrame:
    """ET-linked time of ops grouped by `key` (category, phase, name, module).

    Only call-tree leaves (no children) are counted, so nested ops are not counted twice."""
    leaves = ops[ops["n_children"] == 0] if "n_children" in ops.columns else ops
    t = leaves[time_col].fillna(0.0) if time_col in leaves.columns else pd.Series(0.0, index=leaves.index)
    g = t.groupby(leaves[key].astype(str)).agg(["sum", "size"])
    out = g.rename(columns={"sum": "total_us", "size": "count"}).sort_values("total_us", ascending=False)
    out.index.name = key
    return out.reset_index()


def op_self_us(ops: pd.DataFrame, time_col: str) -> np.ndarray:
    """Self time of every ET op: its linked time minus its direct children's (>= 0)."""
    t = ops[time_col].fillna(0.0).to_numpy(np.float64)
    if "parent" not in ops.columns or "id" not in ops.columns:
        return t
    child_sum = pd.Series(t, index=ops.index).groupby(ops["parent"].to_numpy()).sum()
    kids = ops["id"].map(child_sum).fillna(0.0).to_numpy(np.float64)
    if "rank" in ops.columns and ops["rank"].nunique() > 1:  # ids repeat across ranks
        key = ops["rank"].astype(str) + "/" + ops["parent"].astype(str)
        child_sum = pd.Series(t, index=ops.index).groupby(key.to_numpy()).sum()
        kids = (ops["rank"].astype(str) + "/" + ops["id"].astype(str)).map(child_sum).fillna(0.0).to_numpy()
    return np.maximum(t - kids, 0.0)


def top_ops(ops: pd.DataFrame, n: int = 25, time_col: str | None = None) -> pd.DataFrame:
    """The `n` ET operators with the most self time (GPU time if known, else CPU), one row per op
    id; annotations are left out (see `top_annotations`)."""
    if time_col is None:
        time_col = (
            "gpu_dur_us" if "gpu_dur_us" in ops.columns and ops["gpu_dur_us"].fillna(0).gt(0).any() else "k_dur_us"
        )
    cols = [c for c in ("id", "name", "category", "phase", "module", "k_dur_us", "gpu_dur_us") if c in ops.columns]
    t = ops[cols].copy()
    t["name"] = t["name"].astype(str)
    if time_col not in t.columns:
        return t.head(0)
    t.insert(2, "self_us", op_self_us(ops, time_col))
    if "category" in t.columns:
        t = t[t["category"].astype(str) != "annotation"]
    return t[t["self_us"] > 0].nlargest(n, "self_us").reset_index(drop=True)


def top_annotations(ops: pd.DataFrame, n: int = 25) -> pd.DataFrame:
    """Annotations (`## ... ##`, record_function labels) with their inclusive linked time: what
    they span, shown apart from the operators that do the work."""
    if "category" not in ops.columns or "k_dur_us" not in ops.columns:
        return ops.head(0)
    a = ops[ops["category"].astype(str) == "annotation"]
    cols = [c for c in ("id", "name", "phase", "k_dur_us") if c in a.columns]
    return a[cols].assign(name=a["name"].astype(str)).nlargest(n, "k_dur_us").reset_index(drop=True)


def missing_timing(trace: Trace) -> str | None:
    """Why a trace's breakdowns are empty, in one sentence (None when it has measured time)."""
    if getattr(trace, "has_kineto", False):
        return None
    return (
        "This trace is an Execution Trace alone: it records operators, shapes and dependencies "
        "but no timing, so there is no measured time to break down. Load it together with its "
        "Kineto (profiler) trace for times, kernels and the critical path."
    )


def gpu_idle(events: pd.DataFrame) -> pd.DataFrame:
    """Per GPU stream: span (first start to last end), busy (union of GPU work) and idle µs."""
    ev = events[cat_mask(events["cat"])]
    rows = []
    for (pid, tid), part in ev.groupby([ev["pid"].astype(str), ev["tid"].astype(str)], observed=True):
        s = part["ts_us"].to_numpy(float)
        e = s + part["dur_us"].to_numpy(float)
        span = float(e.max() - s.min())
        busy = iv.union_length(s, e)
        rows.append(
            {
                "gpu": pid,
                "stream": tid,
                "span_us": span,
                "busy_us": busy,
                "idle_us": span - busy,
                "idle_pct": 100.0 * (span - busy) / span if span > 0 else 0.0,
                "events": len(part),
            }
        )
    return pd.DataFrame(rows, columns=["gpu", "stream", "span_us", "busy_us", "idle_us", "idle_pct", "events"])


def kernel_table(events: pd.DataFrame, top: int | None = None) -> pd.DataFrame:
    """Per kernel name (cpu_op name on CPU-only traces, annotations apart): calls, total, mean,
    self, share % of self time, and for GPU kernels their class (engine.trace.kernels); names
    whole (the pages wrap them)."""
    gpu = bool(cat_mask(events["cat"]).any())
    t = kernel_columns(time_by(events, GPU_CATS if gpu else ("cpu_op",)), gpu)
    return t.head(top) if top else t


def kernel_columns(t: pd.DataFrame, gpu: bool) -> pd.DataFrame:
    """`kernel_table`'s columns from a `time_by` table (GPU work when `gpu`, else cpu_ops)."""
    t = t.rename(columns={"count": "calls"})[["name", "kind", "calls", "total_us", "mean_us", "self_us", "share_pct"]]
    if not gpu:
        t["kind"] = np.where(t["kind"] == "annotation", "annotation", "cpu_op")
    else:
        from engine.trace.kernels import classify_kernel

        t["kind"] = "kernel"
        t.insert(2, "class", [classify_kernel(n).value for n in t["name"].astype(str)])
    return t
