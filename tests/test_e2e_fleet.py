"""Real browser on the Fleet page: a planted fleet (engine.testing.fleet.planted_fleet) signed from
the page by a worker process, the jobs' map and the class mix drawn, the suite written.

Skips when chromium, chromedriver or selenium are missing. Screenshot: artifacts/e2e/fleet.png.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from engine.testing import browser

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_fleet_page_in_chromium(tmp_path, cache_dir):
    from selenium.webdriver.common.by import By

    if why := browser.missing():
        pytest.skip(why)
    pytest.importorskip("sklearn")
    from engine.testing.fleet import planted_fleet

    jobs = planted_fleet(tmp_path / "jobs", 12)
    with browser.serve(tmp_path, {"MYSTIQUE_APP_SCHEDULER": "serial"}) as url:
        d = browser.chrome(tmp_path / "profile")
        try:
            d.get(f"{url}/fleet")
            box = _wait(d, ".st-key-fleet_paths textarea")
            box.send_keys(str(tmp_path / "jobs"))
            _wait(d, '[data-testid="stFormSubmitButton"] button').click()
            browser.drawn_ms(d, None, ["fleet_map", "fleet_mix"], timeout_s=240)
            main = d.find_element(By.CSS_SELECTOR, '[data-testid="stMain"]').text
            assert "suite L1 to the fleet" in main and str(len(jobs)) in main
            stars = d.execute_script(
                "const gd = document.querySelector('.st-key-fleet_map .js-plotly-plot');"
                "return gd._fullData.filter(t => t.name === 'suite').map(t => t.x.length);"
            )
            assert stars == [5]
            _wait(d, ".st-key-fleet_write button").click()
            end = time.monotonic() + 60
            while "suite written" not in d.find_element(By.CSS_SELECTOR, '[data-testid="stMain"]').text:
                assert time.monotonic() < end, "the suite was not written"
                time.sleep(0.3)
            assert list((tmp_path / "ui").rglob("suite_5/manifest.json"))
            (ROOT / "artifacts" / "e2e").mkdir(parents=True, exist_ok=True)
            d.save_screenshot(str(ROOT / "artifacts" / "e2e" / "fleet.png"))
        finally:
            d.quit()


def _wait(d, css: str, timeout: float = 90):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as EC
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(d, timeout).until(EC.element_to_be_clickable((By.CSS_SELECTOR, css)))


@pytest.mark.slow
def test_fleet_page_composes_and_replays_the_suite_in_chromium(tmp_path, cache_dir):
    """A 3-job fleet (the mlp sample's Kineto file alone, the cnn sample with its ET, a GPU-only
    job): signed, the suite of 3 composed by a worker (two benchmarks, one pick refused with its
    reason) and replayed, all from the page."""
    import json
    import shutil

    if why := browser.missing():
        pytest.skip(why)
    pytest.importorskip("sklearn")
    from engine.testing.fleet import planted_fleet

    samples = ROOT / "sample_traces"
    jobs = tmp_path / "jobs"
    (jobs / "cnn").mkdir(parents=True)
    shutil.copy(samples / "mlp" / "mlp_kineto.json.gz", jobs / "mlp_only.json.gz")
    for f in (samples / "cnn").iterdir():
        shutil.copy(f, jobs / "cnn" / f.name)
    (gpu,) = planted_fleet(tmp_path / "planted", 1)
    shutil.copy(gpu[0], jobs / "gpu_only.json")
    with browser.serve(tmp_path, {"MYSTIQUE_APP_SCHEDULER": "serial"}) as url:
        d = browser.chrome(tmp_path / "profile")
        try:
            d.get(f"{url}/fleet")
            box = _wait(d, ".st-key-fleet_paths textarea")
            box.send_keys(
                "\n".join(str(jobs / n) for n in ("mlp_only.json.gz", "cnn/cnn_kineto.json.gz", "gpu_only.json"))
            )
            _wait(d, '[data-testid="stFormSubmitButton"] button').click()
            browser.drawn_ms(d, None, ["fleet_map", "fleet_mix"], timeout_s=240)
            _wait(d, ".st-key-fleet_compose button").click()
            _text(d, "Composed suite", 300)
            (man,) = [p for p in (tmp_path / "ui").rglob("manifest.json") if (p.parent / "members").is_dir()]
            doc = json.loads(man.read_text())
            by = {m["job"]: m for m in doc["members"]}
            assert by["mlp_only"]["benchmark"] and by["cnn_kineto"]["benchmark"], by
            assert "without shapes" in by["gpu_only"]["refused"]
            _text(d, "gpu_only not composed", 30)
            _wait(d, ".st-key-fleet_replay button").click()
            main = _text(d, "weighted fleet step", 300)
            assert "mlp_only 100.0%" in main and "gpu_only refused" in main, main
            (ROOT / "artifacts" / "e2e").mkdir(parents=True, exist_ok=True)
            d.save_screenshot(str(ROOT / "artifacts" / "e2e" / "fleet_suite.png"))
        finally:
            d.quit()


def _text(d, needle: str, timeout_s: float) -> str:
    """The main area's text once it holds `needle` (polling; the worker's job reruns the page)."""
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By

    end = time.monotonic() + timeout_s
    while True:
        try:
            text = d.find_element(By.CSS_SELECTOR, '[data-testid="stMain"]').text
        except StaleElementReferenceException:
            text = ""
        if needle in text:
            return text
        assert time.monotonic() < end, f"{needle!r} never appeared: {text[-600:]}"
        time.sleep(0.5)
