"""Zoom on a timeline chart brings in detail: a watcher component reports the chart's x range.

Why: `st.plotly_chart(on_select="rerun")` reports selections but not relayout (zoom/pan) events,
so a drag-zoom only magnified the grey blocks drawn for the old window. The watcher
(app/zoom_frontend/index.html: the Streamlit component protocol by hand, no npm build, nothing
fetched) draws nothing: from its same-origin iframe it listens to `plotly_relayout` on the chart
Streamlit drew and returns, as its value, the new x range (debounced). The page turns that range
into its window and lays the timeline out again; the level of detail follows the window
(`engine.figures.timeline.min_bar_us`).

Why a watcher and not a component that draws the figure itself: such a component has to load
its own plotly.js (4.8 MB, from the plotly package) in its iframe on every mount, since Streamlit
serves component files without cache validators; in headless Chromium on this VM that made the
Timeline view 1.5-4.2 s against 0.5-1.0 s for `st.plotly_chart` (the sample trace, load 6-9).
The watcher costs nothing to draw, and the chart keeps Streamlit's theme, full screen and its
click and box selection exactly as before. When the chart cannot be reached (another origin, a
Streamlit that renames its element classes) no zoom is reported and the chart works as it did:
the window slider still sets the window.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

FRONTEND = Path(__file__).resolve().parent / "zoom_frontend"


def watch_zoom(target_key: str, *, key: str) -> Any:
    """Watch the zooms of the chart drawn with widget key `target_key`; returns the watcher's value
    (None before the first zoom): `{"zoom": {"id": str, "range": [a, b] or None}}`."""
    import streamlit.components.v1 as components

    watcher = components.declare_component("zoom_watch", path=str(FRONTEND))
    return watcher(target=target_key, key=key, default=None)


def zoomed_window(value: Any, seen: str | None, span_us: float) -> tuple[str, tuple[float, float]] | None:
    """(zoom id, new window in µs from the trace start) for a zoom in the watcher's `value` that
    the page has not applied yet (`seen`: the id applied last), else None.

    The range is clamped to the trace, `[0, span_us]`; a double-click (no range) zooms out to the
    whole trace. A window never collapses to a point (at least 1 ns wide)."""
    zoom = value.get("zoom") if isinstance(value, dict) else None
    if not isinstance(zoom, dict) or not zoom.get("id") or zoom["id"] == seen:
        return None
    span = max(float(span_us), 1.0)
    rng = zoom.get("range")
    if rng is None:
        return str(zoom["id"]), (0.0, span)
    try:
        a, b = sorted((float(rng[0]), float(rng[1])))
    except (TypeError, ValueError, IndexError):
        return None
    if not (math.isfinite(a) and math.isfinite(b)):
        return None
    a, b = min(max(a, 0.0), span), min(max(b, 0.0), span)
    if b - a < 1e-3:
        a, b = max(0.0, min(a, span - 1e-3)), min(span, max(b, a + 1e-3))
    return str(zoom["id"]), (a, b)
