"""GPU queue length, launch delay and idle time split (HTA-class views of one Kineto trace).

Every GPU task (kernel, memcpy, memset) is paired with the runtime call that launched it by
(rank, correlation id): `cudaLaunchKernel`, `cuLaunchKernel`, `cudaMemsetAsync`, `hipLaunchKernel`,
... (any event of `vocab.RUNTIME_CATS`). Tasks without a launch (no correlation, or a trace of GPU
activity only) are left out of the launch views and said apart in the idle split.

Definitions (a stream is (rank, device, stream); times in µs as in the file):
- launch delay of a task = task start - start of its launch call (queueing plus launch latency).
- queue length at a launch = tasks on the same stream launched strictly before this launch call
  started and not yet finished at that instant (end > launch start); the task being launched is
  not counted. Counted with two sorted searches per stream: launched-before minus ended-by.
- GPU idle = the gaps of one device (rank, device) between the union of all its streams' tasks,
  from its first task's start to its last task's end. Each gap [a, b) ends where a task starts;
  with L the start of that task's launch call:
    host_wait_us   = clip(L - a, 0, b - a): the GPU was idle and the host had not yet launched
                     the next work (the host was the bottleneck);
    kernel_wait_us = (b - a) - host_wait_us: the next work was already launched and the GPU still
                     waited: launch latency, a dependency on another stream or an event/sync;
    unlinked_us    = gaps whose next task has no launch call (neither of the above can be told).
- the kernels the GPU waited for: the gaps with the largest host wait, with the task that ended
  each gap and the call that launched it.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from engine.trace import columns as _cols
from engine.trace import intervals as iv
from engine.trace.kernels import kernel_classes
from engine.trace.vocab import GPU_CATS, RUNTIME_CATS

LAUNCH_COLUMNS = (
    "rank",
    "device",
    "stream",
    "name",
    "class",
    "launch",
    "launch_ts_us",
    "ts_us",
    "dur_us",
    "launch_delay_us",
    "queue_len",
)


def _int(s: pd.Series) -> np.ndarray:
    return pd.to_numeric(s, errors="coerce").astype("Float64").fillna(-1).to_numpy(np.int64)


def launches(events: pd.DataFrame) -> pd.DataFrame:
    """One row per launched GPU task (`LAUNCH_COLUMNS`), by stream then launch time."""
    if not len(events) or "correlation" not in events:
        return pd.DataFrame({c: [] for c in LAUNCH_COLUMNS})
    gpu_m = _cols.isin(events["cat"], GPU_CATS) & events["correlation"].notna().to_numpy()
    host_m = _cols.isin(events["cat"], RUNTIME_CATS) & events["correlation"].notna().to_numpy()
    g = events.loc[gpu_m]
    h = events.loc[host_m, ["rank", "correlation", "name", "ts_us"]]
    h = h.drop_duplicates(["rank", "correlation"], keep="first")
    cls = kernel_classes(g)
    df = pd.DataFrame(
        {
            "rank": g["rank"].to_numpy(np.int64),
            "device": _int(g["device"]),
            "stream": _int(g["stream"]),
            "name": g["name"].astype(str).to_numpy(),
            "class": cls,
            "correlation": g["correlation"].to_numpy(np.int64),
            "ts_us": g["ts_us"].to_numpy(np.float64),
            "dur_us": np.nan_to_num(g["dur_us"].to_numpy(np.float64)),
        }
    )
    hk = pd.DataFrame(
        {
            "rank": h["rank"].to_numpy(np.int64),
            "correlation": h["correlation"].to_numpy(np.int64),
            "launch": h["name"].astype(str).to_numpy(),
            "launch_ts_us": h["ts_us"].to_numpy(np.float64),
        }
    )
    df = df.merge(hk, on=["rank", "correlation"], how="inner")
    if not len(df):
        return pd.DataFrame({c: [] for c in LAUNCH_COLUMNS})
    df["launch_delay_us"] = df["ts_us"] - df["launch_ts_us"]
    df = df.sort_values(["rank", "device", "stream", "launch_ts_us"], kind="stable").reset_index(drop=True)
    q = np.zeros(len(df), np.int64)
    for _, idx in df.groupby(["rank", "device", "stream"], sort=False).indices.items():
        lt = df["launch_ts_us"].to_numpy()[idx]  # sorted within the stream
        ends = np.sort(df["ts_us"].to_numpy()[idx] + df["dur_us"].to_numpy()[idx])
        before = np.searchsorted(lt, lt, side="left")
        done = np.searchsorted(ends, lt, side="right")
        q[idx] = np.maximum(before - done, 0)
    df["queue_len"] = q
    return df[list(LAUNCH_COLUMNS)]


def stream_summary(lz: pd.DataFrame) -> pd.DataFrame:
    """Per stream: tasks, queue length mean / max, launch delay median / p90 / max (µs)."""
    cols = ["rank", "device", "stream", "tasks", "queue_len_mean", "queue_len_max"]
    cols += ["launch_delay_median_us", "launch_delay_p90_us", "launch_delay_max_us"]
    if not len(lz):
        return pd.DataFrame({c: [] for c in cols})
    g = lz.groupby(["rank", "device", "stream"], sort=True)
    out = g.agg(
        tasks=("queue_len", "size"),
        queue_len_mean=("queue_len", "mean"),
        queue_len_max=("queue_len", "max"),
        launch_delay_median_us=("launch_delay_us", "median"),
        launch_delay_p90_us=("launch_delay_us", lambda s: float(np.percentile(s, 90))),
        launch_delay_max_us=("launch_delay_us", "max"),
    ).reset_index()
    return out[cols]


GAP_COLUMNS = ("rank", "device", "gap_start_us", "idle_us", "host_wait_us", "kernel_wait_us", "next_task", "launch")


def idle_gaps(events: pd.DataFrame, lz: pd.DataFrame | None = None) -> pd.DataFrame:
    """Every idle gap of every device with its host / kernel wait split (module docstring);
    `lz`: `launches(events)` when the caller has it already."""
    gpu_m = _cols.isin(events["cat"], GPU_CATS) if len(events) else np.zeros(0, bool)
    rows: list[pd.DataFrame] = []
    if not gpu_m.any():
        return pd.DataFrame({c: [] for c in GAP_COLUMNS})
    g = events.loc[gpu_m]
    lz = launches(events) if lz is None else lz
    launch_of = {}
    if len(lz):
        key = zip(lz["rank"], lz["device"], lz["ts_us"], lz["name"], strict=True)
        launch_of = {k: (lt, nm) for k, lt, nm in zip(key, lz["launch_ts_us"], lz["launch"], strict=True)}
    dev = _int(g["device"])
    rank = g["rank"].to_numpy(np.int64)
    ts = g["ts_us"].to_numpy(np.float64)
    end = ts + np.nan_to_num(g["dur_us"].to_numpy(np.float64))
    names = g["name"].astype(str).to_numpy()
    for r, d in sorted(set(zip(rank.tolist(), dev.tolist(), strict=True))):
        m = (rank == r) & (dev == d)
        u = iv.union(ts[m], end[m])
        if len(u) < 2:
            continue
        a, b = u[:-1, 1], u[1:, 0]
        order = np.argsort(ts[m], kind="stable")
        ts_m, nm_m = ts[m][order], names[m][order]
        nxt = np.searchsorted(ts_m, b, side="left")  # the first task starting at the gap's end
        lt = np.full(len(b), np.nan)
        ln = np.full(len(b), "", dtype=object)
        for k, j in enumerate(nxt.tolist()):
            hit = launch_of.get((r, d, ts_m[j], nm_m[j]))
            if hit is not None:
                lt[k], ln[k] = hit
        gap = b - a
        host = np.where(np.isfinite(lt), np.clip(lt - a, 0, gap), np.nan)
        rows.append(
            pd.DataFrame(
                {
                    "rank": r,
                    "device": d,
                    "gap_start_us": a,
                    "idle_us": gap,
                    "host_wait_us": host,
                    "kernel_wait_us": gap - host,
                    "next_task": nm_m[nxt],
                    "launch": ln,
                }
            )
        )
    if not rows:
        return pd.DataFrame({c: [] for c in GAP_COLUMNS})
    return pd.concat(rows, ignore_index=True)


def idle_split(gaps: pd.DataFrame) -> dict:
    """Totals of `idle_gaps`: idle_us, host_wait_us, kernel_wait_us, unlinked_us, gaps."""
    linked = gaps["host_wait_us"].notna()
    return {
        "gaps": len(gaps),
        "idle_us": round(float(gaps["idle_us"].sum()), 3),
        "host_wait_us": round(float(gaps.loc[linked, "host_wait_us"].sum()), 3),
        "kernel_wait_us": round(float(gaps.loc[linked, "kernel_wait_us"].sum()), 3),
        "unlinked_us": round(float(gaps.loc[~linked, "idle_us"].sum()), 3),
    }


def waited_for(gaps: pd.DataFrame, top: int = 20) -> pd.DataFrame:
    """The `top` gaps with the largest host wait: the tasks the GPU waited for the host to launch."""
    w = gaps[gaps["host_wait_us"].fillna(0) > 0]
    return w.sort_values(["host_wait_us", "gap_start_us"], ascending=[False, True]).head(top).reset_index(drop=True)


__all__ = ["idle_gaps", "idle_split", "launches", "stream_summary", "waited_for"]
