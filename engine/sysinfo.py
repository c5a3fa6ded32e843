"""Host facts the engine needs without requiring psutil (GPU images may lack it)."""

from __future__ import annotations

import os


def available_memory_bytes() -> int | None:
    """Memory available to new allocations: psutil when installed, else /proc/meminfo's
    MemAvailable (Linux), else free physical pages; None when nothing can tell."""
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
