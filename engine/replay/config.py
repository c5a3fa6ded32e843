"""`ReplayConfig`: every knob of a replay, validated where it is built.

Why a frozen, validated dataclass: the CLI, the UI, compose and the benchmarks all build
replays; validating once here turns a typo ("cuda:x", iters=0) into a clear `TraceError`
before any tensor is allocated. Its shape (to_dict/from_dict, Enum fields) is every engine
config's (engine.settings).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from engine.errors import TraceError
from engine.graph.replayset import SelectionMode
from engine.replay.collectives import ReplayMode
from engine.settings import Settings, choose

_DEVICE = re.compile(r"^(cpu|cuda|cuda:\d+)$")


@dataclass(frozen=True, kw_only=True, slots=True)
class ReplayConfig(Settings):
    """How to replay a trace.

    device      "cpu", "cuda" or "cuda:N" (the trace's own device is remapped onto it)
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
    """

    device: str = "cpu"
    warmup: int = 1
    iters: int = 5
    mode: SelectionMode = SelectionMode.TOP
    streams: bool = True
    host_gaps: bool = False
    lazy: bool | str = "auto"
    profile: bool = False
    out_dir: Path | None = None
    allow_trace_code: bool = False
    num_threads: int | None = None
    seed: int = 0
    metrics: bool = True
    replay_mode: ReplayMode = ReplayMode.FULL

    WHAT = "replay config"

    def __post_init__(self) -> None:
        self._set("replay_mode", choose(ReplayMode, self.replay_mode, "replay_mode"))
        if not isinstance(self.device, str) or not _DEVICE.match(self.device):
            raise TraceError(f"replay device must be 'cpu', 'cuda' or 'cuda:N', not {self.device!r}")
        for name in ("warmup", "iters", "seed"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise TraceError(f"replay {name} must be a non-negative integer, not {v!r}")
        if self.iters < 1:
            raise TraceError(f"replay iters must be at least 1, not {self.iters}")
        self._set("mode", SelectionMode.parse(self.mode))
        if self.lazy not in (True, False, "auto"):
            raise TraceError(f"replay lazy must be true, false or 'auto', not {self.lazy!r}")
        if self.num_threads is not None and (
            isinstance(self.num_threads, bool) or not isinstance(self.num_threads, int) or self.num_threads < 1
        ):
            raise TraceError(f"replay num_threads must be a positive integer, not {self.num_threads!r}")
        if self.out_dir is not None:
            self._set("out_dir", Path(self.out_dir))
        if self.profile and self.out_dir is None:
            raise TraceError("replay profile=True needs an out_dir for the Kineto trace")
        if self.device.startswith("cuda"):
            import torch

            if not torch.cuda.is_available():
                raise TraceError(f"replay device {self.device!r} requested but CUDA is not available")

    @property
    def is_cuda(self) -> bool:
        return self.device.startswith("cuda")
