"""The timeline's palette: one colour per event group (engine.figures.timeline `_group`), shared by
the timeline and its lanes (busy spans in the kernel colour)."""

from __future__ import annotations

GROUP_COLORS = {
    "cpu_op": "#7c5cff",
    "kernel": "#f72585",
    "runtime": "#ffd166",
    "memory": "#06d6a0",
    "annotation": "#8d99ae",
    "python": "#4cc9f0",
    "other": "#adb5bd",
}
