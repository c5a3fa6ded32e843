"""Task graph: a Kineto events table turned into lanes of time points plus typed cross-lane edges.

Why points and lanes instead of a task DAG: the scheduler must run at millions of tasks per
second in numpy. A *lane* is one host thread or one GPU stream of one rank; every task puts a
start and an end point on its lane, sorted by original time (nested host calls stay nested).
Between consecutive points of a lane lies a *segment* with a fixed length `d` (the original
time, owned by the innermost open task, or idle). A point's simulated time is

    T[i] = max(T[i-1] + d[i], max over incoming edges e of T[src(e)] + w(e))

which per lane is a cumulative max over a cumulative sum (see schedule.py). Intra-thread order
and intra-stream FIFO are the lanes themselves; the cross-lane edges are typed (`EdgeKind`).

Every inferred edge gets a weight that reproduces the original timing when nothing changes
(a sync's post-wait time, a kernel's launch latency), so an unchanged trace simulates to
itself; what-if edits then change segment lengths or add/copy tasks.

Dependency rules (each documented on the function that builds it):
- LAUNCH: runtime call -> GPU task with the same (rank, correlation id).
- SYNC: host calls matching `SimConfig.sync_regex` (cudaDeviceSynchronize, cudaStreamSynchronize,
  cudaEventSynchronize, synchronous cudaMemcpy, hip*) wait for the last GPU task of each stream
  of their rank that ended before they returned (one stream when Kineto's `cuda_sync` event
  names it).
- EVENT_WAIT: cudaStreamWaitEvent (stream from its `cuda_sync` "Stream Wait Event") makes the
  waiting stream's next task wait for the task launched last before the preceding
  cudaEventRecord on the same thread; unrecorded: a late GPU task that starts when another
  stream's task ends waits for it (edges.implicit_stream_waits).
- INTER_THREAD: gap heuristic (SimConfig.thread_block_us / thread_window_us).
- COLLECTIVE: see collectives.py; host collectives on backend threads: `edges.host_comm_edges`.

The graph types (`TaskGraph`, `EdgeKind`) live in taskgraph.py, below the rule builders that
fill them; this module is the builder. The rules are built in edges.py. Everything here and
there is whole-array numpy work (sorts, searchsorted, cumulative sums); Python loops run over
lanes or stream groups, never over events, so building the graph costs about as much as
scheduling it (benchmarks/simulate.py, "speed").
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from engine.simulate import edges
from engine.simulate.collectives import collective_edges
from engine.simulate.config import SimConfig
from engine.simulate.taskgraph import TASK_COLUMNS, TaskGraph, take_columns, task_rows
from engine.trace import columns as _cols
from engine.trace.vocab import GPU_CATS


def _codes(col: pd.Series) -> tuple[np.ndarray, list[str]]:
    """Integer codes (missing -> a trailing "") and their labels, without per-row strings."""
    d = _cols.Distinct(col)
    return d.codes, d.values


def _lane_ids(cols: dict, gpu: np.ndarray) -> tuple[np.ndarray, pd.DataFrame]:
    """Lane of every task: one per (rank, host/GPU, pid, tid), ordered rank, host first, pid, tid.

    Why a packed integer key: the lane is a 4-part key over every row; packing the parts' codes
    into one int64 and marking the present keys in a dense table (or np.unique when the key space
    is sparse) avoids hashing tuples or strings per row."""
    pid_c, pid_u = _codes(pd.Series(cols["pid"], copy=False))
    tid_c, tid_u = _codes(pd.Series(cols["tid"], copy=False))
    rank = np.asarray(cols["rank"], dtype=np.int64)
    r0 = int(rank.min())
    npid, ntid = len(pid_u) + 1, len(tid_u) + 1
    key = (((rank - r0) * 2 + gpu) * npid + pid_c) * ntid + tid_c
    kmax = int(key.max())
    if kmax < 8 * len(key) + (1 << 16):
        present = np.zeros(kmax + 1, bool)
        present[key] = True
        uniq = np.flatnonzero(present)
        codes = (np.cumsum(present) - 1)[key]
    else:
        uniq, codes = np.unique(key, return_inverse=True)
    pid_s = np.asarray(pid_u, dtype=object)[(uniq // ntid) % npid]
    tid_s = np.asarray(tid_u, dtype=object)[uniq % ntid]
    rg = uniq // (ntid * npid)
    l_rank, l_gpu = rg // 2 + r0, (rg % 2).astype(bool)
    # stable lane order: rank, host before GPU, then pid/tid text
    order = np.lexsort((tid_s, pid_s, l_gpu, l_rank))
    remap = np.empty(len(order), np.int64)
    remap[order] = np.arange(len(order))
    lanes = pd.DataFrame(
        {
            "lane": np.arange(len(order)),
            "rank": l_rank[order],
            "gpu": l_gpu[order],
            "pid": pid_s[order],
            "tid": tid_s[order],
        }
    )
    return remap[codes], lanes


def build_graph(events: pd.DataFrame, config: SimConfig | None = None) -> TaskGraph:
    """The task graph of an events table (the `events` of a `Trace`, see engine/trace/model.py)."""
    cfg = config or SimConfig()
    ev_cat = _cols.Distinct(events["cat"])
    rows = task_rows(events, ev_cat)
    data = take_columns(events, rows, TASK_COLUMNS)
    n = len(rows)
    cat_text = _cols.Distinct(pd.Series(data["cat"], copy=False))
    gpu = cat_text.where(lambda c: c in GPU_CATS)
    lane, lanes = _lane_ids(data, gpu) if n else (np.zeros(0, np.int64), _empty_lanes())
    ts = np.asarray(data["ts_us"], dtype=np.float64)
    dur = np.asarray(data["dur_us"], dtype=np.float64)
    t0 = float(ts.min()) if n else 0.0
    rel = ts - t0

    # ---- points: start i, end n+i, sorted by (lane, time, prio, secondary) ----
    time = np.concatenate([rel, rel + dur])
    prio = np.concatenate([np.ones(n, np.int8), np.where(dur > 0, 0, 2).astype(np.int8)])
    second = np.concatenate([-dur, -rel])
    lane2 = np.concatenate([lane, lane])
    order = _point_order(lane2, time, prio, second, len(lanes))
    pt_end = order >= n
    pt_task = order - n * pt_end
    pt_time = time[order]
    pt_lane = lane[pt_task]
    lane_ptr = np.searchsorted(pt_lane, np.arange(len(lanes) + 1))
    first = np.zeros(2 * n, bool)
    first[lane_ptr[:-1][lane_ptr[:-1] < 2 * n]] = True
    pt_d = np.empty(2 * n)
    pt_d[0:1] = pt_time[0:1]
    pt_d[1:] = np.diff(pt_time)
    pt_d[first] = pt_time[first]
    sp = np.empty(n, np.int64)
    ep = np.empty(n, np.int64)
    sp[order[order < n]] = np.flatnonzero(~pt_end)  # start point of task i
    ep[order[order >= n] - n] = np.flatnonzero(pt_end)

    parent = _host_parents(pt_task, pt_end, pt_lane, gpu, n)
    pt_owner = _owners(pt_task, pt_end, first, gpu, parent)
    data.update(row=rows, lane=lane, gpu=gpu, parent=parent, sp=sp, ep=ep)
    tasks = pd.DataFrame(data, copy=False)

    g = TaskGraph(
        tasks=tasks,
        source=events,
        lanes=lanes,
        lane_ptr=lane_ptr,
        pt_task=pt_task,
        pt_end=pt_end,
        pt_time=pt_time,
        pt_d=pt_d,
        pt_owner=pt_owner,
        e_src=np.zeros(0, np.int64),
        e_dst=np.zeros(0, np.int64),
        e_w=np.zeros(0),
        e_kind=np.zeros(0, np.int8),
        t0_us=t0,
        launcher=np.full(n, -1, np.int64),
        launch_w=np.zeros(n),
        warnings=[],
        text_cache={"cat": cat_text},
    )
    edges.build_edges(g, cfg, events, np.flatnonzero(ev_cat.where(lambda c: c == "cuda_sync")))
    collective_edges(g)
    return g


def _point_order(lane2: np.ndarray, time: np.ndarray, prio: np.ndarray, second: np.ndarray, nlanes: int) -> np.ndarray:
    """Stable order of points by (lane, time, prio, second), same as np.lexsort of the four.

    Why not lexsort: it sorts all four keys over every point; here two stable sorts (time, then
    the small-integer lane: radix) order almost everything and only runs of equal (lane, time)
    (nested calls that start together, zero-length events) are sorted on the tie-breakers."""
    o = np.argsort(time, kind="stable")
    lk = lane2[o]
    o = o[np.argsort(lk.astype(np.int16) if nlanes < 32767 else lk, kind="stable")]
    lo, to = lane2[o], time[o]
    eq = (lo[1:] == lo[:-1]) & (to[1:] == to[:-1])
    if eq.any():
        m = np.zeros(len(o), bool)
        m[1:] |= eq
        m[:-1] |= eq
        new = np.ones(len(o), bool)
        new[1:] = ~eq
        run = np.cumsum(new)[m]
        sub = o[m]
        o[m] = sub[np.lexsort((second[sub], prio[sub], run))]
    return o


def _empty_lanes() -> pd.DataFrame:
    return pd.DataFrame({"lane": [], "rank": [], "gpu": [], "pid": [], "tid": []})


def _host_parents(pt_task, pt_end, pt_lane, gpu, n) -> np.ndarray:
    """Enclosing host task of every task (-1 at top level or on GPU).

    Why this works without a stack: depth after each point is a cumulative sum; the parent of a
    task starting at depth D is the last start at depth D-1 before it (on its lane). Starts
    sorted by (depth, position) turn that into one searchsorted for all tasks.
    """
    parent = np.full(n, -1, np.int64)
    host_pt = ~gpu[pt_task]
    if not host_pt.any():
        return parent
    step = np.where(pt_end, -1, 1)
    step[~host_pt] = 0
    depth = np.cumsum(step)
    starts = np.flatnonzero(~pt_end & host_pt)
    d = depth[starts]
    small = d.min() > -32768 and d.max() < 32767
    o = np.argsort(d.astype(np.int16) if small else d, kind="stable")  # small ints: radix sort
    ds, ss = d[o], starts[o]
    span = len(pt_task) + 1
    key = ds * span + ss  # ascending: by depth, then position
    kid = ds >= 2
    kids, kd = ss[kid], ds[kid]
    pos = np.searchsorted(key, (kd - 1) * span + kids) - 1  # ascending queries: fast search
    p = ss[np.maximum(pos, 0)]
    ok = (pos >= 0) & (depth[p] == kd - 1) & (pt_lane[p] == pt_lane[kids])
    parent[pt_task[kids[ok]]] = pt_task[p[ok]]
    return parent


def _owners(pt_task, pt_end, first, gpu, parent) -> np.ndarray:
    """Task owning the segment that ends at each point (-1 = idle)."""
    own = np.empty(len(pt_task), np.int64)
    if len(pt_task):
        prev_task, prev_end = pt_task[:-1], pt_end[:-1]
        own[1:] = np.where(prev_end, parent[prev_task], prev_task)
    on_gpu = gpu[pt_task]
    own[on_gpu] = np.where(pt_end[on_gpu], pt_task[on_gpu], -1)
    own[first] = -1
    return own
