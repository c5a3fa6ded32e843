"""Explore's timeline zoom (app/zoom.py, issue 21): the zoom watcher's value becomes the window
the page lays out, and that window draws the detail the wider one grouped. The JS side (a real
drag in the browser) is in tests/test_e2e_zoom.py; here the page is driven through AppTest with
the value the watcher sends."""

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


def _figure(at) -> dict:
    c = next(c for c in at.get("plotly_chart") if c.proto.id.endswith("explore_timeline"))
    return json.loads(c.proto.spec)


def _bars(fig: dict) -> tuple[set[int], float]:
    ids, short = set(), float("inf")
    for t in fig["data"]:
        if t.get("name") != "grouped short events" and t.get("customdata"):
            ids |= {int(r[0]) for r in t["customdata"]}
            short = min(short, min(float(r[1]) for r in t["customdata"]))
    return ids, short


def test_a_zoom_lays_the_timeline_out_for_the_new_window(tmp_path, monkeypatch, cache_dir):
    """What a drag-zoom sends (the watcher's value) moves the window slider and brings in the
    events the old window grouped grey; each zoom is applied once, then the slider rules."""
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
    assert any(c.proto.id.endswith("explore_timeline_zoom") for c in at.get("component_instance"))
    at.session_state["explore_timeline_zoom"] = {"zoom": {"id": "test:1", "range": [a, b]}}
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
