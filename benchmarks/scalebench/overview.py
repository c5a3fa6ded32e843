"""The rank overview of a 256-rank job (quick: 16) in a real browser (issue 22's dashboard target).

    python benchmarks/scale.py --only overview [--quick]

Input: a trace store of N ranks, each the shared hta_trace_diff control trace (rank 3 of an
8-GPU job: 6 ProfilerSteps, NCCL collectives, 75k events) with per-rank perturbed durations,
written as Parquet directly by engine.testing.fleet.make_fleet_store.
Measures:
  * summary_cold_s: the per-rank, per-step summaries built from the store (engine.analysis.ranks,
    fanned out on a local Dask cluster, as the dashboard's default scheduler), cache written;
  * summary_read_ms: reading them back (what a warm open of the page costs on the server);
  * in headless Chromium against `streamlit run app/main.py` (engine.testing.browser): the
    page's first open in a fresh server (the store path typed, until the heat maps, the bars
    and the straggler table are drawn), then `warm` opens: Traces, then Ranks again from the
    sidebar, until drawn (median of 3). Target: warm < 3 s.
"""

from __future__ import annotations

import json
import os
import statistics
import time
from pathlib import Path

from engine import envvars

ROOT = Path(__file__).resolve().parents[2]
SHARED = Path(envvars.get("MYSTIQUE_SHARED_TRACES") or ROOT.parent / "shared" / "traces")
TRACE = SHARED / "hta_trace_diff" / "control.json.gz"
TARGET_S = 3.0
NAV = '[data-testid="stSidebarNavLink"]'
LAG = '.st-key-ov_lag [data-testid="stDataFrame"]'


def _nav(d, title: str) -> str:
    from selenium.webdriver.common.by import By

    link = next(a for a in d.find_elements(By.CSS_SELECTOR, NAV) if (a.text or "").strip().endswith(title))
    return f'{NAV}[href="{link.get_attribute("href")}"]'


def browser_times(store: Path, scratch: Path, warm_rounds: int = 3) -> dict:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support import expected_conditions as EC
    from selenium.webdriver.support.ui import WebDriverWait

    from engine.testing import browser

    if why := browser.missing():
        return {"skipped": why}
    scratch.mkdir(parents=True, exist_ok=True)
    charts = ["ov_heat", "ov_bars"]
    with browser.serve(scratch) as url:
        d = browser.chrome(scratch / "profile")
        try:
            d.get(f"{url}/ranks")
            box = WebDriverWait(d, 120).until(EC.element_to_be_clickable((By.CSS_SELECTOR, ".st-key-ov_job_box input")))
            box.send_keys(Keys.CONTROL, "a")
            box.send_keys(str(store))
            d.execute_script("window.__drawT0 = performance.now()")
            box.send_keys(Keys.ENTER)
            first = browser.drawn_ms(d, None, charts, [LAG], timeout_s=300, started=True)
            cells = d.execute_script(
                "return document.querySelector('.st-key-ov_heat .js-plotly-plot')._fullData"
                ".reduce((s, t) => s + t.z.length * t.z[0].length, 0)"
            )
            warm = []
            for _ in range(warm_rounds):
                browser.drawn_ms(d, _nav(d, "Traces"), [], [".st-key-server_paths textarea"])
                warm.append(browser.drawn_ms(d, _nav(d, "Ranks"), charts, [LAG]))
            timeline = browser.drawn_ms(d, ".st-key-ov_open button", ["ov_timeline"])
            art = ROOT / "artifacts" / "bench"
            art.mkdir(parents=True, exist_ok=True)
            d.save_screenshot(str(art / "ranks_overview.png"))
        finally:
            d.quit()
    return {
        "first_open_ms": round(first, 1),
        "warm_open_ms": [round(w, 1) for w in warm],
        "warm_open_median_ms": round(statistics.median(warm), 1),
        "heatmap_cells": int(cells),
        "rank_timeline_open_ms": round(timeline, 1),
    }


def run(quick: bool, scratch: Path) -> dict:
    from engine.analysis import ranks as rk
    from engine.testing.fleet import make_fleet_store
    from engine.trace.store import read

    n = 16 if quick else 256
    scratch.mkdir(parents=True, exist_ok=True)
    os.environ["MYSTIQUE_CACHE_DIR"] = str(scratch / "cache")
    t0 = time.perf_counter()
    store = make_fleet_store(TRACE, n, scratch / "store", 0)
    input_s = time.perf_counter() - t0
    man = read.manifest(store)
    events = sum(int(s["rows"]["events"]) for s in man["sources"])
    t0 = time.perf_counter()
    table = rk.summarize(store, scheduler="local", use_cache=False)
    cold = time.perf_counter() - t0
    t0 = time.perf_counter()
    again = rk.cached(store)
    read_ms = (time.perf_counter() - t0) * 1e3
    assert again is not None and len(again) == len(table)
    summary_bytes = (Path(store) / rk.SUMMARY).stat().st_size
    b = browser_times(Path(store), scratch / "app")
    warm_ms = b.get("warm_open_median_ms")
    res = {
        "trace": str(TRACE.relative_to(SHARED)),
        "ranks": n,
        "steps_per_rank": int(table.groupby("rank").size().max()),
        "events": events,
        "input_build_s": round(input_s, 1),
        "summary_cold_s": round(cold, 2),
        "summary_rows": len(table),
        "summary_bytes": summary_bytes,
        "summary_read_ms": round(read_ms, 1),
        "browser": b,
        "load_avg_1m": round(os.getloadavg()[0], 2),
    }
    res["summary"] = {
        "ranks": n,
        "events": events,
        "summary_cold_s": res["summary_cold_s"],
        "warm_render_s": round(warm_ms / 1e3, 2) if warm_ms is not None else None,
        "first_render_s": round(b["first_open_ms"] / 1e3, 2) if "first_open_ms" in b else None,
        "warm_render_under_3s": (warm_ms is not None and warm_ms / 1e3 < TARGET_S),
    }
    return res


if __name__ == "__main__":
    import sys
    import tempfile

    print(json.dumps(run("--quick" in sys.argv, Path(tempfile.mkdtemp(prefix="ov-bench-"))), indent=1))
