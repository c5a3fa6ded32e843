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


@pytest.mark.slow
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
    names = {t["name"] for t in fig["traces"]}
    assert "GPU busy (merged kernels)" in names, names  # busy, not one grey "grouped" row
    gpu_ticks = [t for t in fig["ticks"] if t["text"].startswith("GPU 0 stream 7")]
    # the stream row is labelled, with its busy share, and the label is on screen (not clipped)
    assert gpu_ticks and "% busy" in gpu_ticks[0]["text"] and gpu_ticks[0]["left"] >= 0, fig["ticks"]
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


@pytest.mark.slow
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


def _click_label(d, label: str) -> None:
    """A real mouse click on the graph node whose name starts with `label`."""
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By

    chart = _wait_css(d, ".st-key-explore_graph .js-plotly-plot")
    info = d.execute_script(
        """const gd = arguments[0], fl = gd._fullLayout;
           for (const t of gd._fullData) {
             if (!t.mode || !t.mode.includes('markers') || !t.text) continue;
             for (let i = 0; i < t.x.length; i++) if (String(t.text[i]).startsWith(arguments[1])) {
               const r = gd.querySelector('.nsewdrag').getBoundingClientRect();
               return {px: fl.xaxis.l2p(t.x[i]), py: fl.yaxis.l2p(t.y[i]), w: r.width, h: r.height};
             }
           } return null;""",
        chart,
        label,
    )
    assert info is not None, f"no node named {label}"
    drag = chart.find_element(By.CSS_SELECTOR, ".nsewdrag")
    ActionChains(d).move_to_element_with_offset(
        drag, int(info["px"] - info["w"] / 2), int(info["py"] - info["h"] / 2)
    ).pause(0.4).click().perform()
    _idle(d)


GRAPH = """
const gd = document.querySelector('.st-key-explore_graph .js-plotly-plot');
if (!gd || !gd._fullData) return null;
const xs = new Set(), text = [];
for (const t of gd._fullData) {
  if (!t.mode || !t.mode.includes('markers') || !t.customdata) continue;
  for (const x of t.x) xs.add(x);
  for (const s of (t.text || [])) text.push(s);
}
return {columns: xs.size, text: text, title: gd._fullLayout.title.text};
"""


@pytest.mark.slow
def test_graph_opens_a_group_without_selecting_it_and_names_its_groups(server, driver):  # noqa: F811
    """GPT-2 (bundled sample): in "opens it" mode a click on a group (forward, backward or the
    optimizer) drills in and selects nothing; then the backward level's 121 groups are named for
    their autograd functions, in a grid."""
    from selenium.webdriver.common.by import By
    from test_e2e_browser import _click_graph_node, _text

    gpt2 = ROOT / "sample_traces" / "gpt2_hf"
    if not (gpt2 / "gpt2_hf_et.json.gz").exists():
        pytest.skip("bundled gpt2_hf sample missing (make samples)")
    d = driver
    d.set_window_size(1400, 1100)
    d.get(server)
    _wait_text(d, "Loaded traces")
    _idle(d)
    _load_by_path(d, [gpt2 / "gpt2_hf_et.json.gz", gpt2 / "gpt2_hf_kineto.json.gz"], "GPT-2")
    _nav(d, "explore")
    _view(d, "Operator graph")
    _wait_css(d, ".st-key-explore_graph .js-plotly-plot", timeout=300)
    d.execute_script(
        """for (const l of document.querySelectorAll('.st-key-explore_graph_click label'))
             if (l.innerText.includes('opens it')) { l.click(); return; }"""
    )
    _idle(d)
    top = d.execute_script(GRAPH)
    # the whole chart in view: a click below the fold scrolls the page and never reaches the point
    d.execute_script("document.querySelector('.st-key-explore_graph').scrollIntoView({block: 'center'});")
    time.sleep(1.0)
    key = _click_graph_node(d, "explore_graph", "group")
    assert key is not None
    end = time.time() + 120
    while (fig := d.execute_script(GRAPH)) is None or fig["title"] == top["title"]:
        if time.time() > end:
            _shot(d, "32_graph_gpt2_not_opened")
            raise AssertionError(f"the click on {key} did not open the group")
        time.sleep(0.5)
    _idle(d)
    assert fig["title"] != top["title"]  # drilled in
    assert "selected" not in _text(d, '[data-testid="stAlert"]')  # and nothing was selected
    assert "Selection" not in _text(d, '[data-testid="stSidebar"]')
    # back to the top level with its breadcrumb, then into backward by its label
    for b in d.find_elements(By.CSS_SELECTOR, "[class*='st-key-explore_graph_crumb_'] button"):
        if "ProfilerStep" in b.text:
            b.click()
            break
    _idle(d)
    d.execute_script("document.querySelector('.st-key-explore_graph').scrollIntoView({block: 'center'});")
    time.sleep(1.0)
    _click_label(d, "backward")
    end = time.time() + 120
    while "backward" not in _text(d, "[class*='st-key-explore_graph_crumb_']"):
        assert time.time() < end, "backward did not open"
        time.sleep(0.5)
    _idle(d)
    fig = d.execute_script(GRAPH)
    assert fig["columns"] > 1 and any("AddmmBackward0" in t for t in fig["text"]), fig
    assert all(t for t in fig["text"])  # every group named
    _shot(d, "32_graph_gpt2_backward_grid")


@pytest.mark.slow
def test_embedding_sharding_counts_the_tbe_lookup_as_embedding(server, driver):  # noqa: F811
    """DLRM with an FBGEMM TBE (bundled dlrm_tbe rank 0): picking the TBE lookup and sharding its
    tables over ranks called the lookup a "non-embedding op" and drew 0 µs on every rank."""
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from test_e2e_browser import _text

    tbe = ROOT / "sample_traces" / "dlrm_tbe"
    if not (tbe / "dlrm_tbe_rank0_et.json.gz").exists():
        pytest.skip("bundled dlrm_tbe sample missing (make samples)")
    d = driver
    d.set_window_size(1400, 1100)
    d.get(server)
    _wait_text(d, "Loaded traces")
    _idle(d)
    _load_by_path(d, [tbe / "dlrm_tbe_rank0_et.json.gz", tbe / "dlrm_tbe_rank0_kineto.json.gz"], "DLRM TBE")
    _nav(d, "compose")
    next(t for t in d.find_elements(By.CSS_SELECTOR, '[role="tab"]') if t.text.strip() == "Table").click()
    box = _wait_css(d, ".st-key-compose_filter input")
    box.send_keys("split_embedding_codegen_lookup")
    box.send_keys(Keys.ENTER)
    _idle(d)
    grid = _wait_css(d, ".st-key-compose_table canvas")
    time.sleep(1.0)
    r = grid.rect
    # the row marker (selection checkbox) of the first and only row: left column, under the header
    ActionChains(d).move_to_element_with_offset(
        grid, int(14 - r["width"] / 2), int(35 + 17 - r["height"] / 2)
    ).click().perform()
    _idle(d)
    assert "Picked: 1 ops" in _text(d, "body"), "the TBE row was not picked"
    _wait_css(d, ".st-key-compose_add button").click()
    _idle(d)
    sel = _wait_css(d, "[class*='st-key-compose_sharding'] input")
    sel.click()
    sel.send_keys("embedding")
    sel.send_keys(Keys.ENTER)
    _idle(d, 300)
    _wait_text(d, "Embedding plan", timeout=300)
    alerts = _text(d, '[data-testid="stAlert"]')
    assert "non-embedding" not in alerts and "split_embedding_codegen_lookup" not in alerts, alerts
    chart = _wait_css(d, ".st-key-compose_shard_chart .js-plotly-plot", timeout=60)
    time.sleep(1.0)
    us = d.execute_script("return Array.from(arguments[0]._fullData[0].y);", chart)
    assert len(us) >= 2 and all(v > 0 for v in us), us  # every rank has embedding time
    d.execute_script("arguments[0].scrollIntoView({block: 'center'});", chart)
    _idle(d)
    _shot(d, "32_compose_embedding_sharding_tbe")


@pytest.mark.slow
def test_et_only_summary_says_it_has_no_times_instead_of_an_empty_chart(server, driver):  # noqa: F811
    from test_e2e_browser import _text

    gpt2 = ROOT / "sample_traces" / "gpt2_hf"
    if not (gpt2 / "gpt2_hf_et.json.gz").exists():
        pytest.skip("bundled gpt2_hf sample missing (make samples)")
    d = driver
    d.get(server)
    _wait_text(d, "Loaded traces")
    _idle(d)
    _load_by_path(d, [gpt2 / "gpt2_hf_et.json.gz"], "GPT-2 ET only")
    _wait_css(d, ".st-key-summary_no_times", timeout=120)
    assert "No operator times" in _text(d, ".st-key-summary_no_times")
    assert not d.find_elements("css selector", ".st-key-summary_top_ops .js-plotly-plot")  # no empty chart


def _server_process(url: str):
    import psutil

    port = url.rsplit(":", 1)[-1]
    for p in psutil.process_iter(["cmdline"]):
        cmd = p.info["cmdline"] or []
        if "streamlit" in " ".join(cmd) and port in cmd:
            return p
    raise AssertionError(f"no streamlit process on port {port}")


@pytest.mark.slow
def test_a_finished_replay_leaves_no_defunct_child(server, driver):  # noqa: F811
    """The replay worker is the server's child: nothing waited on it, so each finished replay
    left a <defunct> process under the Streamlit server."""
    import psutil
    from selenium.webdriver.common.keys import Keys
    from test_e2e_dashboard import _pick

    d = driver
    d.get(server)
    _wait_text(d, "Loaded traces")
    _idle(d)
    _nav(d, "replay")
    _pick(d, "replay_trace", "sample:mlp")
    for key, value in (("replay_iters", "2"), ("replay_warmup", "0")):  # short
        box = _wait_css(d, f".st-key-{key} input")
        box.send_keys(Keys.CONTROL, "a")
        box.send_keys(value, Keys.ENTER)
        _idle(d)
    _wait_css(d, ".st-key-run_replay button").click()
    try:
        _wait_text(d, "peak RSS (process tree)", timeout=300)  # the job finished: its result is shown
    finally:
        _shot(d, "32_replay_reaped")
    srv = _server_process(server)
    end = time.time() + 60
    while time.time() < end:  # until the worker has exited (it records its result, then exits)
        if all(_status(c) in (psutil.STATUS_ZOMBIE, None) for c in srv.children()):
            break
        time.sleep(0.3)
    time.sleep(1.0)
    zombies = [c.pid for c in srv.children() if _status(c) == psutil.STATUS_ZOMBIE]
    assert not zombies, f"defunct children of the server: {zombies}"


def _status(p) -> str | None:
    import psutil

    try:
        return p.status()
    except psutil.NoSuchProcess:
        return None
