"""The Explore timeline chart that reports zoom and pan, so a zoom brings in detail.

Why a component: `st.plotly_chart(on_select="rerun")` reports selections but not relayout
(zoom/pan) events, so a drag-zoom only magnified the grey blocks drawn for the old window. The
component (app/zoom_frontend/index.html, the Streamlit component protocol by hand, no npm build)
draws the same figure and returns, as its value, the zoomed x range (debounced) and the
selection in the shape `st.plotly_chart` returns it (`{"selection": {"points": [...]}}`), so
`engine.figures.selection` reads both alike. The page turns a new range into its window and
lays the timeline out again; the level of detail follows (`engine.figures.timeline.min_bar_us`).

Why plotly.js is copied at run time: the component's folder is served as it is, and Streamlit
serves no file whose real path leaves that folder (a symlink into site-packages is refused).
So the folder served is built once per plotly and page version under the cache folder: the
page's index.html plus plotly.min.js from the plotly Python package (hard-linked when it can
be, else copied; 4.8 MB). The repository holds no vendored plotly.js, nothing is fetched at run
time, and the plotly.js that draws is the one that matches the Python plotly writing the JSON.
`served_dir` returns None when that cannot be done; the page then draws `st.plotly_chart`.
"""

from __future__ import annotations

import functools
import hashlib
import math
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

FRONTEND = Path(__file__).resolve().parent / "zoom_frontend"
NAME = "mystique_zoom_timeline"


@functools.cache
def served_dir() -> Path | None:
    """The folder the component is served from (built on first use), None when it cannot be."""
    try:
        import plotly

        from engine.trace.cache import cache_root

        page = (FRONTEND / "index.html").read_bytes()
        js = Path(plotly.__file__).resolve().parent / "package_data" / "plotly.min.js"
        if not js.is_file():
            return None
        tag = f"{plotly.__version__}-{hashlib.sha256(page).hexdigest()[:12]}"
        out = cache_root() / "components" / f"zoom_timeline-{tag}"
        if (out / "index.html").is_file() and (out / "plotly.min.js").is_file():
            return out
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".zoom_timeline-", dir=out.parent))
        (tmp / "index.html").write_bytes(page)
        try:
            os.link(js, tmp / "plotly.min.js")
        except OSError:  # another file system, or links not allowed
            shutil.copyfile(js, tmp / "plotly.min.js")
        try:
            tmp.rename(out)  # whole or not at all; another server process may have won the race
        except OSError:
            shutil.rmtree(tmp, ignore_errors=True)
        return out if (out / "plotly.min.js").is_file() else None
    except (OSError, ImportError):
        return None


def available() -> bool:
    return served_dir() is not None


def zoom_chart(fig: Any, *, key: str) -> Any:
    """Draw `fig` in the component; returns its value (None before the first event):
    `{"zoom": {"id", "range": [a, b] or None}, "selection": {...}}`."""
    import streamlit.components.v1 as components

    path = served_dir()
    if path is None:
        raise RuntimeError("the zoom timeline component is unavailable (see app.zoom.served_dir)")
    chart = components.declare_component(NAME, path=str(path))
    return chart(figure=fig.to_json(), height=int(fig.layout.height or 450), key=key, default=None)


def zoomed_window(value: Any, seen: str | None, span_us: float) -> tuple[str, tuple[float, float]] | None:
    """(zoom id, new window in µs from the trace start) for a zoom in the component's `value` that
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
