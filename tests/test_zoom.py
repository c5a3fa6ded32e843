"""Explore's zoom timeline (app/zoom.py, issue 21): the component's zoom value becomes the
window the page lays out, and that window draws the detail the wider one grouped. The JS side
(a drag or Plotly.relayout in the browser) is in tests/test_e2e_zoom.py; here the page is driven
through AppTest with the value the component sends, and the served folder is checked."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest

from app import zoom

ROOT = Path(__file__).resolve().parents[1]
CNN = ROOT / "sample_traces" / "cnn"


def test_zoomed_window_applies_each_zoom_once_and_clamps_it_to_the_trace():
    v = {"zoom": {"id": "m:1", "range": [250.0, 120.5]}, "selection": {"points": []}}
    assert zoom.zoomed_window(v, None, 1000.0) == ("m:1", (120.5, 250.0))
    assert zoom.zoomed_window(v, "m:1", 1000.0) is None  # applied already
    out = zoom.zoomed_window({"zoom": {"id": "m:2", "range": [-50, 2e6]}}, "m:1", 1000.0)
    assert out == ("m:2", (0.0, 1000.0))
    assert zoom.zoomed_window({"zoom": {"id": "m:3", "range": None}}, "m:2", 1000.0) == ("m:3", (0.0, 1000.0))
    lo, hi = zoom.zoomed_window({"zoom": {"id": "m:4", "range": [1000, 1000]}}, None, 1000.0)[1]
    assert 0.0 <= lo < hi <= 1000.0  # never a point
    for bad in (None, {}, {"zoom": None}, {"zoom": {"id": "x", "range": ["a", 1]}}, {"zoom": {"range": [1, 2]}}):
        assert zoom.zoomed_window(bad, None, 1000.0) is None
    assert zoom.zoomed_window({"zoom": {"id": "n", "range": [float("nan"), 1]}}, None, 1000.0) is None


def test_served_folder_holds_the_page_and_the_packaged_plotly_js(cache_dir):
    import plotly

    zoom.served_dir.cache_clear()
    try:
        out = zoom.served_dir()
        assert out is not None and out.is_relative_to(cache_dir)
        assert (out / "index.html").read_bytes() == (zoom.FRONTEND / "index.html").read_bytes()
        js = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
        assert (out / "plotly.min.js").read_bytes() == js.read_bytes()
        assert not (zoom.FRONTEND / "plotly.min.js").exists()  # nothing vendored in the repository
    finally:
        zoom.served_dir.cache_clear()


def _figure(at) -> dict:
    c = next(c for c in at.get("component_instance") if c.proto.id.endswith("explore_timeline"))
    return json.loads(json.loads(c.proto.json_args)["figure"])


def _bars(fig: dict) -> tuple[set[int], float]:
    ids, short = set(), float("inf")
    for t in fig["data"]:
        if t.get("name") != "grouped short events" and t.get("customdata"):
            ids |= {int(r[0]) for r in t["customdata"]}
            short = min(short, min(float(r[1]) for r in t["customdata"]))
    return ids, short


def test_a_zoom_lays_the_timeline_out_for_the_new_window(tmp_path, monkeypatch, cache_dir):
    """What a drag-zoom sends (the component's value) moves the window slider and brings in the
    events the old window grouped grey; a selection in the same value still picks ET ops."""
    if not (CNN / "cnn_et.json.gz").exists():
        pytest.skip("bundled cnn sample missing (make samples)")
    monkeypatch.setenv("MYSTIQUE_UI_DIR", str(tmp_path / "ui"))
    monkeypatch.delenv("MYSTIQUE_WORKSPACE", raising=False)
    at = AppTest.from_file(str(ROOT / "app" / "main.py"), default_timeout=300)
    at.run()
    at.text_area(key="server_paths").input(f"{CNN / 'cnn_et.json.gz'}\n{CNN / 'cnn_kineto.json.gz'}")
    at.text_input(key="path_name").input("cnn")
    at.button(key="load_path").click()
    at.run()
    at.switch_page("../pages/explore.py")
    at.run()
    at.radio(key="explore_view").set_value("Timeline")
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    lo, hi = at.slider(key="t_window").value
    before = _figure(at)
    assert before["layout"]["meta"]["grouped"] > 0
    ids0, short0 = _bars(before)
    a, b = lo, lo + (hi - lo) / 20
    at.session_state["explore_timeline"] = {"zoom": {"id": "test:1", "range": [a, b]}, "selection": {"points": []}}
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.slider(key="t_window").value == pytest.approx((a, b))
    after = _figure(at)
    assert after["layout"]["xaxis"]["range"] == pytest.approx([a, b])
    ids1, short1 = _bars(after)
    assert ids1 - ids0 and short1 < short0  # detail came in for the window
    # the same value, once applied, does not move the window again: the slider rules
    at.slider(key="t_window").set_value((lo, hi))
    at.run()
    assert at.slider(key="t_window").value == pytest.approx((lo, hi))
    # a click's selection in the component's value selects ET ops as st.plotly_chart's did
    linked = next(
        int(r[0])
        for t in after["data"]
        if t.get("name") != "grouped short events"
        for r in t["customdata"]
        if int(r[5]) >= 0
    )
    at.session_state["explore_timeline"] = {
        "zoom": {"id": "test:1", "range": [a, b]},
        "selection": {"points": [{"customdata": [linked, 1.0], "curve_number": 0, "point_index": 0}]},
    }
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert any("from 1 events" in s.value for s in at.success), [s.value for s in at.success]
