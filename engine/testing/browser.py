"""The real-browser setup shared by the e2e test and the browser benchmark (Debian chromium +
chromium-driver at /usr/bin; never a downloaded browser), and a free localhost port.

`serve` starts `streamlit run app/main.py` on such a port, `chrome` a headless Chromium, and
`drawn_ms` times a click until the named charts are drawn (the Ranks page's test and benchmark).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
FLAGS = (
    "--headless --no-sandbox --disable-gpu --disable-quic --no-first-run --disable-background-networking "
    "--disable-component-update --disable-sync --disable-dev-shm-usage --enable-unsafe-swiftshader "
    "--window-size=1600,1300"
).split()


def free_port() -> int:
    """A localhost TCP port nobody listens on right now (bind to port 0 and read it back)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


ROOT = Path(__file__).resolve().parents[2]


def missing() -> str | None:
    """Why no real-browser run is possible here (None when chromium, chromedriver and selenium are there)."""
    try:
        import selenium  # noqa: F401 -- availability probe
    except ImportError:
        return "selenium is not installed (pip install selenium; it is in the test extra)"
    for exe in (CHROMIUM, CHROMEDRIVER):
        if not os.access(exe, os.X_OK):
            return f"{Path(exe).name} not found (apt-get install chromium chromium-driver, or `make browser`)"
    return None


@contextlib.contextmanager
def serve(tmp: Path, env: dict[str, str] | None = None, timeout_s: float = 90) -> Iterator[str]:
    """`streamlit run app/main.py` on a free localhost port with its cache and UI folders under
    `tmp` (plus `env`); yields its URL, then stops it and everything it started (a process group)."""
    import signal

    port = free_port()
    full = dict(os.environ, MYSTIQUE_CACHE_DIR=str(tmp / "cache"), MYSTIQUE_UI_DIR=str(tmp / "ui"), **(env or {}))
    cmd = [sys.executable, "-m", "streamlit", "run", str(ROOT / "app" / "main.py"), "--server.port", str(port)]
    cmd += ["--server.headless", "true", "--server.address", "localhost", "--browser.gatherUsageStats", "false"]
    log = open(tmp / "streamlit.log", "w")  # noqa: SIM115 -- closed in the finally below
    proc = subprocess.Popen(cmd, cwd=str(ROOT), env=full, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://localhost:{port}"
    try:
        end = time.time() + timeout_s
        while True:
            try:
                if urllib.request.urlopen(f"{url}/_stcore/health", timeout=2).read() == b"ok":
                    break
            except OSError:
                time.sleep(0.3)
            if proc.poll() is not None or time.time() > end:
                raise RuntimeError(f"streamlit did not start: {(tmp / 'streamlit.log').read_text()[-2000:]}")
        yield url
    finally:
        with contextlib.suppress(OSError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(OSError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)
        log.close()


def chrome(profile: Path) -> Any:
    """A headless Chromium (selenium WebDriver) with a fresh profile; the caller quits it."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for f in FLAGS:
        opts.add_argument(f)
    opts.add_argument(f"--user-data-dir={profile}")
    d = webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)
    d.set_page_load_timeout(90)
    return d


# Clicks `target` (a CSS selector, or null: the caller already acted) and resolves when the app is
# idle, nothing is stale, every chart under the given st-key classes has its SVG, and every
# other CSS selector matches; then one more frame (painted). The charts of the page being left
# do not count: the keys are looked up after the click.
_DRAWN = """
const [target, charts, others, timeoutMs, first, done] = arguments;
if (first) { window.__drawT0 = performance.now(); if (target) document.querySelector(target).click(); }
const t0 = window.__drawT0, tCall = performance.now();
let quiet = null;
(function poll() {
  const now = performance.now();
  const app = document.querySelector('.stApp');
  const st = app ? app.getAttribute('data-test-script-state') : 'running';
  let ok = st === 'notRunning' && !document.querySelector('[data-stale="true"]') && now - t0 > 50;
  for (const k of charts) {
    const gd = document.querySelector(`.st-key-${k} .js-plotly-plot`);
    if (!gd || !gd._fullLayout || !gd.querySelector('.main-svg')) ok = false;
  }
  for (const css of others) if (!document.querySelector(css)) ok = false;
  if (ok) {
    if (quiet === null) quiet = now;
    if (now - quiet >= 100) return requestAnimationFrame(() => setTimeout(() => done({ms: quiet - t0})));
  } else quiet = null;
  if (now - tCall > timeoutMs) return done({error: 'timeout', ms: now - t0});
  setTimeout(poll, 15);
})();
"""


def drawn_ms(
    driver: Any,
    target: str | None,
    charts: list[str],
    others: tuple[str, ...] | list[str] = (),
    timeout_s: float = 120,
    started: bool = False,
) -> float:
    """ms from clicking `target` until the charts (by st-key) are drawn and the `others` (CSS
    selectors) are on the page (browser clock; `started`: from `window.__drawT0`, which the
    caller set before acting itself, e.g. typing Enter); AssertionError on timeout (with the
    page's text). Polled in calls of at most 20 s: a WebDriver command must answer before the
    client's own read timeout."""
    driver.set_script_timeout(40)
    end = time.monotonic() + timeout_s
    first = not started
    while True:
        res = driver.execute_async_script(_DRAWN, target, list(charts), list(others), 20_000, first)
        first = False
        if not res.get("error"):
            return float(res["ms"])
        if time.monotonic() > end:
            text = driver.execute_script("return document.querySelector('.stApp')?.innerText || ''")
            raise AssertionError(f"not drawn after {res['ms'] / 1000:.0f} s: {charts} {list(others)}: {text[-1500:]}")


__all__ = ["CHROMEDRIVER", "CHROMIUM", "FLAGS", "chrome", "drawn_ms", "free_port", "missing", "serve"]
