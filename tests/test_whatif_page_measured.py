"""What-if page, issue 30 parts (app/whatif_measured.py): a second loaded trace as the measured
side, kernel times from it, the device picker; the shared H100/MI300X BERT pair through AppTest."""

from __future__ import annotations

from pathlib import Path

import pytest
from mdtext import shown

pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest

ROOT = Path(__file__).resolve().parents[1]
MLP = ROOT / "sample_traces" / "mlp"


def _ok(at):
    assert not at.exception, [e.value for e in at.exception]


@pytest.fixture
def page(tmp_path, monkeypatch, cache_dir, shared_traces) -> AppTest:
    if not (MLP / "mlp_et.json.gz").exists():
        pytest.skip("bundled mlp sample missing (make samples)")
    monkeypatch.setenv("MYSTIQUE_UI_DIR", str(tmp_path / "ui"))
    at = AppTest.from_file(str(ROOT / "app" / "main.py"), default_timeout=180)
    at.run()
    for label, rel in (
        ("bert mi300x", "tracelens_mi300_bert_small/mi300_bert_small.json.gz"),
        ("bert h100", "tracelens_bert_small/h100_bert_small.json.gz"),
    ):
        at.text_area(key="server_paths").input(str(shared_traces / rel))
        at.text_input(key="path_name").input(label)
        at.button(key="load_path").click()
        at.run()
        _ok(at)
    at.switch_page("../pages/whatif.py")
    at.run()
    _ok(at)
    assert at.selectbox(key="wi_trace").value == "bert h100"
    return at


@pytest.mark.slow
def test_kernel_times_from_a_second_trace_shows_predicted_vs_measured(page):
    at = page
    at.checkbox(key="wi_kt").check().run()
    at.selectbox(key="wi_kt_src").select("bert mi300x").run()
    _ok(at)
    assert not at.error, [e.value for e in at.error]
    assert any(h.value == "Predicted vs measured (bert mi300x)" for h in at.subheader)
    metrics = {m.label: m.value for m in at.metric}
    assert {"measured step ms", "predicted step ms", "error"} <= set(metrics)
    assert any("100.0 % of 61 GPU tasks matched" in c.value for c in at.caption)
    # another program as the source: refused in one line
    at.selectbox(key="wi_kt_src").select("sample:mlp").run()
    _ok(at)
    errs = [e.value for e in at.error]
    assert errs and "matched" in errs[0] and "\n" not in errs[0]


@pytest.mark.slow
def test_device_picker_retargets(page):
    at = page
    at.checkbox(key="wi_dev").check().run()
    _ok(at)
    at.selectbox(key="wi_dev_t").select("MI300X").run()
    _ok(at)
    assert not at.error, [e.value for e in at.error]
    assert set(at.selectbox(key="wi_dev_t").options) >= {"V100", "H100", "B300", "MI300X", "MI355X"}
    assert any(shown(c.value).startswith("device: H100 (deviceProperties name) -> MI300X") for c in at.caption)
