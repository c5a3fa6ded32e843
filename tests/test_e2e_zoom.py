"""Real browser (issue 21): a zoom on Explore's timeline brings in the detail of the new window.

Before, a drag-zoom only magnified the grey grouped bars drawn for the old window
(`st.plotly_chart` reports no zoom). Here the bundled cnn sample (892 events in its first step:
400 bars, 492 grouped) is loaded by path and the timeline is zoomed by a real mouse drag over
the busiest grey bar; app/zoom.py's watcher reports the range, and the page must lay the timeline
out for it: the figure then holds bars for events the old one only counted in grey, shorter than
any bar it drew, and the window slider follows. A click on a bar still selects ET ops, and a
double-click shows the whole trace; after another view and back (chart and watcher mounted
again) a zoom still loads. Skips like tests/test_e2e_browser.py."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from test_e2e_browser import _idle, _load_by_path, _nav, _serve, _shot, _text, _wait_css, _wait_text, driver  # noqa: F401

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).resolve().parents[1]
CNN = ROOT / "sample_traces" / "cnn"
CHART = ".st-key-explore_timeline .js-plotly-plot"

# event ids with bars of their own, the shortest such bar, grey bars [start, width, count], the
# figure's title and meta (from the server: they change only when a new figure is drawn)
FIGURE = """
const gd = document.querySelector(arguments[0]);
if (!gd || !gd._fullLayout || !gd._fullData) return null;
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
        title: gd._fullLayout.title.text, meta: gd.layout.meta};
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    yield from _serve(tmp_path_factory.mktemp("e2e_zoom"))


def _figure(d, other_than: str | None = None, timeout: float = 120) -> dict:
    """The drawn timeline (once its title is not `other_than`: a new figure from the server)."""
    end = time.time() + timeout
    while True:
        fig = d.execute_script(FIGURE, CHART)
        if fig and fig["title"] != other_than:
            return fig
        if time.time() > end:
            raise AssertionError(f"no new timeline after {timeout:.0f} s: {fig and fig['title']}")
        time.sleep(0.5)


def _drag(d, a: float, b: float) -> None:
    """A real mouse drag on the chart from time `a` to time `b` (µs), at mid-height."""
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By

    chart = d.find_element(By.CSS_SELECTOR, CHART)
    drag = chart.find_element(By.CSS_SELECTOR, ".nsewdrag")
    px = d.execute_script(
        "const xa = arguments[0]._fullLayout.xaxis, r = arguments[0].querySelector('.nsewdrag').getBoundingClientRect();"
        "return [xa.l2p(arguments[1]), xa.l2p(arguments[2]), r.width];",
        chart,
        a,
        b,
    )
    x0 = int(px[0] - px[2] / 2)
    ActionChains(d).move_to_element_with_offset(drag, x0, 0).click_and_hold().pause(0.2).move_by_offset(
        int((px[1] - px[0]) / 2), 0
    ).pause(0.1).move_by_offset(int(px[1] - px[0]) - int((px[1] - px[0]) / 2), 0).pause(0.2).release().perform()


@pytest.mark.slow
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
    _wait_css(d, CHART, timeout=240)
    time.sleep(1.0)  # the watcher binds to the chart within 0.4 s
    before = _figure(d)
    assert before["grey"] and before["meta"]["grouped"] > 0, before["meta"]  # the first step is over budget
    lo, hi = before["range"]
    busiest = max(before["grey"], key=lambda g: g[2])  # the grey bar standing for most events
    a = max(lo, busiest[0])
    b = a + (hi - lo) / 20
    _shot(d, "zoom_1_before")

    _drag(d, a, b)
    _idle(d, 240)
    after = _figure(d, other_than=before["title"])
    new = set(after["ids"]) - set(before["ids"])
    assert new, "no event drawn that the old window had grouped"
    assert after["shortest"] < before["shortest"], (after["shortest"], before["shortest"])
    assert after["meta"]["grouped"] == 0 or after["meta"]["min_bar_us"] < before["meta"]["min_bar_us"]
    w = after["range"]
    assert abs(w[0] - a) < 0.05 * (b - a) and abs(w[1] - b) < 0.05 * (b - a), (w, a, b)  # the dragged window
    assert str(int(w[0])) in _text(d, ".st-key-t_window").replace(",", "")  # the window slider followed
    _shot(d, "zoom_2_after")

    # a click on a linked bar of the new window still selects ET ops (st.plotly_chart's selection)
    bar = d.execute_script(
        """const gd = document.querySelector(arguments[0]), layers = gd.querySelectorAll('.barlayer .trace');
        let best = null, w = 4;
        gd._fullData.forEach((t, ti) => {
          if (t.name === 'grouped short events') return;
          layers[ti].querySelectorAll('.point').forEach((p, i) => {
            const r = p.getBoundingClientRect();
            if (t.customdata[i][5] >= 0 && r.width > w) { w = r.width; best = p.querySelector('path'); }
          });
        });
        return best;""",
        CHART,
    )
    assert bar is not None, "no linked bar wide enough to click"
    ActionChains(d).move_to_element(bar).pause(0.4).click().perform()
    _idle(d)
    _wait_text(d, "from 1 events")
    _shot(d, "zoom_3_pick")

    # double-click: the whole trace
    shown = _figure(d)
    drag = d.find_element(By.CSS_SELECTOR, CHART + " .nsewdrag")
    ActionChains(d).move_to_element_with_offset(drag, 0, 0).double_click().perform()
    _idle(d, 240)
    whole = _figure(d, other_than=shown["title"])
    assert whole["range"][0] <= 1e-6 and whole["range"][1] > hi, whole["range"]

    # another view and back: the chart and its watcher are mounted again, and a zoom still loads
    for label in ("SQL", "Timeline"):
        next(
            lab for lab in d.find_elements(By.CSS_SELECTOR, ".st-key-explore_view label") if lab.text.strip() == label
        ).click()
        _idle(d, 240)
    _wait_css(d, CHART, timeout=240)
    time.sleep(1.0)
    shown = _figure(d)
    _drag(d, a, b)
    _idle(d, 240)
    again = _figure(d, other_than=shown["title"])
    assert set(again["ids"]) - set(shown["ids"]) and again["shortest"] < shown["shortest"]
