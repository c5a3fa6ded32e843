"""The one event vocabulary: which Kineto categories are GPU work, runtime calls or markers, and
the one answer to "is this communication?".

Why one module: the same questions were answered in five places (trace categories, replay,
the simulator's edges and result, the Analysis page) with five different rules, so the same
trace showed different communication times on different pages (issue 23). Everything that asks
imports from here.

Category groups (Kineto `cat`):
  GPU_CATS           work that occupies a GPU stream: kernels, memcpy, memset
  GPU_ACTIVITY_CATS  every GPU-side row (work plus GPU annotations/instructions): has a device id
  RUNTIME_CATS       host runtime/driver calls (launches, syncs): the CPU side of GPU work
  MARKER_CATS        rows that mark something rather than occupy a thread or stream
  ANNOTATION_CATS    host labels (record_function, python stacks): they nest work, they are not work
  LEGACY_CATS        the 2020-21 profiler's names (Operator, Kernel, Runtime, Memcpy, Memset),
                     renamed to the ones above by both parsers (the loader's and the store's)

Communication (`is_comm`): a name is communication when
  1. it starts with a backend or c10d prefix (`COMM_PREFIXES`: c10d::, c10d_functional::,
     nccl:, gloo:, mpi:, ucc:, record_param_comms), or
  2. it names an NCCL/RCCL/MSCCL kernel or op (contains nccl, rccl or msccl), or
  3. it is not an aten/prims op and names a collective (all_reduce / allreduce, all_gather,
     all_to_all, reduce_scatter; broadcast, send, recv, isend, irecv, barrier as whole words,
     so `aten::broadcast_tensors` and elementwise "Broadcast" functors are not communication).
`BACKEND_PREFIXES` narrows it to the backend's own op (gloo:all_reduce, nccl:all_reduce): on a
CPU-only rank that op is the transfer; on a GPU rank it only enqueues the kernel.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the vocabulary itself is plain Python: the CLI's parser reads it
    import numpy as np
    import pandas as pd

GPU_CATS: tuple[str, ...] = ("kernel", "gpu_memcpy", "gpu_memset")
GPU_ACTIVITY_CATS: tuple[str, ...] = (*GPU_CATS, "gpu_user_annotation", "gpu_instr")
RUNTIME_CATS: tuple[str, ...] = ("cuda_runtime", "cuda_driver", "hip_runtime", "hip_driver", "runtime")
MARKER_CATS: tuple[str, ...] = ("Trace", "cuda_sync", "gpu_user_annotation", "gpu_instr", "ac2g", "fwdbwd")
ANNOTATION_CATS: tuple[str, ...] = ("user_annotation", "python_function", "gpu_user_annotation")
STEP_PREFIX = "ProfilerStep#"

LEGACY_CATS: dict[str, str] = {
    "Operator": "cpu_op",
    "Kernel": "kernel",
    "Runtime": "cuda_runtime",
    "Memcpy": "gpu_memcpy",
    "Memset": "gpu_memset",
}
"""The 2020-21 profiler's category names (capitalised; Trace Event Format array form) -> today's.
A legacy `Runtime` call whose name starts with `hip` is a `hip_runtime` (`modern_cat`)."""


def modern_cat(cat: str, name: str) -> str:
    """Today's category of an event written with a legacy one (`LEGACY_CATS`), else `cat`."""
    new = LEGACY_CATS.get(cat)
    if new is None:
        return cat
    if new == "cuda_runtime" and name.startswith("hip"):
        return "hip_runtime"
    return new


BACKEND_PREFIXES: tuple[str, ...] = ("gloo:", "nccl:", "mpi:", "ucc:")
COMM_PREFIXES: tuple[str, ...] = (
    "c10d::",
    "c10d_functional::",
    "_c10d_functional::",
    "record_param_comms",
    *BACKEND_PREFIXES,
)
_LIB = re.compile(r"nccl|rccl|msccl", re.IGNORECASE)
_COLLECTIVE = re.compile(
    r"all_?reduce|all_?gather|all_?to_?all|reduce_?scatter|"
    r"(?<![a-z])(?:broadcast|send|recv|isend|irecv|sendrecv|barrier)(?![a-z])",
    re.IGNORECASE,
)
_COMPUTE_NS = ("aten::", "prims::", "prim::")


@lru_cache(maxsize=65536)
def is_comm(name: str) -> bool:
    """Whether an operator, annotation or kernel name is communication (rules in the module doc)."""
    if not name:
        return False
    if name.startswith(COMM_PREFIXES) or _LIB.search(name):
        return True
    if name.startswith(_COMPUTE_NS):
        return False
    return bool(_COLLECTIVE.search(name))


def is_backend_comm(name: str) -> bool:
    """The backend's own collective op (gloo:/nccl:/mpi:/ucc:), the transfer on a CPU-only rank."""
    return name.startswith(BACKEND_PREFIXES)


def is_step(name: str) -> bool:
    return name.startswith(STEP_PREFIX)


def comm_mask(names: pd.Series) -> np.ndarray:
    """`is_comm` of every row of a name column (bool array, evaluated once per distinct name)."""
    from engine.trace import columns as _cols

    return _cols.where(names, is_comm)


def cat_mask(cats: pd.Series, group: tuple[str, ...] = GPU_CATS) -> np.ndarray:
    """Rows whose category is in `group` (one of the groups above; GPU work by default)."""
    from engine.trace import columns as _cols

    return _cols.isin(cats, group)
