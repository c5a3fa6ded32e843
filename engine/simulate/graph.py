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
  cudaEventRecord on the same thread.
- INTER_THREAD: gap heuristic (SimConfig.thread_block_us / thread_window_us).
- COLLECTIVE: see collectives.py; host collectives on backend threads: `edges.host_comm_edges`.

The rules are built in edges.py. Everything here and there is whole-array numpy work (sorts,
searchsorted, cumulative sums); Python loops run over lanes or stream groups, never over
events, so building the graph costs about as much as scheduling it (benchmarks/simulate.py,
"speed").
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

import numpy as np
import pandas as pd

from engine.simulate.config import SimConfig
from engine.trace import columns as _cols
from engine.trace.vocab import GPU_CATS, MARKER_CATS


class EdgeKind(Enum):
    INTRA_THREAD = "intra_thread"
    INTER_THREAD = "inter_thread"
    LAUNCH = "launch"
    SYNC = "sync"
    STREAM_FIFO = "stream_fifo"
    EVENT_WAIT = "event_wait"
    COLLECTIVE = "collective"
    USER = "user"


EDGE_KINDS = tuple(EdgeKind)
_KIND_CODE = {k: i for i, k in enumerate(EDGE_KINDS)}


@dataclass(kw_only=True, slots=True)
class TaskGraph:
    """Tasks (rows of `tasks`), their points on lanes, and cross-lane edges (all numpy arrays).

    tasks: one row per task (task i is row i): the TASK_COLUMNS of its events row, `row` (its
    position in `source`, the events table the graph was built from), `lane`, `gpu` (bool),
    `parent` (enclosing host task or -1), `sp`/`ep` (start/end point index). Why not every
    column: the simulation reads only these; the full rows are taken from `source` once, when
    the prediction is assembled (result.predicted_events), not on every build.
    Points are lane-contiguous: lane l owns points lane_ptr[l]:lane_ptr[l+1].
    launcher/launch_w: per task, the host task that launched it (-1) and the launch edge weight.
    """

    tasks: pd.DataFrame
    source: pd.DataFrame
    lanes: pd.DataFrame  # lane, rank, gpu, pid, tid
    lane_ptr: np.ndarray
    pt_task: np.ndarray
    pt_end: np.ndarray
    pt_time: np.ndarray  # original time relative to t0_us
    pt_d: np.ndarray  # segment length before the point (the simulated quantity edits change)
    pt_owner: np.ndarray  # task owning the segment that ends at this point, -1 = idle
    e_src: np.ndarray
    e_dst: np.ndarray
    e_w: np.ndarray
    e_kind: np.ndarray  # int8 codes into EDGE_KINDS
    t0_us: float
    launcher: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    launch_w: np.ndarray = field(default_factory=lambda: np.zeros(0))
    warnings: list[str] = field(default_factory=list)
    text_cache: dict[str, _cols.Distinct] = field(default_factory=dict)

    @property
    def n_tasks(self) -> int:
        return len(self.tasks)

    @property
    def cpu_only(self) -> bool:
        return not bool(self.tasks["gpu"].any())

    def text(self, col: str) -> _cols.Distinct:
        """A task column's distinct values as text and per-task codes, built once per graph (the
        rule builders test names and categories many times; the task table never changes)."""
        d = self.text_cache.get(col)
        if d is None:
            d = self.text_cache[col] = _cols.Distinct(self.tasks[col])
        return d

    def edge_counts(self) -> dict[str, int]:
        counts = np.bincount(self.e_kind.astype(np.int64), minlength=len(EDGE_KINDS))
        out = {k.value: int(c) for k, c in zip(EDGE_KINDS, counts)}
        gpu_lane = self.lanes["gpu"].to_numpy()
        per_lane = np.diff(self.lane_ptr) - 1
        out[EdgeKind.INTRA_THREAD.value] += int(per_lane[~gpu_lane].clip(0).sum())
        out[EdgeKind.STREAM_FIFO.value] += int(per_lane[gpu_lane].clip(0).sum())
        return out

    def add_edges(self, src: np.ndarray, dst: np.ndarray, w: np.ndarray, kind: EdgeKind) -> None:
        self.e_src = np.concatenate([self.e_src, np.asarray(src, np.int64)])
        self.e_dst = np.concatenate([self.e_dst, np.asarray(dst, np.int64)])
        self.e_w = np.concatenate([self.e_w, np.asarray(w, np.float64)])
        self.e_kind = np.concatenate([self.e_kind, np.full(len(src), _KIND_CODE[kind], np.int8)])

    def scale_tasks(self, factor: np.ndarray) -> None:
        """Multiply the time each task owns (its self time on host, its duration on GPU)."""
        own = self.pt_owner
        m = own >= 0
        self.pt_d[m] *= factor[own[m]]


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


# Columns of the events table the simulator reads (the rest are taken only for the prediction).
TASK_COLUMNS = ("rank", "cat", "name", "pid", "tid", "ts_us", "dur_us", "correlation", "op_id", "_scale")


def task_rows(events: pd.DataFrame, cat: _cols.Distinct | None = None) -> np.ndarray:
    """Rows of an events table that occupy a thread or stream (markers and bad times dropped);
    `cat`: the events' category column as Distinct, when the caller has it."""
    ts = events["ts_us"].to_numpy(np.float64)
    dur = events["dur_us"].to_numpy(np.float64)
    marker = (cat or _cols.Distinct(events["cat"])).where(lambda c: c in MARKER_CATS)
    return np.flatnonzero(np.isfinite(ts) & np.isfinite(dur) & (dur >= 0) & ~marker)


def take_columns(events: pd.DataFrame, rows: np.ndarray, columns=None) -> dict:
    """The `columns` of `events.iloc[rows]` as arrays (rows ascending). Why by hand: pandas'
    take and column inserts cost ~1 ms per column at 75k rows; a categorical is its codes, a
    nullable integer its data and mask, and all rows is the columns themselves."""
    cols = [c for c in (events.columns if columns is None else columns) if c in events.columns]
    whole = len(rows) == len(events)  # ascending rows, as many as the table: the identity
    data: dict = {}
    for c in cols:
        arr = events[c].array
        if whole:
            data[c] = arr
        elif isinstance(arr, pd.Categorical):
            data[c] = pd.Categorical.from_codes(arr.codes[rows], dtype=arr.dtype, validate=False)
        elif isinstance(arr, pd.arrays.IntegerArray | pd.arrays.FloatingArray | pd.arrays.BooleanArray):
            data[c] = type(arr)(arr._data[rows], arr._mask[rows])
        else:
            data[c] = arr.take(rows)
    return data


def take_rows(events: pd.DataFrame, rows: np.ndarray, columns=None) -> pd.DataFrame:
    """`events.iloc[rows]` with a fresh index, restricted to `columns` (see take_columns)."""
    return pd.DataFrame(take_columns(events, rows, columns), copy=False)


def build_graph(events: pd.DataFrame, config: SimConfig | None = None) -> TaskGraph:
    """The task graph of an events table (the `events` of a `Trace`, see engine/trace/model.py)."""
    from engine.simulate import edges
    from engine.simulate.collectives import collective_edges

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
