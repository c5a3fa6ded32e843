"""Real browser (issue 32), one short journey over other teams' GPU traces: Explore's Analysis on
the H100 BERT draws a bounded critical-path chart and the kernel-class table, and Compare says
which GPU is faster on which kernel class (TimeSformer H100 vs MI300X), with python frames and
profiler bookkeeping left out. Screenshots to artifacts/e2e/ (docs/screenshots/ with
MYSTIQUE_SCREENSHOTS=1). Skips like tests/test_e2e_browser.py."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from test_e2e_analysis import _path_bars, _view
from test_e2e_browser import _idle, _load_by_path, _nav, _serve, _shot, _text, _wait_css, _wait_text, driver  # noqa: F401

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    yield from _serve(tmp_path_factory.mktemp("e2e_dashboard"))


def _shared(rel: str) -> Path:
    p = Path(os.environ.get("MYSTIQUE_SHARED_TRACES", ROOT.parent / "shared" / "traces")) / rel
    if not p.exists():
        pytest.skip(f"{p} is absent (shared traces are not in a fresh clone)")
    return p


def _load_fresh(d, f: Path, name: str) -> None:
    """Load one file under `name`, the path and name boxes emptied first (they keep the last)."""
    from selenium.webdriver.common.keys import Keys

    d.execute_script(
        """for (const t of document.querySelectorAll('[role="tab"], button')) {
               if ((t.innerText || '').includes('Path on server')) { t.click(); return; } }"""
    )
    for css in (".st-key-server_paths textarea", ".st-key-path_name input"):
        box = _wait_css(d, css)
        box.send_keys(Keys.CONTROL, "a")
        box.send_keys(Keys.DELETE)
    _load_by_path(d, [f], name)


def _pick(d, key: str, value: str) -> None:
    from selenium.webdriver.common.keys import Keys

    box = _wait_css(d, f".st-key-{key} input")
    box.click()
    box.send_keys(value)
    box.send_keys(Keys.ENTER)
    _idle(d, 300)


@pytest.mark.slow
def test_analysis_and_cross_gpu_compare_on_other_teams_traces(server, driver):  # noqa: F811
    d = driver
    d.set_window_size(1400, 1000)
    d.get(server)
    _wait_text(d, "Loaded traces")
    _idle(d)
    _load_by_path(d, [_shared("tracelens_bert_small/h100_bert_small.json.gz")], "H100 BERT")
    _nav(d, "explore")
    _view(d, "Analysis")
    _wait_text(d, "GPU time by kernel class", timeout=300)
    bars = _path_bars(d, "a_cp_fig")
    assert 0 < bars["bars"] <= 400, bars  # a bounded figure
    el = _wait_text(d, "GPU time by kernel class")
    d.execute_script("arguments[0].scrollIntoView({block: 'start'});", el)
    _idle(d)
    _shot(d, "32_explore_analysis_h100_bert")
    _nav(d, "traces")
    _load_fresh(d, _shared("tracelens_timesformer/h100_timesformer.json.gz"), "H100")
    _load_fresh(d, _shared("tracelens_timesformer/mi300_timesformer.json.gz"), "MI300X")
    _nav(d, "compare")
    d.execute_script(
        """for (const l of document.querySelectorAll('.st-key-cmp_mode label'))
             if (l.innerText.includes('trace vs trace')) { l.click(); return; }"""
    )
    _idle(d, 300)
    _pick(d, "cmp_a", "H100")
    _pick(d, "cmp_b", "MI300X")
    el = _wait_text(d, "MI300X 1.01x slower on gemm", timeout=300)  # a direction per kernel class
    assert "1.02x slower" in _text(d, '[data-testid="stMetric"]')  # the step, with its direction
    d.execute_script("arguments[0].scrollIntoView({block: 'center'});", el)
    _idle(d)
    _shot(d, "32_compare_timesformer_h100_vs_mi300x")
