"""`ReplayConfig`: every knob of a replay, validated where it is built.

Why a frozen, validated dataclass: the CLI, the UI, compose and the benchmarks all build
replays; validating once here turns a typo ("cuda:x", iters=0) into a clear `TraceError`
before any tensor is allocated. Its shape (to_dict/from_dict, Enum fields) is every engine
config's (engine.settings).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal

from engine.errors import TraceError
from engine.graph.modes import SelectionMode
from engine.replay.collectives import ReplayMode
from engine.rules import Between, Matches
from engine.settings import Settings

DEVICE = Matches(r"cpu|cuda|cuda:\d+", "'cpu', 'cuda' or 'cuda:N'")


@dataclass(frozen=True, kw_only=True, slots=True)
class ReplayConfig(Settings):
    """How to replay a trace.

    device      "cpu", "cuda" or "cuda:N" (the trace's own device is remapped onto it; that the
                machine has CUDA is checked when the replay starts: engine.replay.executor)
    warmup      un-timed iterations before measuring (caches, allocator, oneDNN/cuBLAS heuristics)
    iters       measured iterations
    mode        operator selection: "top" (highest rebuildable op per call path) | "leaf"
    streams     CUDA only: put each op on the stream its kernels ran on in the original
    host_gaps   reproduce the original CPU time between consecutive ops with a busy-wait
    lazy        True: allocate trace inputs per op and free them eagerly (low memory, slower);
                False: allocate everything up front (refuse when it does not fit);
                "auto": up front when the peak estimate fits the device, else lazy
    profile     write the replay's own Kineto trace (ops labelled "et:<id>:<name>")
    out_dir     where the Kineto trace goes (None: no files)
    allow_trace_code  run ops that may touch files, devices or the network (engine.replay.oppolicy)
                and code shipped inside the trace (PT2 Triton .py); off by default
    num_threads torch intra-op threads (None: the capture's meta value, else torch's default)
    seed        seed for synthesized tensor values
    metrics     sample CPU/GPU metrics while measuring (engine.metrics.MetricsSampler)
    replay_mode "full" (compute + communication) | "compute-only" | "comm-only" (collectives only)
    op_events   CUDA: record an event after every op in each measured iteration (per-op GPU times
                from every iteration, at a few µs of host time per op: an op-dense step turns
                host-bound, +15 % on a transformer step on an H200). Off (default): a measured
                iteration records only its start and end, and one extra iteration after them
                records the per-op times. A distributed rank always records them (its time
                breakdown pairs each iteration's op times with its collective waits).
    """

    device: Annotated[str, DEVICE] = "cpu"
    warmup: Annotated[int, Between(0)] = 1
    iters: Annotated[int, Between(1)] = 5
    mode: SelectionMode = SelectionMode.TOP
    streams: bool = True
    host_gaps: bool = False
    lazy: bool | Literal["auto"] = "auto"
    profile: bool = False
    out_dir: Path | None = None
    allow_trace_code: bool = False
    num_threads: Annotated[int | None, Between(1)] = None
    seed: Annotated[int, Between(0)] = 0
    metrics: bool = True
    replay_mode: ReplayMode = ReplayMode.FULL
    op_events: bool = False

    WHAT = "replay config"

    def validate(self) -> None:
        if self.profile and self.out_dir is None:
            raise TraceError("replay config profile: needs an out_dir for the Kineto trace")

    @property
    def is_cuda(self) -> bool:
        return self.device.startswith("cuda")
