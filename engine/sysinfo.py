"""Host facts the engine needs without requiring psutil (GPU images may lack it).

Why limits beyond MemAvailable: a process in a container (cgroup `memory.max`) or under
`ulimit -v` / `ulimit -d` dies long before the host runs out of memory. Every memory decision
(file size limits, the replay's eager/lazy choice, its peak estimate) uses the smallest of what
the host, the cgroup and the rlimits leave to this process.
"""

from __future__ import annotations

import os
from pathlib import Path


def _host_available() -> int | None:
    """The host's available memory: psutil, else /proc/meminfo MemAvailable, else free pages."""
    try:
        import psutil

        return int(psutil.virtual_memory().available)
    except Exception:  # noqa: BLE001 -- missing or unsupported: try the kernel directly
        pass
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (AttributeError, ValueError, OSError):
        return None


def _read_int(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    if not text or text == "max":
        return None
    try:
        return int(text)
    except ValueError:
        return None


def _cgroup_dirs() -> list[Path]:
    """This process's cgroup folders (v2 unified and v1 memory controller), innermost first."""
    out: list[Path] = []
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return out
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, rel = parts
        rel = rel.lstrip("/")
        if controllers == "":  # v2
            base = Path("/sys/fs/cgroup")
        elif "memory" in controllers.split(","):
            base = Path("/sys/fs/cgroup/memory")
        else:
            continue
        d = base / rel
        while True:  # the limit may be set on an ancestor
            out.append(d)
            if d == base or d.parent == d:
                break
            d = d.parent
    return out


def cgroup_available_bytes() -> int | None:
    """Memory the cgroup(s) still allow (limit - usage, smallest over the hierarchy), or None."""
    best = None
    for d in _cgroup_dirs():
        limit = _read_int(d / "memory.max")
        usage = _read_int(d / "memory.current")
        if limit is None:  # cgroup v1
            limit = _read_int(d / "memory.limit_in_bytes")
            usage = _read_int(d / "memory.usage_in_bytes")
        if limit is None or limit >= 1 << 60:  # v1 writes a huge number for "no limit"
            continue
        room = max(0, limit - (usage or 0))
        best = room if best is None else min(best, room)
    return best


def _status_kib(field: str) -> int | None:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def rlimit_available_bytes() -> int | None:
    """Address space this process may still map under `ulimit -v` (RLIMIT_AS) or `ulimit -d`
    (RLIMIT_DATA), i.e. limit minus what is mapped now; None when unlimited."""
    try:
        import resource
    except ImportError:  # pragma: no cover - not on POSIX
        return None
    best = None
    for res, field in (("RLIMIT_AS", "VmSize"), ("RLIMIT_DATA", "VmData")):
        if not hasattr(resource, res):
            continue
        soft, _hard = resource.getrlimit(getattr(resource, res))
        if soft == resource.RLIM_INFINITY or soft < 0:
            continue
        used = _status_kib(field) or 0
        room = max(0, soft - used)
        best = room if best is None else min(best, room)
    return best


def rss_bytes() -> int | None:
    """This process's resident set size now."""
    return _status_kib("VmRSS")


def available_memory_bytes() -> int | None:
    """Memory available to new allocations of this process: the smallest of the host's
    available memory, the cgroup's remaining room and the rlimit's remaining address space;
    None when nothing can tell."""
    vals = [v for v in (_host_available(), cgroup_available_bytes(), rlimit_available_bytes()) if v is not None]
    return min(vals) if vals else None
