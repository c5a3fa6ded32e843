"""Memory budget of a replay, decided before anything is allocated.

Why: a trace may claim tensors the replay machine cannot hold (a GPU trace on a laptop, a
hand-edited 1 TB tensor). Allocating blindly gets the process OOM-killed, which loses the whole
report. So the plan's peak is estimated by walking the schedule (external inputs held for the
whole run, produced tensors from their producer to their last reader), compared with what the
device has free, and the replay either runs eagerly, switches to lazy allocation (external
inputs created per use and dropped after their last use), or skips the ops that alone exceed
the device (their consumers then skip too) with a clear reason.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from engine.replay.plan import Plan
from engine.replay.reasons import SkipReason

HEADROOM = 0.8  # use at most this fraction of the free memory


@dataclass(kw_only=True, slots=True)
class MemoryEstimate:
    eager_peak_bytes: int
    lazy_peak_bytes: int
    available_bytes: int
    externals_bytes: int
    resident_bytes: int = 0

    def to_dict(self) -> dict:
        return asdict(self)


def available_bytes(device: str) -> int:
    """Free memory on `device` that a replay may use (after headroom)."""
    if device.startswith("cuda"):
        import torch

        free, _total = torch.cuda.mem_get_info(torch.device(device))
        return int(free * HEADROOM)
    from engine.sysinfo import available_memory_bytes

    avail = available_memory_bytes()
    return int((avail if avail is not None else 4 << 30) * HEADROOM)


def _ext_bytes(plan: Plan) -> dict[int, int]:
    """Bytes per external storage (one buffer per storage id covering every view)."""
    sizes: dict[int, int] = {}
    for e in plan.externals.values():
        sid = e.rec.storage_id
        sizes[sid] = max(sizes.get(sid, 0), e.rec.nbytes())
    return sizes


def op_bytes(plan: Plan, k: int) -> int:
    """Bytes one op touches: its inputs plus the outputs it allocates."""
    st = plan.steps[k]
    total = 0
    for slot in st.in_slots:
        e = plan.externals.get(slot)
        total += e.rec.nbytes() if e is not None else plan.produced_bytes.get(slot, 0)
    total += sum(plan.produced_bytes.get(slot, 0) for _, _, slot, _ in st.outs)
    return total


def estimate(plan: Plan, available: int) -> MemoryEstimate:
    """Eager and lazy peaks of the plan's tensors plus what it holds for the whole run outside
    the recorded tensor flow (`plan.resident_bytes`: rebuilt TBE tables and optimizer state,
    collective buffers), which lazy allocation cannot shrink."""
    ext_sizes = _ext_bytes(plan)
    ext_total = sum(ext_sizes.values())
    resident = plan.resident_bytes
    live = 0
    peak_prod = 0
    lazy_peak = 0
    # external bytes live at each step in lazy mode
    starts: dict[int, int] = {}
    ends: dict[int, int] = {}
    for e in plan.externals.values():
        b = e.rec.nbytes()
        starts[e.first_use] = starts.get(e.first_use, 0) + b
        ends[e.last_use] = ends.get(e.last_use, 0) + b
    ext_live = 0
    for st in plan.steps:
        ext_live += starts.get(st.index, 0)
        if st.runnable:
            live += sum(plan.produced_bytes.get(slot, 0) for _, _, slot, _ in st.outs)
        peak_prod = max(peak_prod, live)
        lazy_peak = max(lazy_peak, live + ext_live)
        if st.runnable:
            live -= sum(plan.produced_bytes.get(slot, 0) for slot in st.release)
        ext_live -= ends.get(st.index, 0)
    return MemoryEstimate(
        eager_peak_bytes=ext_total + peak_prod + resident,
        lazy_peak_bytes=lazy_peak + resident,
        available_bytes=available,
        externals_bytes=ext_total,
        resident_bytes=resident,
    )


def skip_oversized(plan: Plan, available: int) -> int:
    """Mark ops whose own working set exceeds `available` as skipped; returns how many."""
    n = 0
    for st in plan.steps:
        if st.runnable:
            need = op_bytes(plan, st.index)
            if need > available:
                st.reason = SkipReason.MEMORY
                st.detail = (
                    f"op {st.op_id} {st.name} needs {need / 2**30:.1f} GiB, {available / 2**30:.1f} GiB available"
                )
                n += 1
    if n:
        release_skipped(plan)
    return n


def release_skipped(plan: Plan) -> None:
    """After ops were skipped: drop externals only they used, zero what they would have
    produced, and recompute lifetimes."""
    from engine.replay.plan import lifetimes

    used = {s for st in plan.steps if st.runnable for s in st.in_slots}
    for slot in [s for s in plan.externals if s not in used]:
        del plan.externals[slot]
    for st in plan.steps:
        if st.runnable:
            continue
        for _, _, slot, _ in st.outs:
            plan.produced_bytes[slot] = 0
    lifetimes(plan.steps, plan.externals)


# Process-level peak (RSS) bound: what the replay adds to the process on top of the tensors the
# plan holds. Measured (benchmarks/memory.py, README table) on every sample and shared ET:
# peak RSS - RSS before the run was 1.3-1.6x the planned tensor peak without profiling (allocator
# rounding, op-internal temporaries such as matmul/conv workspaces, oneDNN primitive caches),
# plus ~75 MiB when the Kineto profiler runs (its libraries and event buffers) and ~8 MiB for the
# metrics sampler. The constants below are those figures rounded up so the bound holds.
TENSOR_FACTOR = 2.0
FIXED_BYTES = 64 << 20
PROFILER_BYTES = 160 << 20
PROFILER_BYTES_PER_OP = 8 << 10
METRICS_BYTES = 32 << 20


def rss_bound(planned_peak_bytes: int, n_ops: int, *, profile: bool, metrics: bool, rss_now: int | None) -> int:
    """Upper bound of the replay process's peak RSS (CPU replays; on CUDA the tensors live on the
    device and this bounds host memory only loosely)."""
    from engine.sysinfo import rss_bytes

    base = rss_now if rss_now is not None else (rss_bytes() or 0)
    extra = int(TENSOR_FACTOR * planned_peak_bytes) + FIXED_BYTES
    if profile:
        extra += PROFILER_BYTES + PROFILER_BYTES_PER_OP * n_ops
    if metrics:
        extra += METRICS_BYTES
    return int(base + extra)
