"""Real browser against the running app: Debian chromium + chromedriver driven by selenium.

Starts `streamlit run app/main.py` on a free port, then: the bundled sample is loaded; on
Explore a graph node is clicked (a real mouse click at the node's pixel position: the graph is
WebGL, so there is no DOM node to click) and a timeline bar is clicked (an SVG path); on Compose
the selection becomes a segment; on Replay it runs on CPU; on Compare the comparison shows.
Screenshots go to artifacts/e2e/. Skips only when chromium/chromedriver or selenium are missing.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from engine.testing.browser import CHROMEDRIVER, CHROMIUM, FLAGS, free_port

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).resolve().parents[1]
ART = ROOT / "artifacts" / "e2e"


def _need_browser():
    try:
        import selenium  # noqa: F401 -- availability probe
    except ImportError:
        pytest.skip("selenium is not installed (pip install selenium; it is in the test extra)")
    for exe in (CHROMIUM, CHROMEDRIVER):
        if not os.access(exe, os.X_OK):
            pytest.skip(f"{Path(exe).name} not found (apt-get install chromium chromium-driver, or `make browser`)")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    _need_browser()
    if not (ROOT / "sample_traces" / "mlp" / "mlp_et.json.gz").exists():
        pytest.skip("bundled mlp sample missing (make samples)")
    port = free_port()
    tmp = tmp_path_factory.mktemp("e2e")
    env = dict(os.environ, MYSTIQUE_CACHE_DIR=str(tmp / "cache"), MYSTIQUE_UI_DIR=str(tmp / "ui"))
    log = open(tmp / "streamlit.log", "w")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "streamlit",
            "run",
            str(ROOT / "app" / "main.py"),
            "--server.port",
            str(port),
            "--server.headless",
            "true",
            "--server.address",
            "localhost",
            "--browser.gatherUsageStats",
            "false",
        ],
        cwd=str(ROOT),
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://localhost:{port}"
    deadline = time.time() + 60
    while time.time() < deadline:
        try:
            if urllib.request.urlopen(f"{url}/_stcore/health", timeout=2).read() == b"ok":
                break
        except OSError:
            time.sleep(0.3)
        if proc.poll() is not None:
            break
    else:
        proc.kill()
        pytest.fail(f"streamlit did not start: {(tmp / 'streamlit.log').read_text()[-2000:]}")
    yield url
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
    log.close()


@pytest.fixture(scope="module")
def driver(server, tmp_path_factory):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for f in FLAGS:
        opts.add_argument(f)
    opts.add_argument(f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}")
    d = webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)
    d.set_page_load_timeout(60)
    ART.mkdir(parents=True, exist_ok=True)
    yield d
    d.quit()


def _wait_text(d, text: str, timeout: float = 90):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as EC
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(d, timeout).until(
        EC.presence_of_element_located(
            (
                By.XPATH,
                f"//*[contains(normalize-space(.), {text!r}) and not(*[contains(normalize-space(.), {text!r})])]",
            )
        )
    )


def _wait_css(d, css: str, timeout: float = 90):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as EC
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(d, timeout).until(EC.visibility_of_element_located((By.CSS_SELECTOR, css)))


def _idle(d, timeout: float = 120):
    """Wait until the app is not running a script.

    The app root carries `data-test-script-state` ("running" / "notRunning"); the status widget
    in the header is not rendered in this headless set-up, so it cannot be waited on. The short
    sleep first lets a run that a click just triggered start; two idle reads in a row guard
    against the gap between a run and the rerun it requests."""
    from selenium.webdriver.common.by import By

    time.sleep(0.6)
    end = time.time() + timeout
    idle_reads = 0
    while time.time() < end:
        roots = d.find_elements(By.CSS_SELECTOR, ".stApp[data-test-script-state]")
        state = roots[0].get_attribute("data-test-script-state") if roots else "notRunning"
        idle_reads = idle_reads + 1 if state != "running" else 0
        if idle_reads >= 2:
            return
        time.sleep(0.3)
    raise AssertionError(f"the app was still running a script after {timeout:.0f} s")


def _nav(d, slug: str):
    from selenium.webdriver.common.by import By

    link = next(
        a
        for a in d.find_elements(By.CSS_SELECTOR, '[data-testid="stSidebarNavLink"]')
        if a.get_attribute("href").rstrip("/").endswith(slug)
    )
    link.click()
    _idle(d)


def _click_graph_node(d, chart_key: str) -> object:
    """Real mouse click on the first node of a Scattergl graph chart; returns the node key."""
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By

    chart = _wait_css(d, f".st-key-{chart_key} .js-plotly-plot")
    time.sleep(1.0)
    info = d.execute_script(
        """
        const gd = arguments[0];
        const fl = gd._fullLayout;
        const tr = gd._fullData.find(t => t.mode === 'markers' && t.x.length > 0);
        const r = gd.querySelector('.nsewdrag').getBoundingClientRect();
        return {px: fl.xaxis.l2p(tr.x[0]), py: fl.yaxis.l2p(tr.y[0]), w: r.width, h: r.height, key: tr.customdata[0]};
    """,
        chart,
    )
    drag = chart.find_element(By.CSS_SELECTOR, ".nsewdrag")
    ActionChains(d).move_to_element_with_offset(
        drag, int(info["px"] - info["w"] / 2), int(info["py"] - info["h"] / 2)
    ).pause(0.4).click().perform()
    _idle(d)
    return info["key"]


def test_click_compose_replay_compare(server, driver):
    try:
        _flow(server, driver)
    except Exception:
        driver.save_screenshot(str(ART / "failure.png"))
        raise


def _flow(server, driver):
    from selenium.webdriver.common.by import By

    d = driver
    d.get(server)
    _wait_text(d, "Loaded traces")
    _idle(d)
    d.save_screenshot(str(ART / "1_traces.png"))
    assert "sample:mlp" in d.find_element(By.CSS_SELECTOR, ".st-key-summary_pick").get_attribute(
        "innerText"
    ) or d.find_elements(
        By.CSS_SELECTOR,
        ".st-key-summary_pick input[value='sample:mlp'], .st-key-summary_pick [aria-label*='sample:mlp']",
    )
    _wait_text(d, "ET↔Kineto link rate")

    # Explore: click an operator in the graph
    _nav(d, "explore")
    key = _click_graph_node(d, "explore_graph")
    _wait_text(d, "ET ops (1 nodes)")
    d.save_screenshot(str(ART / "2_explore_graph_click.png"))
    assert key is not None

    # Explore: click a bar in the timeline (SVG bars: a DOM click on the widest cpu_op bar)
    next(
        lab for lab in d.find_elements(By.CSS_SELECTOR, ".st-key-explore_view label") if lab.text.strip() == "Timeline"
    ).click()
    _idle(d)
    chart = _wait_css(d, ".st-key-explore_timeline .js-plotly-plot")
    time.sleep(1.0)
    bar = d.execute_script(
        """
        const gd = arguments[0];
        const idx = gd._fullData.findIndex(t => t.name === 'cpu_op');
        const paths = [...gd.querySelectorAll('.barlayer .trace')[idx].querySelectorAll('.point path')];
        let best = null, bw = 0;
        for (const p of paths) { const w = p.getBoundingClientRect().width; if (w > bw) { bw = w; best = p; } }
        return best;""",
        chart,
    )
    assert bar is not None, "no timeline bar found"
    from selenium.webdriver.common.action_chains import ActionChains

    ActionChains(d).move_to_element(bar).pause(0.4).click().perform()
    _idle(d)
    _wait_text(d, "from 1 events")
    caption = _wait_text(d, "flow arrows to the GPU work")
    assert "event " in caption.text
    d.save_screenshot(str(ART / "3_explore_timeline_click.png"))

    # Compose: click a node in the compose graph and add it as a segment
    _nav(d, "compose")
    _click_graph_node(d, "compose_graph")
    _wait_text(d, "Picked")
    picked = d.find_element(By.XPATH, "//*[starts-with(normalize-space(.), 'Picked:')]").text
    assert "Picked: 0 ops" not in picked, picked
    next(b for b in d.find_elements(By.CSS_SELECTOR, ".st-key-compose_add button")).click()
    _idle(d)
    _wait_text(d, "segment 1:")
    _wait_text(d, "estimated memory")
    _wait_css(d, ".st-key-compose_export button").click()
    _idle(d)
    _wait_text(d, "exported to")
    d.save_screenshot(str(ART / "4_compose.png"))

    # Replay the selection on CPU
    _nav(d, "replay")
    _wait_css(d, ".st-key-replay_target label")
    radios = d.find_elements(By.CSS_SELECTOR, ".st-key-replay_target label")
    target = next(r for r in radios if r.text.startswith("composed"))
    target.click()
    _idle(d)
    _wait_css(d, ".st-key-run_replay button").click()
    _wait_text(d, "Replay done", timeout=240)
    _idle(d)
    d.save_screenshot(str(ART / "5_replay.png"))

    # Compare: the comparison of the original and the replay
    _nav(d, "compare")
    _wait_text(d, "end-to-end error")
    _wait_css(d, '[data-testid="stMetricValue"]')
    values = [e.text for e in d.find_elements(By.CSS_SELECTOR, '[data-testid="stMetricValue"]')]
    assert any(v.endswith("%") for v in values), values
    d.save_screenshot(str(ART / "6_compare.png"))
