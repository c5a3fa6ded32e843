"""A host that launches into a bounded GPU queue: Kineto traces made by the queue's physics.

Why: the simulator must see a GPU-bound step as GPU-bound when the host's only sign of it is a
`cudaLaunchKernel` that lasts milliseconds (the launch queue is full: the call returns when the
GPU frees a slot). The shared traces have no such step, users' traces do (ResNet-50 on a V100:
the GPU busy 97 % of the step, launches up to 2 ms). Here a few lines of event arithmetic, which
share nothing with the simulator, play the machine forward; the same physics with the kernels or
the host sped up gives the ground truth of a what-if.

The physics, per step: each host operator runs `pre` µs of its own work, then calls
`cudaLaunchKernel`. The call costs `launch_us`; when `depth` launched kernels are still queued
or running, it returns only when the oldest of them ends (+`wake_us`). A kernel starts when its
launch has submitted it (`submit_us` after the call starts) and the stream has been free for `kernel_gap_us`. After the
call the operator runs `post` µs. The step ends with `cudaDeviceSynchronize`, which returns
`wake_us` after the last kernel. Host and kernel times vary per operator (a fixed pattern), as
real layers do.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from engine.trace.vocab import STEP_PREFIX

_PATTERN = (1.0, 0.6, 1.7, 0.9, 1.3, 0.5, 1.1, 1.4)  # per-operator scale, repeated


@dataclass(frozen=True, kw_only=True, slots=True)
class QueueMachine:
    """One step's shape (µs) and the launch queue's depth."""

    ops: int = 400  # operators (one kernel each) per step
    steps: int = 3
    host_us: float = 20.0  # an operator's own host work (split 3:1 around its launch)
    launch_us: float = 5.0  # a launch call that finds a free slot
    kernel_us: float = 120.0
    depth: int = 64  # kernels queued or running before a launch blocks
    submit_us: float = 3.0  # launch call start -> its kernel can start
    kernel_gap_us: float = 1.5  # the device's own gap between back-to-back kernels
    wake_us: float = 4.0
    sync_us: float = 6.0  # cudaDeviceSynchronize on an idle GPU
    gap_us: float = 50.0  # host work between steps (outside the launches)
    runtime: str = "cuda"  # "cuda" or "hip": the runtime calls' names (hipLaunchKernel, ...)
    streams: int = 1  # operator i launches on stream i % streams (each stream in order, all concurrent)

    def faster(self, *, gpu: float = 1.0, host: float = 1.0) -> QueueMachine:
        """The same machine with the kernels `gpu` times and the host `host` times as fast."""
        return replace(
            self,
            kernel_us=self.kernel_us / gpu,
            host_us=self.host_us / host,
            launch_us=self.launch_us / host,
            sync_us=self.sync_us / host,
            gap_us=self.gap_us / host,
        )


@dataclass(kw_only=True, slots=True)
class QueueTruth:
    """What the physics produced: each step's span and the GPU's busy time in it (µs)."""

    step_us: list[float] = field(default_factory=list)
    busy_us: list[float] = field(default_factory=list)
    blocked_launches: int = 0  # launches that waited for a slot

    @property
    def mean_step_ms(self) -> float:
        return sum(self.step_us) / len(self.step_us) / 1e3


def queue_trace(m: QueueMachine) -> tuple[dict, QueueTruth]:
    """A Kineto document (host ops, launches, kernels, flows, ProfilerStep spans) and its truth."""
    host_pid, host_tid, dev = 1000, 1000, 0
    streams = [7 + 13 * k for k in range(m.streams)]
    evs: list[dict] = []
    truth = QueueTruth()
    t = 10.0
    free = dict.fromkeys(streams, -1.0)  # each stream is free from (-1: nothing ran on it yet)
    ends: list[float] = []  # kernel end times, launch order
    corr = ext = 0

    def x(cat: str, name: str, ts: float, dur: float, pid: int, tid: int, **args) -> dict:
        e = {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": round(ts, 3), "dur": round(dur, 3)}
        e["args"] = args
        evs.append(e)
        return e

    for s in range(m.steps):
        t0 = t
        spans: list[tuple[float, float]] = []
        for i in range(m.ops):
            scale = _PATTERN[i % len(_PATTERN)]
            pre, post = 0.75 * m.host_us * scale, 0.25 * m.host_us * scale
            kdur = m.kernel_us * _PATTERN[(i * 3 + 1) % len(_PATTERN)]
            corr += 1
            ext += 1
            op_ts = t
            call = t + pre
            ret = call + m.launch_us
            queued = sorted(e for e in ends[-4 * m.depth :] if e + m.wake_us > ret)
            if len(queued) >= m.depth:  # the queue is full: wait for the first of them to end
                ret = queued[len(queued) - m.depth] + m.wake_us
                truth.blocked_launches += 1
            stream = streams[i % len(streams)]
            k_ts = max(call + m.submit_us, free[stream] + m.kernel_gap_us if free[stream] >= 0 else 0.0)
            free[stream] = k_ts + kdur
            ends.append(k_ts + kdur)
            spans.append((k_ts, k_ts + kdur))
            x(
                "cuda_runtime",
                f"{m.runtime}LaunchKernel",
                call,
                ret - call,
                host_pid,
                host_tid,
                correlation=corr,
                cbid=211,
            )
            x("kernel", f"void layer_kernel<{i % 8}>(float*, float const*, int)", k_ts, kdur, dev, stream,
              correlation=corr, device=dev, stream=stream, **{"External id": ext})  # fmt: skip
            flow = {"id": corr, "cat": "ac2g", "name": "ac2g"}
            evs.append({"ph": "s", "pid": host_pid, "tid": host_tid, "ts": round(call, 3), **flow})
            evs.append({"ph": "f", "pid": dev, "tid": stream, "ts": round(k_ts, 3), "bp": "e", **flow})
            t = ret + post
            x("cpu_op", "aten::layer", op_ts, t - op_ts, host_pid, host_tid, **{"External id": ext})
        corr += 1
        done = max(t + m.sync_us, max(free.values()) + m.wake_us)
        x("cuda_runtime", f"{m.runtime}DeviceSynchronize", t, done - t, host_pid, host_tid, correlation=corr, cbid=165)
        t = done + 1.0
        x("user_annotation", f"{STEP_PREFIX}{s + 1}", t0, t - t0, host_pid, host_tid)
        truth.step_us.append(t - t0)
        truth.busy_us.append(_union_us(spans))
        t += m.gap_us
    evs.append({"ph": "M", "name": "process_name", "pid": dev, "args": {"name": f"GPU {dev}"}})
    for st in streams:
        evs.append({"ph": "M", "name": "thread_name", "pid": dev, "tid": st, "args": {"name": f"stream {st}"}})
    doc = {
        "schemaVersion": 1,
        "deviceProperties": [{"id": dev, "name": "Synthetic GPU (engine.testing.launch_queue)"}],
        "traceEvents": evs,
    }
    return doc, truth


def _union_us(spans: list[tuple[float, float]]) -> float:
    total, end = 0.0, -1.0
    for a, b in sorted(spans):
        if a > end:
            total += b - a
            end = b
        elif b > end:
            total += b - end
            end = b
    return total


__all__ = ["QueueMachine", "QueueTruth", "queue_trace"]
