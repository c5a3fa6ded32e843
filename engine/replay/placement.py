"""Where a replayed tensor lives: the replay's device, except the host tensors of a trace that
ran on an accelerator, which stay on the CPU.

Why: a CUDA job keeps some tensors on the host on purpose: the optimizer's step counters (Adam
reads each one with `.item()`), scalars it multiplies GPU tensors by, what it copies back with
`.to("cpu")`. The ET records each tensor's device (`[..., "cpu"]`, `[..., "cuda:0"]`). Replayed
on the GPU with every tensor moved there, each `.item()` on a step counter becomes a
device-to-host copy that waits for the GPU queue to drain, and the GPU idles while the host
issues the next parameter's update: the likely cause of a transformer (Adam, 29 parameters)
replaying 12-17 % slower than the original on an H200 with the same kernels, 28.4 ms of them in
a 33.6 ms step (benchmarks/results/gpu_run_cuda.json, `compare.gpu_side`). A trace
recorded on the CPU only is replayed wholly on the chosen device, as before: there, "cpu" is
where the job ran, not a choice to keep something on the host.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

HOST = "cpu"


def on_accelerator(recorded: str) -> bool:
    """A recorded device string that names an accelerator ("cuda:0", "xpu", "mps", ...)."""
    return bool(recorded) and not recorded.startswith(HOST) and recorded != "meta"


@dataclass(frozen=True, slots=True, kw_only=True)
class Placement:
    """Maps a recorded device to the device a replayed tensor or factory call uses."""

    target: str
    """The replay's device (ReplayConfig.device, resolved)."""
    keep_host: bool = False
    """The trace ran on an accelerator and the replay targets one: its CPU tensors stay on the CPU."""

    def of(self, recorded: str | None) -> str:
        return HOST if self.keep_host and isinstance(recorded, str) and recorded.startswith(HOST) else self.target

    @classmethod
    def for_trace(cls, target: str, recorded_devices: Iterable[str]) -> Placement:
        """`recorded_devices`: the trace's tensor devices (read lazily: a CUDA trace stops at its
        first CUDA tensor; nothing is read for a CPU replay)."""
        if target == HOST or target.startswith(f"{HOST}:"):
            return cls(target=target)
        return cls(target=target, keep_host=any(on_accelerator(d) for d in recorded_devices))
