"""Memory bound of a simulation, checked on the task count *before* the task graph is built.

Why: structural what-if edits multiply the trace. Three `layers` edits of `copies: 1000` each
passed their field rules and grew one process to 23 GB in a minute (nested or repeated matches
copy the copies), until the kernel killed other processes on the machine. The size of what is
about to be built is known before it is built: a `layers` step adds `copies` x its span's rows,
and the graph has one task per event. So each step, and the graph build itself, is checked
against a limit derived from the memory this process may still use (host, cgroup
`memory.max` and `ulimit -v`, engine.sysinfo), and refused with the numbers in one line.

Bytes per task: the simulation's peak RSS growth measured on the transformer sample with a
`layers` edit was 1.1-1.6 KiB per task (12,972 and 46,722 tasks, edges 2.0 per task), the
events table, the graph and the schedule together; `TASK_BYTES` rounds it up 2.5x (wider event
tables, pandas copies while duplicating).
"""

from __future__ import annotations

from engine import envvars
from engine.errors import TraceError

TASK_BYTES = 4096
EDGES_PER_TASK = 2  # measured edges/tasks on the samples (2.0); for the message only
_UNKNOWN_PLATFORM_BYTES = 8 << 30


def limit_bytes() -> tuple[int, int | None]:
    """(limit, available): half the memory this process may still use (`$MYSTIQUE_SIM_MAX_BYTES`
    when set), and the availability it was derived from (None: unknown platform)."""
    from engine.sysinfo import available_memory_bytes

    avail = available_memory_bytes()
    if envvars.get("MYSTIQUE_SIM_MAX_BYTES"):
        return envvars.get_int("MYSTIQUE_SIM_MAX_BYTES", 0, 1), avail
    return (_UNKNOWN_PLATFORM_BYTES if avail is None else avail // 2), avail


def check_tasks(n_tasks: int, what: str) -> None:
    """TraceError when a task graph of `n_tasks` would not fit the limit; `what` says which step
    asked ("edits[0].copies: layers 'blocks' x 1000"), the message gives tasks, edges and bytes."""
    need = int(n_tasks) * TASK_BYTES
    limit, avail = limit_bytes()
    if need <= limit:
        return
    basis = "MYSTIQUE_SIM_MAX_BYTES" if envvars.get("MYSTIQUE_SIM_MAX_BYTES") else "half of"
    avail_s = f"{avail / 2**30:,.1f} GiB available" if avail is not None else "memory unknown"
    raise TraceError(
        f"{what}: the task graph would hold ~{n_tasks:,} tasks and ~{n_tasks * EDGES_PER_TASK:,} edges, "
        f"~{need / 2**30:,.1f} GiB, over the limit of {limit / 2**30:,.1f} GiB ({basis} {avail_s}, "
        "host, cgroup and ulimit; estimated before building it)"
    )


__all__ = ["EDGES_PER_TASK", "TASK_BYTES", "check_tasks", "limit_bytes"]
