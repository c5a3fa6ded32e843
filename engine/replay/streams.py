"""CUDA streams of a replay: each op on the stream its kernels ran on in the original.

Why: overlap between streams (compute vs. communication/copy streams) is part of a workload's
step time; replaying everything on one stream serializes it. The stream of an op is read from
the linked Kineto trace: GPU events (kernel/memcpy/memset) carry `stream` and `correlation`;
the runtime launch with the same correlation happened on the host inside the op's `cpu_op`
interval (`k_ts_us`..+`k_dur_us`, same thread), so each launch is attributed to the replayed op
whose interval contains it and the op takes the most common stream of its launches.

Cross-stream ordering: when an op on stream B reads a tensor produced on stream A != B, B waits
for A (`wait_stream`) before the op, which is what the original's recorded
cudaEventRecord/cudaStreamWaitEvent pairs enforce for correct programs.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

import numpy as np

from engine.replay.plan import Plan
from engine.trace.ranks import of_rank
from engine.trace.vocab import GPU_CATS as _GPU_CATS

if TYPE_CHECKING:
    from engine.trace.model import Trace

_LAUNCH_CATS = ("cuda_runtime", "cuda_driver")


def op_streams(trace: Trace, plan: Plan, rank: int | None = None) -> dict[int, int]:
    """{plan step index: original stream id} for steps whose launches are found in Kineto."""
    ev = trace.events
    if ev is None or len(ev) == 0:
        return {}
    ev = of_rank(ev, rank)
    gpu = ev[ev["cat"].astype(str).isin(_GPU_CATS) & ev["correlation"].notna() & ev["stream"].notna()]
    launch = ev[ev["cat"].astype(str).isin(_LAUNCH_CATS) & ev["correlation"].notna()]
    if len(gpu) == 0 or len(launch) == 0:
        return {}
    stream_of = dict(zip(gpu["correlation"].astype("int64"), gpu["stream"].astype("int64")))
    steps = [st for st in plan.steps if st.k_ts_us == st.k_ts_us and st.k_dur_us == st.k_dur_us]
    if not steps:
        return {}
    steps.sort(key=lambda s: s.k_ts_us)
    starts = np.array([s.k_ts_us for s in steps])
    ends = np.array([s.k_ts_us + s.k_dur_us for s in steps])
    votes: dict[int, Counter] = {}
    ts = launch["ts_us"].to_numpy(dtype=float)
    corr = launch["correlation"].astype("int64").to_numpy()
    pos = np.searchsorted(starts, ts, side="right") - 1
    for t, c, p in zip(ts, corr, pos):
        if p < 0 or t > ends[p]:
            continue
        s = stream_of.get(int(c))
        if s is None:
            continue
        votes.setdefault(steps[p].index, Counter())[s] += 1
    return {k: cnt.most_common(1)[0][0] for k, cnt in votes.items()}


def assign_streams(trace: Trace, plan: Plan, rank: int | None = None) -> dict[int, Any]:
    """Set `stream`/`wait_streams` on the plan's steps; returns {stream id: torch.cuda.Stream}."""
    import torch

    mapping = op_streams(trace, plan, rank)
    if not mapping:
        return {}
    counts = Counter(mapping.values())
    main = counts.most_common(1)[0][0]
    streams = {main: torch.cuda.current_stream()}
    for sid in counts:
        if sid not in streams:
            streams[sid] = torch.cuda.Stream()
    slot_stream: dict[int, int] = {}
    for st in plan.steps:
        sid = mapping.get(st.index, main)
        st.stream = sid
        waits = {slot_stream[s] for s in st.in_slots if s in slot_stream and slot_stream[s] != sid}
        st.wait_streams = sorted(waits)
        for _, _, slot, _ in st.outs:
            slot_stream[slot] = sid
    return streams
