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
