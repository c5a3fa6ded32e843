"""The normalized trace model: the one structure every other part of the engine reads.

Loaders for ET and Kineto files produce a `Trace`; nothing else parses files. All tables are
pandas DataFrames with the columns documented below (a loader that has no value writes the
null of the column's dtype). String columns with few distinct values (`name`, `schema`, `cat`,
`category`, `phase`, ...) are pandas `category` dtype: that is how names are interned to
integer ids (`df.name.cat.codes`), and it keeps the Parquet cache small.

ops (one row per ET node, in file order; empty when the trace has no ET)
    id          int64    ET node id (unique per rank)
    rank        int32    rank the trace belongs to (0 when unknown)
    name        category operator / annotation name, e.g. "aten::addmm", "## forward ##"
    parent      int64    parent node id (`parent` in 1.0.1, `ctrl_deps` in chakra layouts); -1 = root
    depth       int32    depth in the call tree (root children = 0)
    tid         int64    ET thread id (`tid`)
    fw_tid      int64
    fw_parent   int64
    rf_id       int64    record-function id (links to Kineto "Record function id"); -1 if none
    seq_id      int64    autograd sequence number; -1 if none
    scope       int64    RecordScope (0 FUNCTION, 1 BACKWARD_FUNCTION, 2 TORCHSCRIPT, ... 7 USER_SCOPE)
    schema      category op_schema string, e.g. "aten::addmm(Tensor self, ...) -> Tensor"; "" if none
    category    category one of CATEGORIES below
    inputs      object   JSON text (str): {"values": [...], "shapes": [...], "types": [...], "strides": [...]?}
    outputs     object   JSON text (str), same layout as inputs
    attrs       object   JSON text (str) of any other per-node attributes (kernel_backend, kernel_file, ...)
    n_children  int32    number of direct children
    phase       category "forward" | "backward" | "optimizer" | "other"
    module      category innermost module/annotation label ("" if none), e.g. "nn.Module: Linear_0"
  after linking with Kineto (NaN / -1 when unlinked):
    k_ts_us     float64  start of the linked Kineto cpu_op
    k_dur_us    float64  its duration
    gpu_dur_us  float64  total duration of GPU kernels/memcpy/memset launched under this op (incl. children)
  loader bookkeeping:
    src         int16    index of the file this row came from in meta["sources"]

tensors (one row per tensor occurrence in an op's inputs or outputs; tensor lists are flattened)
    op_id       int64    ET node id
    rank        int32
    io          category "in" | "out"
    arg         int32    argument position in inputs/outputs
    sub         int32    position inside a tensor list (0 for a plain tensor)
    tensor_id   int64
    storage_id  int64
    offset      int64    storage offset in elements
    numel       int64
    itemsize    int32
    dtype       category torch dtype name without prefix, e.g. "float32", "int64", "bool" ("" if unknown)
    shape       object   tuple[int, ...]
    strides     object   tuple[int, ...] or None when the schema does not record strides
    device      category e.g. "cpu", "cuda:0"

events (one row per Kineto "X" (complete) event; `meta["events"]` counts every event in the file)
    ev          int64    row id, stable across the cache
    rank        int32
    cat         category "cpu_op", "user_annotation", "python_function", "cuda_runtime",
                         "cuda_driver", "kernel", "gpu_memcpy", "gpu_memset", "cuda_sync",
                         "gpu_user_annotation", ...
    name        category
    pid         category process id or GPU device id, as text
    tid         category thread id or stream id, as text
    ts_us       float64  start, microseconds (as in the file)
    dur_us      float64  duration, microseconds
    device      Int64    GPU device (GPU-side events), <NA> on host events
    stream      Int64    GPU stream (GPU-side events and launches that record it)
    correlation Int64    runtime launch <-> GPU activity
    external_id Int64    "External id"
    rf_id       Int64    "Record function id" (newer traces)
    seq_num     Int64    "Sequence number"
    fwd_tid     Int64    "Fwd thread id"
    pg_name     category a collective's process group ("Process Group Name", else "pg_name"; "" if none)
    coll_name   category "Collective name" of that event, e.g. "allreduce" ("" without a process group)
    coll_seq    Int64    "seq": the collective's sequence number in its process group (newer PyTorch)
    comms_id    Int64    "comms_id": one id shared by a collective's members across ranks (PyTorch 2026)
    src         int16    index of the file in meta["sources"]
    op_id       Int64    ET node id of the op this event belongs to after linking: the linked host op,
                         the innermost linked op enclosing a runtime launch, or a GPU event's launcher
                         (<NA> when unlinked or no ET was loaded)

flows (one row per flow event: "s"/"f"/"t" phases)
    rank int32, id int64, cat category ("ac2g", "fwdbwd", ...), ph category, ts_us float64,
    pid category, tid category, src int16

meta (`TraceMeta`, a JSON-serializable TypedDict)
    sources      list of {"path", "kind", "schema", "nodes" | "events", "rank", "sha256"}
    kind         "execution_trace" | "kineto" | "execution_trace+kineto"
    schema       ET schema string as in the file ("" for Kineto-only)
    nodes        ET node count as in the file(s) (sum over ranks)
    events       Kineto event count as in the file(s) (len(traceEvents), summed)
    ranks        sorted list of ranks present
    world_size   int | None (from distributedInfo)
    warnings     list of str (e.g. unknown schema loaded through the nearest layout)
    link         {"link_rate": float, "linked": int, "et_ops": int, "method": "rf_id"|"external_id", ...}
    iterations   list of {"name": "ProfilerStep#N", "ts_us": float, "dur_us": float, "rank": int}
    content_hash sha256 of the inputs (the cache key)
    resources    {"pt2_et_resources/x.py": "<never executed unless the user opts in>"} names only
    process_names / thread_names   Kineto "M" metadata: {"pid": name}, {"pid/tid": name}
    device_properties              Kineto "deviceProperties" (list of dicts)
  sources[i] also carries "rank_in_file" (distributedInfo.rank or None) and "world_size".
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, TypedDict

import pandas as pd

CATEGORIES = (
    "compute",  # does arithmetic: aten::addmm, aten::conv2d, aten::add_, ...
    "communication",  # collectives and p2p: c10d::*, nccl:*, record_param_comms, all_to_all
    "view",  # view/metadata only: aten::view, aten::t, aten::as_strided, aten::size ...
    "allocation",  # aten::empty*, aten::zeros/ones/full (alloc + fill is still "allocation")
    "autograd",  # autograd wrappers: "autograd::engine::evaluate_function: ...", "*Backward0"
    "annotation",  # labels: "## ... ##", "[pytorch|profiler|...]", ProfilerStep#N, nn.Module: ...
    "custom",  # non-aten operators (fbgemm::, triton kernels, user ops)
)
PHASES = ("forward", "backward", "optimizer", "other")


class TraceMeta(TypedDict, total=False):
    """`Trace.meta`: the keys the module docstring lists, typed (mypy checks every reader)."""

    sources: list[dict[str, Any]]
    kind: str
    schema: str
    schemas: list[str]
    nodes: int
    events: int
    ranks: list[int]
    world_size: int | None
    warnings: list[str]
    link: dict[str, Any] | None  # None: nothing to link (ET or Kineto alone)
    iterations: list[dict[str, Any]]
    content_hash: str
    resources: dict[str, str]
    process_names: dict[str, str]
    thread_names: dict[str, str]
    device_properties: list[dict[str, Any]]
    files: list[str]
    num_threads: int  # the capture's intra-op threads (engine.replay matches them)
    capture: dict[str, Any]  # a capture's own meta, when a loader found it
    synthesized: dict[str, Any]  # engine.compose.synth's report on a Kineto-only input
    simulated: dict[str, Any]  # a predicted trace: {"edits", "tasks"} (engine.simulate.result)
    rank: int  # a one-rank trace built rank by rank (engine.simulate.fleet)


@dataclass(kw_only=True, slots=True)
class Trace:
    """A loaded trace: ET tables, Kineto tables and metadata (see module docstring for columns)."""

    ops: pd.DataFrame
    tensors: pd.DataFrame
    events: pd.DataFrame
    flows: pd.DataFrame
    meta: TraceMeta = field(default_factory=lambda: TraceMeta())

    @property
    def has_et(self) -> bool:
        return len(self.ops) > 0

    @property
    def has_kineto(self) -> bool:
        return len(self.events) > 0

    @property
    def content_hash(self) -> str:
        return self.meta.get("content_hash", "")

    def op_args(self, op_id: int, rank: int | None = None) -> tuple[dict, dict]:
        """Parsed (inputs, outputs) dicts of one op: {"values", "shapes", "types"[, "strides"]}."""
        row = self.op_row(op_id, rank)
        return json.loads(row["inputs"]), json.loads(row["outputs"])

    def op_row(self, op_id: int, rank: int | None = None) -> pd.Series:
        ops = self.ops
        from engine.trace.ranks import of_rank

        ops = of_rank(ops, rank)
        rows = ops[ops["id"] == op_id]
        if rows.empty:
            from engine.errors import TraceError

            raise TraceError(f"no ET node with id {op_id}" + (f" on rank {rank}" if rank is not None else ""))
        return rows.iloc[0]
