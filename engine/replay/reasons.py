"""Why an op was not replayed: a closed set, so `coverage.by_reason` keys are stable.

Why an Enum: the CLI, the dashboard, compare and the benchmarks group and count skips by
reason; a reason that embedded an op name, a torch version or an exception text would split
one cause into many keys. Free text (which op, which package, the exception) goes into the
skipped op's `detail`.
"""

from __future__ import annotations

from enum import Enum


class SkipReason(str, Enum):
    UNKNOWN_OPERATOR = "unknown operator"
    LIBRARY_NOT_LOADED = "operator library not installed"
    NO_MATCHING_OVERLOAD = "recorded arguments fit no overload"
    NO_CPU_EQUIVALENT = "CUDA-library op without a CPU equivalent"
    UNREADABLE_RECORD = "unreadable inputs/outputs record"
    BAD_DTYPE = "bad tensor record: unknown dtype"
    BAD_NUMEL = "bad tensor record: numel contradicts shape"
    BAD_TENSOR = "bad tensor record: invalid"
    EMPTY_INDEX_RANGE = "indices into an empty range (no valid index)"
    TRACE_CODE = "trace code not executed (opt in with --allow-trace-code)"
    UNSAFE_OP = "op may touch files, devices or the network (opt in with --allow-trace-code)"
    TRACE_CODE_UNSUPPORTED = "trace code (Triton kernel) execution is not supported"
    MEMORY = "needs more memory than the device has free"
    MEMORY_DEPENDENCY = "depends on an op skipped for memory"
    MEMORY_OVER_RECORD = "allocates more than the trace records (outputs computed on the meta device)"
    COLLECTIVE_SINGLE_PROCESS = "collective (single-process replay)"
    COLLECTIVE_UNSUPPORTED = "collective not supported by the backend"
    FAILED = "failed at run time"

    def __str__(self) -> str:  # f-strings and JSON keys show the stable value
        return self.value


__all__ = ["SkipReason"]
