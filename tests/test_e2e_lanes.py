"""Real browser (issue 32 items 7 and 9), short journeys on other teams' traces: the Timeline of the
H100 TimeSformer shows its GPU as busy at the whole-run window, labels the stream row (drawn on
screen, not cut off), and folding python frames lifts the aten rows. Screenshots to
artifacts/e2e/ (docs/screenshots/ with MYSTIQUE_SCREENSHOTS=1). Skips like
tests/test_e2e_browser.py."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from test_e2e_analysis import _view
from test_e2e_browser import _idle, _load_by_path, _nav, _serve, _shot, _wait_css, _wait_text, driver  # noqa: F401

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).resolve().parents[1]
CHART = ".st-key-explore_timeline .js-plotly-plot"

# per drawn trace: name and bar rows; the y tick labels as drawn (text and left edge on screen)
FIGURE = """
const gd = document.querySelector(arguments[0]);
if (!gd || !gd._fullData) return null;
const traces = gd._fullData.map(t => ({name: t.name, rows: Array.from(t.y || []).filter(v => v !== null)}));
const plot = gd.getBoundingClientRect();
const ticks = Array.from(gd.querySelectorAll('.ytick text')).map(t => {
  const r = t.getBoundingClientRect(); return {text: t.textContent, left: r.left - plot.left, width: r.width};
});
const ya = gd._fullLayout.yaxis;
return {traces: traces, ticks: ticks, title: gd._fullLayout.title.text,
        tickvals: Array.from(ya.tickvals), ticktext: Array.from(ya.ticktext)};
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    yield from _serve(tmp_path_factory.mktemp("e2e_lanes"))


def _shared(rel: str) -> Path:
    p = Path(os.environ.get("MYSTIQUE_SHARED_TRACES", ROOT.parent / "shared" / "traces")) / rel
    if not p.exists():
        pytest.skip(f"{p} is absent (shared traces are not in a fresh clone)")
    return p


def _figure(d, other_than: str | None = None, timeout: float = 120) -> dict:
    end = time.time() + timeout
    while True:
        fig = d.execute_script(FIGURE, CHART)
        if fig and fig["ticks"] and fig["title"] != other_than:
            return fig
        if time.time() > end:
            raise AssertionError(f"no new timeline after {timeout:.0f} s")
        time.sleep(0.5)


def test_timeline_shows_a_busy_labelled_gpu_and_folds_python_frames(server, driver):  # noqa: F811
    d = driver
    d.set_window_size(1400, 1100)
    d.get(server)
    _wait_text(d, "Loaded traces")
    _idle(d)
    _load_by_path(d, [_shared("tracelens_timesformer/h100_timesformer.json.gz")], "H100 TimeSformer")
    _nav(d, "explore")
    _view(d, "Timeline")
    _wait_css(d, CHART, timeout=300)
    fig = _figure(d)
    gpu_ticks = [t for t in fig["ticks"] if t["text"].startswith("GPU 0 stream 7")]
    # the stream row is labelled, with its busy share, and the label is on screen (not clipped)
    assert gpu_ticks and "% busy" in gpu_ticks[0]["text"] and gpu_ticks[0]["left"] >= 0, fig["ticks"]
    names = {t["name"] for t in fig["traces"]}
    assert "GPU busy (merged kernels)" in names, names  # busy, not one grey "grouped" row
    busy_rows = {r for t in fig["traces"] if t["name"] == "GPU busy (merged kernels)" for r in t["rows"]}
    grey_rows = {r for t in fig["traces"] if t["name"] == "grouped short events" for r in t["rows"]}
    assert busy_rows and not busy_rows & grey_rows
    # the GPU work sits under its stream's label: the nearest lane label at or above each busy row
    lanes = sorted(zip(fig["tickvals"], fig["ticktext"]))
    for r in busy_rows:
        owner = next(text for v, text in lanes if v >= r)
        assert owner.startswith("GPU 0 stream 7"), (r, lanes)
    assert "python" in names
    d.execute_script(
        """for (const t of document.querySelectorAll(arguments[0] + ' .ytick text'))
             if (t.textContent.startsWith('GPU')) { t.scrollIntoView({block: 'center'}); }""",
        CHART,
    )
    time.sleep(0.5)
    _shot(d, "32_timeline_h100_timesformer")

    d.execute_script("arguments[0].scrollIntoView({block: 'center'});", _wait_css(d, ".st-key-t_fold_py"))
    _wait_css(d, ".st-key-t_fold_py label").click()
    _idle(d, 240)
    folded = _figure(d, other_than=fig["title"])
    names = {t["name"] for t in folded["traces"]}
    assert "python" not in names and "cpu_op" in names, names
    rows = {r for t in folded["traces"] if t["name"] == "cpu_op" for r in t["rows"]}
    before = {r for t in fig["traces"] if t["name"] == "cpu_op" for r in t["rows"]}
    assert max(rows) > max(before)  # aten rows rose (rows are negative y: higher is nearer the top)
    _shot(d, "32_timeline_h100_timesformer_folded")


TIMELINES = """
const gd = document.querySelector('.st-key-tt_timelines .js-plotly-plot');
if (!gd || !gd._fullData) return null;
const out = {titles: (gd._fullLayout.annotations || []).map(a => a.text), gpu: {}};
for (const t of gd._fullData) {
  if (!['kernel', 'memory', 'GPU busy (merged kernels)'].includes(t.name)) continue;
  const side = t.yaxis === 'y2' ? 'b' : 'a';
  const base = Array.from(t.base || []);
  out.gpu[side] = Math.min(out.gpu[side] ?? Infinity, ...base);
}
return out;
"""


def test_cross_gpu_compare_aligns_the_two_timelines_by_step(server, driver):  # noqa: F811
    from test_e2e_dashboard import _load_fresh, _pick

    d = driver
    d.set_window_size(1400, 1100)
    d.get(server)
    _wait_text(d, "Loaded traces")
    _idle(d)
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
    _wait_css(d, ".st-key-tt_timelines .js-plotly-plot", timeout=300)
    fig = d.execute_script(TIMELINES)
    # each side from its ProfilerStep, over the longer step: both GPUs' work is in view
    assert sum("aligned at ProfilerStep#6" in t for t in fig["titles"]) == 2, fig["titles"]
    assert set(fig["gpu"]) == {"a", "b"}, fig
    d.execute_script(
        """for (const l of document.querySelectorAll('.st-key-tt_align label'))
             if (l.innerText.includes('first GPU work')) { l.click(); return; }"""
    )
    _idle(d, 300)
    end = time.time() + 120
    while True:
        fig = d.execute_script(TIMELINES)
        if fig and sum("first GPU work" in t for t in fig["titles"]) == 2:
            break
        assert time.time() < end, fig
        time.sleep(0.5)
    # the two GPUs' first work now starts together at 0
    assert abs(fig["gpu"]["a"]) < 1.0 and abs(fig["gpu"]["b"]) < 1.0, fig
    el = _wait_css(d, ".st-key-tt_align")
    d.execute_script("arguments[0].scrollIntoView({block: 'start'}); window.scrollBy(0, -60);", el)
    _idle(d)
    _shot(d, "32_compare_timelines_h100_vs_mi300x")
