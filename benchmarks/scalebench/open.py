"""Opening a big trace through its store: `mystique info` and Explore's first render (issue 31).

    python benchmarks/scale.py --only open [--quick]

Input: the shared MI300 ResNet trace's steps tiled in time (engine.testing.tiled, as the `load`
section) to 4.3M and 16M `traceEvents` items (1.0 and 3.7 GB of JSON; quick: 200k), written to
the scratch folder and deleted after. Their whole tables would need 8 bytes per JSON byte, over
the default whole-table budget (2 GiB; quick sets MYSTIQUE_WHOLE_TABLE_MAX_BYTES=1 so the small
trace takes the same path), so every step reads the trace store (engine.trace.store.handle).

Each step runs in a FRESH process (peak RSS = its VmHWM), timed inside around the work:
- info_cold: `mystique info --json` with an empty cache: the store build (streamed) + the summary;
- info_warm: the same again, the store built;
- explore_timeline: Streamlit's AppTest runs the app, loads the trace on the Traces page (its
  summary), opens Explore's Timeline (its first window: the first ProfilerStep), store built;
- explore_analysis: the same, then Explore's Analysis (per-rank breakdown and kernel tables,
  rank by rank from the store: one rank's columns in memory, so measured up to 5M items).
Target (issue 31): info and Explore's first render at 4.3M events with peak RSS <= 2 GiB.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from engine import envvars

ROOT = Path(__file__).resolve().parents[2]
SHARED = Path(envvars.get("MYSTIQUE_SHARED_TRACES") or ROOT.parent / "shared" / "traces")
TRACE = SHARED / "tracelens_mi300_resnet_ckpt" / "resnet_act_checkpoint.json.gz"
SIZES = (4_300_000, 16_000_000)
QUICK_SIZES = (200_000,)
MAX_RSS_MIB = 2048
ANALYSIS_MAX_ITEMS = 5_000_000  # Analysis holds one rank's columns: measured at 4.3M, not at 16M on a shared machine

_INFO = r"""
import json, sys, time
import engine.cli.main, engine.trace.store.ingest, engine.trace.store.summary  # imports outside the timed region
t0 = time.perf_counter()
import contextlib, io
buf = io.StringIO()
with contextlib.redirect_stdout(buf):
    rc = engine.cli.main.main(["info", "--json", sys.argv[1]])
wall = time.perf_counter() - t0
info = json.loads(buf.getvalue())
hwm = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM:"))
print(json.dumps({"rc": rc, "wall_s": wall, "peak_rss_mib": hwm / 1024, "events": info["events"],
                  "store": any("read through the trace store" in w for w in info["warnings"]),
                  "step_ms": info["step_ms"], "kernels": info["kernels"]}))
"""


def _child_explore(path: str, analysis: bool) -> dict:
    """In a fresh process: the app's Traces page loads `path`, then Explore's Timeline (and Analysis)."""
    import plotly.graph_objects  # noqa: F401 -- imports outside the timed region
    from streamlit.testing.v1 import AppTest

    out: dict = {}
    at = AppTest.from_file(str(ROOT / "app" / "main.py"), default_timeout=1800)
    t0 = time.perf_counter()
    at.run()
    at.text_area(key="server_paths").input(path)
    at.button(key="load_path").click()
    at.run()
    out["traces_page_s"] = time.perf_counter() - t0
    errors = [str(e.value) for e in (*at.exception, *at.error)]
    t1 = time.perf_counter()
    at.switch_page("../pages/explore.py")
    at.run()
    at.radio(key="explore_view").set_value("Timeline")
    at.run()
    out["timeline_s"] = time.perf_counter() - t1
    charts = [c for c in at.get("plotly_chart") if c.proto.id.endswith("explore_timeline")]
    out["timeline_title"] = json.loads(charts[0].proto.spec)["layout"]["title"]["text"] if charts else None
    if analysis:
        t2 = time.perf_counter()
        at.radio(key="explore_view").set_value("Analysis")
        at.run()
        out["analysis_s"] = time.perf_counter() - t2
        out["kernel_rows"] = len(at.dataframe[1].value) if len(at.dataframe) > 1 else 0
    errors += [str(e.value) for e in (*at.exception, *at.error)]
    out["wall_s"] = time.perf_counter() - t0
    out["errors"] = [e[:300] for e in errors]
    with open("/proc/self/status") as fh:
        hwm = next(int(line.split()[1]) for line in fh if line.startswith("VmHWM:"))
    out["peak_rss_mib"] = hwm / 1024
    return out


def _run(cmd: list[str], env: dict) -> dict:
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, check=False)
    if r.returncode:
        return {"error": (r.stderr.strip().splitlines() or ["?"])[-1][:300]}
    return json.loads(r.stdout.strip().splitlines()[-1])


def _measure(n: int, scratch: Path, quick: bool) -> dict:
    from engine.testing.tiled import make_tiled

    path = scratch / f"tiled_{n}.json"
    t0 = time.perf_counter()
    facts = make_tiled(TRACE, path, n)
    gen_s = time.perf_counter() - t0
    cache = scratch / "cache"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MYSTIQUE_CACHE_DIR": str(cache), "MYSTIQUE_PREFETCH": "0"}
    env["MYSTIQUE_UI_DIR"] = str(scratch / "ui")
    env["MYSTIQUE_SCHEDULER"] = "serial"  # one rank: its Analysis tasks run in the process measured
    if quick:
        env["MYSTIQUE_WHOLE_TABLE_MAX_BYTES"] = "1"
    else:
        env.pop("MYSTIQUE_WHOLE_TABLE_MAX_BYTES", None)
    load0 = os.getloadavg()[0]
    steps: dict = {}
    try:
        for name in ("info_cold", "info_warm"):
            steps[name] = _run([sys.executable, "-c", _INFO, str(path)], env)
        for name, analysis in (("explore_timeline", False), ("explore_analysis", True)):
            if analysis and facts["items"] > ANALYSIS_MAX_ITEMS:
                steps[name] = {"skipped": f"over {ANALYSIS_MAX_ITEMS:,} items (one rank's columns in memory)"}
                continue
            shutil.rmtree(scratch / "ui", ignore_errors=True)
            cmd = [sys.executable, "-m", "benchmarks.scalebench.open", "--child", str(path), str(int(analysis))]
            steps[name] = _run(cmd, env)
    finally:
        path.unlink(missing_ok=True)
        shutil.rmtree(cache, ignore_errors=True)
    for s in steps.values():
        for k, v in list(s.items()):
            if isinstance(v, float):
                s[k] = round(v, 2)
    first = ("info_cold", "info_warm", "explore_timeline")
    return {
        "items": facts["items"],
        "json_mib": round(facts["json_bytes"] / 2**20, 1),
        "whole_table_estimate_mib": round(8 * facts["json_bytes"] / 2**20),
        "generate_s": round(gen_s, 1),
        "steps": steps,
        "load_average": [round(load0, 2), round(os.getloadavg()[0], 2)],
        "rss_ok": all("error" not in steps[k] and steps[k]["peak_rss_mib"] <= MAX_RSS_MIB for k in first),
        "through_store": all(steps[k].get("store") for k in ("info_cold", "info_warm")),
    }


def run(quick: bool, scratch: Path) -> dict:
    scratch.mkdir(parents=True, exist_ok=True)
    env_sizes = envvars.get("MYSTIQUE_OPEN_SIZES") or ""
    sizes = [int(x) for x in env_sizes.split(",") if x] if env_sizes else list(QUICK_SIZES if quick else SIZES)
    rows = []
    for n in sizes:
        rows.append(_measure(n, scratch, quick))
        print(f"  open {n:,}: {json.dumps(rows[-1])}", flush=True)
    return {
        "input": {"source": os.path.relpath(TRACE, SHARED), "tiled_to": sizes},
        "sizes": rows,
        "target": {"peak_rss_mib_max": MAX_RSS_MIB},
        "summary": {
            "items": [r["items"] for r in rows],
            "info_cold_s": [r["steps"]["info_cold"].get("wall_s") for r in rows],
            "info_peak_rss_mib": [r["steps"]["info_cold"].get("peak_rss_mib") for r in rows],
            "explore_first_render_s": [r["steps"]["explore_timeline"].get("wall_s") for r in rows],
            "explore_peak_rss_mib": [r["steps"]["explore_timeline"].get("peak_rss_mib") for r in rows],
            "analysis_s": [r["steps"]["explore_analysis"].get("analysis_s") for r in rows],
            "analysis_peak_rss_mib": [r["steps"]["explore_analysis"].get("peak_rss_mib") for r in rows],
            "rss_ok": all(r["rss_ok"] for r in rows),
            "through_store": all(r["through_store"] for r in rows),
        },
    }


if __name__ == "__main__" and len(sys.argv) == 4 and sys.argv[1] == "--child":
    print(json.dumps(_child_explore(sys.argv[2], sys.argv[3] == "1")))
