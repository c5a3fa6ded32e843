"""What-if page through Streamlit's AppTest on the bundled MLP sample (issue 12)."""

from __future__ import annotations

from pathlib import Path

import pytest
from mdtext import shown

pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest

ROOT = Path(__file__).resolve().parents[1]
MLP = ROOT / "sample_traces" / "mlp"


@pytest.fixture
def whatif_page(tmp_path, monkeypatch, cache_dir) -> AppTest:
    """The What-if page, opened on the bundled samples (the MLP sample picked first)."""
    if not (MLP / "mlp_et.json.gz").exists():
        pytest.skip("bundled mlp sample missing (make samples)")
    monkeypatch.setenv("MYSTIQUE_UI_DIR", str(tmp_path / "ui"))
    at = AppTest.from_file(str(ROOT / "app" / "main.py"), default_timeout=180)
    at.run()
    at.switch_page("../pages/whatif.py")
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_whatif_page_speedup_and_batch(whatif_page):
    at = whatif_page
    metrics = {m.label: m.value for m in at.metric}
    measured = float(metrics["measured iteration ms"])
    assert abs(float(metrics["simulated, unchanged"]) / measured - 1) <= 0.03
    at.checkbox(key="wi_sp").check().run()
    assert not at.exception, [e.value for e in at.exception]
    fast = float({m.label: m.value for m in at.metric}["predicted with edits"])
    assert fast < 0.9 * measured  # GEMMs are most of the MLP step
    assert any("CPU-only" in shown(w.value) for w in at.warning)
    at.button(key="wi_add").click().run()
    assert not at.exception, [e.value for e in at.exception]
    added = [n for n in at.session_state["traces"] if n.endswith("(predicted)")]
    assert added and at.session_state["traces"][added[0]]["kind"] == "kineto"


def test_whatif_widgets_take_their_bounds_from_the_edit_rules(whatif_page):
    """The page's ranks/copies widgets allow exactly what the edits' declared rules allow."""
    from engine.simulate.whatif.spec import field_bounds

    at = whatif_page
    at.checkbox(key="wi_ly").check()
    at.checkbox(key="wi_dp").check().run()
    assert not at.exception, [e.value for e in at.exception]
    for key, kind, name in (("wi_ly_c", "layers", "copies"), ("wi_dp_n", "data_parallel", "ranks")):
        w = at.number_input(key=key)
        assert (w.min, w.max) == field_bounds(kind, name)
