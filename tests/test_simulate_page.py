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


def test_whatif_fields_left_empty_are_inferred_and_a_wrong_batch_is_refused(
    tmp_path, monkeypatch, cache_dir, shared_traces
):
    """Issue 32: the default layer regex `blocks\\.\\d+` failed on real models, "current batch 256"
    was never checked (+0.0 % silently), and layers x2 on an inference trace printed one warning
    box per layer. On the H100 BERT (Kineto alone, 4 BertLayer modules, inputs 1 x 141 x 512)."""
    monkeypatch.setenv("MYSTIQUE_UI_DIR", str(tmp_path / "ui"))
    at = AppTest.from_file(str(ROOT / "app" / "main.py"), default_timeout=180)
    at.run()
    at.text_area(key="server_paths").input(str(shared_traces / "tracelens_bert_small" / "h100_bert_small.json.gz"))
    at.text_input(key="path_name").input("bert")
    at.button(key="load_path").click()
    at.run()
    at.switch_page("../pages/whatif.py")
    at.run()
    at.checkbox(key="wi_ly").check()
    at.checkbox(key="wi_bs").check()
    at.run()
    assert not at.exception and not at.error, [e.value for e in [*at.exception, *at.error]]
    assert at.text_input(key="wi_ly_m").value == "" and at.number_input(key="wi_bs_n").value is None
    captions = " ".join(shown(c.value) for c in at.caption)
    assert "module: BertLayer_\\d+ (4 matched)" in captions
    assert "current batch: 1 (inferred, shapes from Kineto Input Dims)" in captions
    backward = [shown(w.value) for w in at.warning if "no backward nodes" in w.value]
    assert len(backward) == 1 and backward[0].endswith("(and 3 more like it)"), backward
    at.number_input(key="wi_bs_n").set_value(256)
    at.run()
    assert any("no tensor has a dimension equal to 256" in e.value for e in at.error), [e.value for e in at.error]


def test_whatif_unprofiled_step_takes_the_host_overhead_out(whatif_page):
    at = whatif_page
    measured = float({m.label: m.value for m in at.metric}["measured iteration ms"])
    at.checkbox(key="wi_unprof").check().run()
    assert not at.exception, [e.value for e in at.exception]
    at.number_input(key="wi_unprof_ms").set_value(round(measured * 0.6, 3)).run()
    assert not at.exception, [e.value for e in at.exception]
    predicted = float({m.label: m.value for m in at.metric}["predicted with edits"])
    # a CPU-only trace: the host is the whole step, so the edit brings it to the given step
    assert predicted == pytest.approx(measured * 0.6, rel=0.02)
