"""Progress reporting for long engine calls.

Long calls accept `progress: Progress | None`, called as `progress(fraction, message)` with
fraction in [0, 1]. The CLI shows a progress bar, the UI `st.status`/`st.progress`.
"""

from __future__ import annotations

from collections.abc import Callable

Progress = Callable[[float, str], None]


def report(progress: Progress | None, fraction: float, message: str) -> None:
    if progress is not None:
        progress(min(1.0, max(0.0, float(fraction))), message)


def scaled(progress: Progress | None, lo: float, hi: float) -> Progress | None:
    """A callback mapping [0, 1] onto [lo, hi] of `progress` (for nested steps)."""
    if progress is None:
        return None
    return lambda f, msg: progress(lo + (hi - lo) * min(1.0, max(0.0, f)), msg)
