"""Communication accounting of a replay: collective counts/bytes by type, and the per-iteration
split of a rank's time into compute, communication, exposed communication and idle.

The split is the one `TimeBreakdown` (engine/analysis/breakdown.py, docs/analysis.md) with its
keys, measured by the replay's own clock: the parts of the median iteration (ms):
  step_ms                   the iteration
  compute_ms                time in non-collective ops, less the time they spent waiting on
                            async work
  communication_ms          time from issuing each collective to its completion being observed
                            (blocking calls: their duration; async: issue to wait)
  exposed_communication_ms  time the replaying thread was blocked on communication (blocking
                            calls + waits): communication not hidden behind compute
  idle_ms                   step - compute - exposed communication (host overhead, gaps)
"""

from __future__ import annotations


def executed_collectives(plan, backend) -> dict:
    """{kind: {count, bytes}} of the collectives one iteration ran (from the backend's record of
    the last measured iteration; plan counts when the backend keeps none)."""
    counts = getattr(backend, "last_counts", None) if backend is not None else None
    if counts:
        return {k: dict(v) for k, v in sorted(counts.items())}
    return {}


def trace_collectives(calls) -> dict:
    """{kind: {count, bytes}} of recorded `CollectiveCall`s (waits excluded)."""
    out: dict[str, dict] = {}
    for c in calls:
        if c.kind.value == "wait":
            continue
        e = out.setdefault(c.kind.value, {"count": 0, "bytes": 0})
        e["count"] += 1
        e["bytes"] += c.nbytes()
    return dict(sorted(out.items()))


def breakdown(plan, op_ns: list[list[int]], iter_ms: list[float], backend) -> dict:
    if not op_ns or not iter_ms:
        return {}
    comm_idx = [st.index for st in plan.steps if st.coll is not None and st.runnable]
    is_comm = set(comm_idx)
    waits = getattr(backend, "iter_wait_ns", []) if backend is not None else []
    step_waits = getattr(backend, "iter_step_wait_ns", []) if backend is not None else []
    asyncs = getattr(backend, "iter_async_ns", []) if backend is not None else []
    n = len(op_ns)
    waits = waits[-n:] if len(waits) >= n else [0] * n
    step_waits = step_waits[-n:] if len(step_waits) >= n else [0] * n
    asyncs = asyncs[-n:] if len(asyncs) >= n else [0] * n
    from engine.analysis.breakdown import TimeBreakdown

    rows: dict[str, list[float]] = {"step_ms": [], "compute_ms": [], "communication_ms": [], "exposed_ms": []}
    for row, it, w, sw, a in zip(op_ns, iter_ms, waits, step_waits, asyncs):
        blocking = sum(row[k] for k in comm_idx)
        compute = sum(t for k, t in enumerate(row) if k not in is_comm) - sw
        rows["step_ms"].append(float(it))
        rows["compute_ms"].append(compute / 1e6)
        rows["communication_ms"].append((blocking + a) / 1e6)
        rows["exposed_ms"].append((blocking + w) / 1e6)
    return TimeBreakdown.from_parts(**rows).median_step()
