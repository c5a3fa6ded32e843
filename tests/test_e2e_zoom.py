"""Real browser (issue 21): a zoom on Explore's timeline brings in the detail of the new window.

Before, a drag-zoom only magnified the grey grouped bars drawn for the old window
(`st.plotly_chart` reports no zoom). Here the bundled cnn sample (892 events in its first step:
400 bars, 492 grouped) is loaded by path; plotly is zoomed inside the component's iframe with
`Plotly.relayout(gd, {'xaxis.range': [a, b]})`, exactly what a drag does; the page must lay the
timeline out for [a, b]: the figure then holds bars for events the old one had only counted in
grey, shorter than any bar it drew, the window slider follows, and a click on a bar still
selects ET ops. Skips like tests/test_e2e_browser.py."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from test_e2e_browser import _idle, _load_by_path, _nav, _serve, _shot, _text, _wait_css, _wait_text, driver  # noqa: F401

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).resolve().parents[1]
CNN = ROOT / "sample_traces" / "cnn"

# (event ids with bars of their own, the shortest such bar, the x range, grey bars' starts/widths/counts)
FIGURE = """
const gd = document.getElementById('chart');
if (!gd || !gd._fullLayout || !gd.data) return null;
const ids = [], grey = [];
let shortest = Infinity;
for (const t of gd._fullData) {
  const x = Array.from(t.x || []), base = Array.from(t.base || []);
  if (t.name === 'grouped short events') {
    x.forEach((w, i) => grey.push([base[i], w, t.customdata[i][1]]));
    continue;
  }
  (t.customdata || []).forEach((r, i) => { ids.push(r[0]); shortest = Math.min(shortest, x[i]); });
}
return {ids: ids, shortest: shortest, range: gd._fullLayout.xaxis.range.slice(), grey: grey,
        meta: gd.layout.meta};
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    yield from _serve(tmp_path_factory.mktemp("e2e_zoom"))


def _figure(d, want_range=None, timeout: float = 120) -> dict:
    """The figure drawn in the component's iframe (once its x range is `want_range`)."""
    from selenium.webdriver.common.by import By

    end = time.time() + timeout
    while True:
        d.switch_to.default_content()
        frames = d.find_elements(By.CSS_SELECTOR, ".st-key-explore_timeline iframe")
        fig = None
        if frames:
            d.switch_to.frame(frames[0])
            fig = d.execute_script(FIGURE)
            d.switch_to.default_content()
        if fig and (want_range is None or all(abs(g - w) < 1e-3 for g, w in zip(fig["range"], want_range))):
            return fig
        if time.time() > end:
            raise AssertionError(f"the timeline did not show {want_range}: {fig and fig['range']}")
        time.sleep(0.5)


def test_zoom_lays_out_the_new_window_with_its_detail(server, driver):  # noqa: F811
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By

    if not (CNN / "cnn_et.json.gz").exists():
        pytest.skip("bundled cnn sample missing (make samples)")
    d = driver
    d.get(server)
    _wait_text(d, "Loaded traces")
    _idle(d)
    _load_by_path(d, [CNN / "cnn_et.json.gz", CNN / "cnn_kineto.json.gz"], "cnn_zoom")
    _nav(d, "explore")
    assert "cnn_zoom" in _text(d, ".st-key-explore_trace")
    next(
        lab for lab in d.find_elements(By.CSS_SELECTOR, ".st-key-explore_view label") if lab.text.strip() == "Timeline"
    ).click()
    _idle(d, 240)
    _wait_css(d, ".st-key-explore_timeline iframe", timeout=240)
    before = _figure(d)
    assert before["grey"] and before["meta"]["grouped"] > 0, before["meta"]  # the first step is over budget
    lo, hi = before["range"]
    busiest = max(before["grey"], key=lambda g: g[2])  # the grey bar standing for most events
    a = max(lo, busiest[0])
    b = a + (hi - lo) / 20
    _shot(d, "zoom_1_before")

    frame = d.find_element(By.CSS_SELECTOR, ".st-key-explore_timeline iframe")
    d.switch_to.frame(frame)
    d.execute_script("Plotly.relayout(document.getElementById('chart'), {'xaxis.range': arguments[0]})", [a, b])
    d.switch_to.default_content()
    _idle(d, 240)
    after = _figure(d, [a, b])
    new = set(after["ids"]) - set(before["ids"])
    assert new, "no event drawn that the old window had grouped"
    assert after["shortest"] < before["shortest"], (after["shortest"], before["shortest"])
    assert after["meta"]["min_bar_us"] < before["meta"]["min_bar_us"] or after["meta"]["grouped"] == 0
    assert str(int(a)) in _text(d, ".st-key-t_window").replace(",", "")  # the window slider followed
    _shot(d, "zoom_2_after")

    # a click on a linked bar of the new window still selects ET ops (the component's value)
    d.switch_to.frame(d.find_element(By.CSS_SELECTOR, ".st-key-explore_timeline iframe"))
    bar = d.execute_script(
        """const gd = document.getElementById('chart'), layers = gd.querySelectorAll('.barlayer .trace');
        let best = null, w = 4;
        gd._fullData.forEach((t, ti) => {
          if (t.name === 'grouped short events') return;
          layers[ti].querySelectorAll('.point').forEach((p, i) => {
            const r = p.getBoundingClientRect();
            if (t.customdata[i][5] >= 0 && r.width > w) { w = r.width; best = p.querySelector('path'); }
          });
        });
        return best;"""
    )
    assert bar is not None, "no linked bar wide enough to click"
    ActionChains(d).move_to_element(bar).pause(0.4).click().perform()
    d.switch_to.default_content()
    _idle(d)
    _wait_text(d, "from 1 events")
    _shot(d, "zoom_3_pick")
