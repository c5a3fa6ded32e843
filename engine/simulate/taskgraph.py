"""The task graph's types: `TaskGraph` (tasks, lanes of time points, typed cross-lane edges) and
`EdgeKind`, plus the row helpers every stage shares.

Why a module of their own: the rule builders (edges.py, collectives.py), the scheduler and the
what-if edits all need these types, and graph.py builds the graph by calling the rule builders;
with the types in graph.py each rule module had to import it back (an import circle). The model
itself is described in graph.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

import numpy as np
import pandas as pd

from engine.trace import columns as _cols
from engine.trace.vocab import GPU_CATS, MARKER_CATS, RUNTIME_CATS  # noqa: F401  (re-exported)


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


# Columns of the events table the simulator reads (the rest are taken only for the prediction).
TASK_COLUMNS = (
    *("rank", "cat", "name", "pid", "tid", "ts_us", "dur_us", "correlation", "op_id", "_scale"),
    *("pg_name", "coll_seq", "comms_id"),  # collective matching keys (collectives.match_groups)
)


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
