"""UI responsiveness in a real browser: what a user waits for, until the charts are drawn in Chromium.

Complements benchmarks/responsiveness.py (AppTest: server side only). Starts `streamlit run app/main.py`
on a free port and drives headless Chromium (selenium + chromedriver), fresh profile per server:
  * ResNet (param_resnet ET + Kineto as server paths on the Traces page), cold (fresh parse cache and
    server) and warm (second server start, cache on disk): click on "Load path(s)" -> Explore operator
    graph drawn, of which Explore only (sidebar click -> drawn); then the Timeline view (radio -> drawn).
    Targets: first render of Explore < 3 s cold, < 1 s warm.
  * hta_trace_diff control (109k events, rank 3, Kineto only), cold and warm: Timeline drawn, then
    min-duration 10 µs, then the window slider's end thumb to the trace end (End key), each until redrawn.
  A table of first renders (Explore graph and timeline on ResNet, the largest shared trace, and the
  timeline on control) cold and warm with the goal beside each (< 3 s cold, < 1 s warm).
"Drawn": script state notRunning after a run began, nothing stale, the plotly chart has its .main-svg
(+ a canvas for WebGL traces) and was (re)plotted, then one more frame. A requestAnimationFrame
heartbeat gives the longest frame gap (ms) while waiting: how long the page was frozen.
Screenshots: artifacts/bench/. Results: benchmarks/results/responsiveness_browser.json.
Usage: .venv/bin/python benchmarks/responsiveness_browser.py [--traces DIR]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING

from harness import ROOT  # first: puts the repo root on sys.path (benchmarks/harness.py)

from engine.testing.browser import CHROMEDRIVER, CHROMIUM, FLAGS, free_port

if TYPE_CHECKING:
    from benchmarks.report import table

OUT = ROOT / "benchmarks" / "results" / "responsiveness_browser.json"
ART = ROOT / "artifacts" / "bench"
RESNET = ("param_resnet/resnet_et.json.gz", "param_resnet/resnet_kineto.json.gz")
CONTROL = "hta_trace_diff/control.json.gz"
TARGETS = {"cold": 3.0, "warm": 1.0}
NAV = '[data-testid="stSidebarNavLink"]'

# Installed once per page load: script-state watcher and requestAnimationFrame heartbeat.
HOOKS = """
if (!window.__b) {
  const b = window.__b = {ranAt: 0, idleAt: 0, afterplot: 0, frames: []};
  const app = document.querySelector('.stApp');
  new MutationObserver(ms => { const now = performance.now(), st = app.getAttribute('data-test-script-state');
      for (const m of ms) if (m.oldValue === 'running' || st === 'running') b.ranAt = now;
      if (st === 'notRunning') b.idleAt = now; })
    .observe(app, {attributes: true, attributeOldValue: true, attributeFilter: ['data-test-script-state']});
  const tick = t => { b.frames.push(t); if (b.frames.length > 30000) b.frames.splice(0, 10000); requestAnimationFrame(tick); };
  requestAnimationFrame(tick);
}
return performance.now();
"""

WS_HOOK = """
window.__wsAt = 0;
window.WebSocket = class extends window.WebSocket {
  constructor(...a) { super(...a); this.addEventListener('message', () => { window.__wsAt = performance.now(); }); }
};
"""

# Resolves when the charts under the given st-key classes are drawn (see the module docstring).
WAIT = """
const [keys, since, mark, timeoutMs, done] = arguments;
const b = window.__b, t0 = performance.now();
function ready() {
  const st = document.querySelector('.stApp').getAttribute('data-test-script-state'), out = [];
  const ran = b.ranAt >= since || (window.__wsAt || 0) >= since;   // saw it run, or got its messages
  if (st !== 'notRunning' || !ran || document.querySelector('[data-stale="true"]')) return null;
  for (const k of keys) {
    const gd = document.querySelector(`.st-key-${k} .js-plotly-plot`);
    if (!gd || !gd._fullLayout || !gd._fullData || !gd.querySelector('.main-svg')) return null;
    if (!gd.__hooked) { gd.__hooked = true; gd.on('plotly_afterplot', () => { b.afterplot = performance.now(); }); }
    if (mark && gd.__mark === mark && b.afterplot < since) return null;   // not re-plotted yet
    const gl = gd._fullData.filter(t => t.type === 'scattergl');   // WebGL traces need their canvas
    if (gl.length && !gd.querySelector('canvas')) return null;
    out.push({key: k, title: (gd.querySelector('.gtitle') || {}).textContent || '',
              webgl_points: gl.reduce((s, t) => s + (t.x ? t.x.length : 0), 0),
              svg_points: gd.querySelectorAll('.point').length, traces: gd._fullData.length});
  }
  return out;
}
function gaps(t1) {
  let last = null, worst = 0;
  for (const f of b.frames) { if (f < since) { last = f; continue; } if (last !== null) worst = Math.max(worst, f - last); last = f; }
  return {max_frame_gap_ms: last === null ? t1 - since : Math.max(worst, t1 - last)};
}
let firstReady = null, painted = null;
(function poll() {
  const r = ready(), now = performance.now(), wsAt = window.__wsAt || 0;
  const finish = t1 => done({ms: t1 - since, run_ms: (b.idleAt >= since ? b.idleAt : wsAt) - since, since, at: t1,
                             charts: r, ...gaps(t1)});
  if (r && b.ranAt >= since) return requestAnimationFrame(() => setTimeout(() => finish(performance.now())));  // one more frame: painted
  if (r) {
    // a run fast enough that React never drew the "running" state: its messages came in one burst;
    // the time is the first paint after the burst, once no message followed for 150 ms
    if (firstReady === null || wsAt > firstReady) {
      const mark = firstReady = now;
      painted = null;
      requestAnimationFrame(() => setTimeout(() => { if (firstReady === mark) painted = performance.now(); }));
    }
    if (painted !== null && now - wsAt >= 150) return finish(painted);
  } else firstReady = null;
  if (now - t0 > timeoutMs) return done({error: 'timeout', ms: now - since});
  setTimeout(poll, 15);
})();
"""


def start_server(cache: Path, ui: Path, log: Path) -> tuple[subprocess.Popen, str]:
    port = free_port()
    env = dict(os.environ, MYSTIQUE_CACHE_DIR=str(cache), MYSTIQUE_UI_DIR=str(ui))
    cmd = [
        str(ROOT / ".venv" / "bin" / "streamlit"),
        "run",
        "app/main.py",
        "--server.address",
        "localhost",
        "--server.port",
        str(port),
        "--server.headless",
        "true",
        "--browser.gatherUsageStats",
        "false",
    ]
    proc = subprocess.Popen(
        cmd, cwd=str(ROOT), env=env, stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True
    )
    url, deadline = f"http://localhost:{port}", time.time() + 60
    while time.time() < deadline and proc.poll() is None:
        try:
            if urllib.request.urlopen(f"{url}/_stcore/health", timeout=2).read() == b"ok":
                return proc, url
        except OSError:
            time.sleep(0.2)
    stop_server(proc)
    raise RuntimeError(f"streamlit did not start: {log.read_text()[-1500:]}")


def stop_server(proc: subprocess.Popen) -> None:
    """Kill the server's whole process group (TERM, then KILL if it lingers)."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
            proc.wait(10)
            return
        except ProcessLookupError:
            return
        except subprocess.TimeoutExpired:
            pass


def new_driver(profile: Path):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for f in FLAGS + [f"--user-data-dir={profile}"]:
        opts.add_argument(f)
    d = webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)
    d.set_page_load_timeout(60)
    d.set_script_timeout(120)
    # time of the last websocket message from the server, before the app opens its socket: a run
    # whose messages arrive in one burst never shows the "running" state (see WAIT)
    d.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": WS_HOOK})
    return d


def css(d, sel: str, timeout: float = 60):
    from selenium.webdriver.common.by import By

    end = time.time() + timeout
    while time.time() < end:
        if els := [e for e in d.find_elements(By.CSS_SELECTOR, sel) if e.is_displayed()]:
            return els
        time.sleep(0.1)
    raise RuntimeError(f"no visible element {sel!r}")


def act(d, action, keys=(), mark=False, timeout_ms=90_000) -> dict:
    """Run `action()` (a click or keys) and wait until the charts under `keys` are (re)drawn."""
    m = f"m{time.time_ns()}" if mark else None
    if m:
        d.execute_script(
            "document.querySelector(arguments[0]).__mark = arguments[1]", f".st-key-{keys[0]} .js-plotly-plot", m
        )
    since = d.execute_script("return performance.now()")
    action()
    r = d.execute_async_script(WAIT, list(keys), since, m, timeout_ms)
    if r.get("error"):
        why = d.execute_script(
            "const b = window.__b, app = document.querySelector('.stApp'), ex = document.querySelector("
            "'[data-testid=stException], [data-testid=stAlertContentError]');"
            "return {state: app && app.getAttribute('data-test-script-state'), run_began: b.ranAt >= arguments[0],"
            " page: location.pathname, error: ex ? ex.innerText.slice(0, 600) : null}",
            since,
        )
        raise RuntimeError(f"{r['error']} after {r['ms']:.0f} ms waiting for {keys}: {why}")
    return r


def click(d, sel: str, text: str, keys=()) -> dict:
    el = next(e for e in css(d, sel) if e.text.strip().endswith(text))
    return act(d, el.click, keys)


def open_app(d, url: str) -> None:
    d.get(url)
    css(d, '.stApp[data-test-script-state="notRunning"] ' + NAV)
    time.sleep(1.0)  # the bundled sample's first run settles
    d.execute_script(HOOKS)


def load_paths(d, paths: list[Path]) -> dict:
    from selenium.webdriver.common.keys import Keys

    next(t for t in css(d, '[role="tab"]') if "Path" in t.text).click()
    ta = css(d, ".st-key-server_paths textarea")[0]
    ta.send_keys("\n".join(str(p) for p in paths))
    act(d, lambda: ta.send_keys(Keys.CONTROL, Keys.ENTER))  # commit the text area first (its own run)
    r = act(d, css(d, ".st-key-load_path button")[0].click)
    if f"loaded {paths[0].name}" not in (
        text := d.execute_script("return document.querySelector('.stMain').innerText")
    ):
        raise RuntimeError(f"loading {paths[0].name} failed: {text[-600:]}")
    return r


def session(tmp: Path, name: str, steps, *args) -> dict:
    """Fresh server (parse cache tmp/cache shared, its own workspace: a restored session would change
    the clicks) + fresh Chromium profile; `steps(d, *args)` returns the figures."""
    log = tmp / f"streamlit_{name}.log"
    proc, url = start_server(tmp / "cache", tmp / f"ui_{name}", log)
    d = None
    try:
        d = new_driver(tmp / f"profile_{name}")
        open_app(d, url)
        return steps(d, *args)
    except RuntimeError as exc:
        raise RuntimeError(f"{name}: {exc}; server log: {log.read_text()[-1200:]!r}") from exc
    finally:
        if d is not None:
            d.quit()
        stop_server(proc)


def resnet_steps(d, traces: Path, kind: str) -> dict:
    load = load_paths(d, [traces / p for p in RESNET])
    graph = click(d, NAV, "Explore", ["explore_graph"])
    d.save_screenshot(str(ART / f"resnet_{kind}_graph.png"))
    tl = click(d, ".st-key-explore_view label", "Timeline", ["explore_timeline"])
    d.save_screenshot(str(ART / f"resnet_{kind}_timeline.png"))
    again = click(
        d, ".st-key-explore_view label", "Operator graph", ["explore_graph"]
    )  # plotly.js loaded, figure cached
    return {
        "first_render_ms": graph["at"] - load["since"],
        "load": load,
        "explore_graph": graph,
        "timeline_view": tl,
        "graph_again": again,
    }


def sample_steps(d) -> dict:
    """Floor: the bundled 56-node MLP sample (loaded at start), the same clicks as for ResNet."""
    graph = click(d, NAV, "Explore", ["explore_graph"])  # plotly.js already loaded by the Traces page
    tl = click(d, ".st-key-explore_view label", "Timeline", ["explore_timeline"])
    again = click(d, ".st-key-explore_view label", "Operator graph", ["explore_graph"])
    return {"explore_graph": graph, "timeline_view": tl, "graph_again": again}


def control_steps(d, traces: Path) -> dict:
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.keys import Keys

    out = {"load": load_paths(d, [traces / CONTROL]), "explore": click(d, NAV, "Explore")}  # no ET: a note, no chart
    out["timeline"] = click(d, ".st-key-explore_view label", "Timeline", ["explore_timeline"])
    d.save_screenshot(str(ART / "control_timeline.png"))
    box = css(d, ".st-key-t_min_dur input")[0]
    out["min_dur_10us"] = act(
        d, lambda: box.send_keys(Keys.CONTROL, "a", Keys.NULL, "10", Keys.ENTER), ["explore_timeline"], True
    )
    d.save_screenshot(str(ART / "control_min_dur_10us.png"))
    # the slider thumbs are visually hidden <input type=range> (react-aria): focus the end thumb, press End
    d.execute_script(
        "const t = document.querySelectorAll('.st-key-t_window input[type=range]'); t[t.length - 1].focus()"
    )
    out["window_to_end"] = act(d, lambda: ActionChains(d).send_keys(Keys.END).perform(), ["explore_timeline"], True)
    d.save_screenshot(str(ART / "control_window_to_end.png"))
    out["webgl_renderer"] = d.execute_script(
        "const g = document.createElement('canvas').getContext('webgl'), x = g && "
        "g.getExtension('WEBGL_debug_renderer_info'); return x ? g.getParameter(x.UNMASKED_RENDERER_WEBGL) : String(!!g)"
    )
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--traces", type=Path, default=ROOT.parent / "shared" / "traces")
    args = ap.parse_args()
    missing = [str(p) for p in (CHROMIUM, CHROMEDRIVER) if not os.access(p, os.X_OK)]
    missing += [str(args.traces / p) for p in (*RESNET, CONTROL) if not (args.traces / p).exists()]
    missing += [] if importlib.util.find_spec("selenium") else ["selenium (pip install selenium)"]
    if missing:
        print("cannot run the browser benchmark, missing: " + ", ".join(missing), file=sys.stderr)
        return 1
    version = subprocess.run([CHROMIUM, "--version"], capture_output=True, text=True).stdout.strip()
    ART.mkdir(parents=True, exist_ok=True)
    t_start = time.time()
    with tempfile.TemporaryDirectory(prefix="mystique-browser-") as tmp_s:
        tmp = Path(tmp_s)
        try:
            cold = session(tmp, "cold", resnet_steps, args.traces, "cold")
            warm = session(tmp, "warm", resnet_steps, args.traces, "warm")  # same cache dir: parse cache on disk
            control = session(tmp, "control", control_steps, args.traces)
            control_warm = session(tmp, "control_warm", control_steps, args.traces)  # parse cache on disk
            sample = session(tmp, "sample", sample_steps)
        except Exception as exc:  # noqa: BLE001 -- a report, not a traceback
            print(f"browser benchmark failed: {type(exc).__name__}: {str(exc)[:1500]}", file=sys.stderr)
            return 1
    met = {k: r["first_render_ms"] / 1000 < TARGETS[k] for k, r in (("cold", cold), ("warm", warm))}
    # first render of each view, cold (fresh server + parse cache) and warm (second server, cache on
    # disk), against the goal (< 3 s cold, < 1 s warm); param_resnet is the largest shared trace
    # (111,631 events, 14,392 ET nodes); control (109,123 events, Kineto only) is the largest without an ET
    first = {
        "resnet graph": {"cold": cold["explore_graph"]["ms"], "warm": warm["explore_graph"]["ms"]},
        "resnet timeline": {"cold": cold["timeline_view"]["ms"], "warm": warm["timeline_view"]["ms"]},
        "control timeline": {"cold": control["timeline"]["ms"], "warm": control_warm["timeline"]["ms"]},
    }
    print(f"{'first render, headless Chromium (s)':45s} {'cold':>6s} {'goal':>5s} {'warm':>6s} {'goal':>5s}")
    for view, v in first.items():
        c, w = v["cold"] / 1000, v["warm"] / 1000
        print(
            f"{view:45s} {c:6.2f} {'<3':>5s} {w:6.2f} {'<1':>5s}  "
            f"cold {'met' if c < TARGETS['cold'] else 'MISSED'}, warm {'met' if w < TARGETS['warm'] else 'MISSED'}"
        )
    rows = []
    for kind, r in (("cold", cold), ("warm", warm)):
        rows += [
            (
                f"ResNet {kind}: load click -> Explore graph drawn",
                r["first_render_ms"],
                f"target < {TARGETS[kind]:g} s: {'met' if met[kind] else 'MISSED'}",
            ),
            ("  load (Traces page)", r["load"]),
            ("  Explore only (nav click -> graph drawn)", r["explore_graph"]),
            ("  Timeline view (radio -> timeline drawn)", r["timeline_view"]),
            ("  Operator graph again (radio -> drawn)", r["graph_again"]),
        ]
    rows += [
        ("control: load (Traces page)", control["load"]),
        ("control: Explore (no-ET note)", control["explore"]),
        ("control: Timeline view drawn", control["timeline"]),
        ("control: min-dur 10 µs, redrawn", control["min_dur_10us"]),
        ("control: window end -> trace end, redrawn", control["window_to_end"]),
        ("floor, MLP sample: Explore graph drawn", sample["explore_graph"]),
        ("floor, MLP sample: Timeline view drawn", sample["timeline_view"]),
        ("floor, MLP sample: graph again", sample["graph_again"]),
    ]
    print(f"{'measure (headless Chromium, wall s)':45s} {'total':>6s} {'run':>6s} {'gap ms':>6s}  note")
    for name, r, *note in rows:
        if not isinstance(r, dict):
            print(f"{name:45s} {r / 1000:6.2f} {'':6s} {'':6s}  {note[0]}")
            continue
        c = r["charts"][0] if r["charts"] else None
        note = f"{c['title']}: {c['webgl_points']} gl pts, {c['svg_points']} svg" if c else ""
        print(f"{name:45s} {r['ms'] / 1000:6.2f} {r['run_ms'] / 1000:6.2f} {r['max_frame_gap_ms']:6.0f}  {note}")
    print(
        "run = until the page saw the script run end (server + message handling; late when the page is busy); "
        f"gap = longest frame gap (page frozen). WebGL: {control['webgl_renderer'][:60]}"
    )
    result = {
        "resnet": {"cold": cold, "warm": warm},
        "control": control,
        "control_warm": control_warm,
        "first_render_ms": first,
        "first_render_met": {
            view: {k: v[k] / 1000 < TARGETS[k] for k in ("cold", "warm")} for view, v in first.items()
        },
        "sample_floor": sample,
        "targets_s": TARGETS,
        "targets_met": met,
        "machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0]},
        "chromium": version,
        "total_wall_s": time.time() - t_start,
        "note": (
            "ms = wall time in the page (performance.now) from just before the click/keys to the charts drawn "
            "+ one frame; run_ms = until the script state went notRunning; max_frame_gap_ms = longest "
            "requestAnimationFrame gap while waiting; headless Chromium with --disable-gpu (software WebGL), "
            "server and browser on the same shared, noisy CPUs"
        ),
        "command": ".venv/bin/python benchmarks/responsiveness_browser.py",
    }
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(result, indent=2))
    print(
        f"wrote {OUT.relative_to(ROOT)}; screenshots in {ART.relative_to(ROOT)}/; total {result['total_wall_s']:.0f} s"
    )
    return 0


# -- its section of docs/figures.md, beside the code that writes its results. benchmarks/report.py
# runs `docs_section` (and the `_docs_*` helpers) on the results file without importing this file
# (so the report stays standard-library only), giving it the formatters named below.
def docs_section(d: dict) -> list[str]:
    """Headless Chromium through selenium, from the click to the chart drawn; cold = fresh server
    and parse cache, warm = a second server with the parse cache on disk."""
    fr, met = d.get("first_render_ms", {}), d.get("first_render_met", {})
    t = d.get("targets_s", {})
    rows = [
        [
            view,
            f"{v['cold'] / 1000:.2f}",
            "met" if met.get(view, {}).get("cold") else "MISSED",
            f"{v['warm'] / 1000:.2f}",
            "met" if met.get(view, {}).get("warm") else "MISSED",
        ]
        for view, v in fr.items()
    ]
    return table(
        ["first render in Chromium (s)", "cold", f"< {t.get('cold')} s", "warm", f"< {t.get('warm')} s"], rows
    ) + [
        d.get("note", ""),
        "",
    ]


if __name__ == "__main__":
    sys.exit(main())
