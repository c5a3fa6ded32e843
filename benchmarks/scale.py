"""Cost against size (issue 22's must-show): load, fleet simulate, Dask fan-out, rank overview;
issue 31's: a fleet from raw JSON (rawfleet), info and Explore on a big trace (open).

    python benchmarks/scale.py [--only load,fleet,dask,overview,rawfleet,open] [--quick] [--scratch DIR]
                               [--out benchmarks/results/scale.json]

Every input is built from a shared real GPU trace (../shared/traces): big single traces by
tiling its steps in time, fleets by copying a rank with per-rank perturbed durations
(engine.testing.fleet), so no two ranks are identical. Each section lives in
benchmarks/scalebench/<section>.py as `run(quick, scratch) -> dict` and measures in fresh
processes where peak memory is reported. One run of this script runs every section in order and
writes one results file; `--only` re-measures some sections and keeps the others' figures
(each section records its own date and load average). `--quick` uses small sizes (a smoke run,
written to scale_quick.json).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from benchmarks.report import num, table

ROOT = Path(__file__).resolve().parents[1]
# benchmarks/distributed.py would shadow the `distributed` package (Dask): drop this folder
_HERE = Path(__file__).resolve().parent
sys.path[:] = [str(ROOT)] + [p for p in sys.path if Path(p or ".").resolve() != _HERE]
RESULTS = ROOT / "benchmarks" / "results"
SECTIONS = ("load", "fleet", "dask", "overview", "rawfleet", "open")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", default=",".join(SECTIONS), help="comma-separated sections")
    ap.add_argument("--quick", action="store_true", help="small sizes (smoke run)")
    ap.add_argument("--scratch", type=Path, default=None, help="folder for generated inputs")
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args(argv)
    want = [s.strip() for s in a.only.split(",") if s.strip()]
    bad = [s for s in want if s not in SECTIONS]
    if bad:
        print(f"scale.py: unknown section(s) {', '.join(bad)} (known: {', '.join(SECTIONS)})", file=sys.stderr)
        return 2
    out = a.out or RESULTS / ("scale_quick.json" if a.quick else "scale.json")
    results = json.loads(out.read_text()) if out.exists() else {}
    scratch = a.scratch or Path(tempfile.mkdtemp(prefix="mystique-scale-"))
    scratch.mkdir(parents=True, exist_ok=True)
    try:
        for name in want:
            mod = importlib.import_module(f"benchmarks.scalebench.{name}")
            t0 = time.perf_counter()
            res = mod.run(quick=a.quick, scratch=scratch / name)
            res["section_wall_s"] = round(time.perf_counter() - t0, 1)
            res["date"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
            res["load_avg_1m_end"] = round(os.getloadavg()[0], 2)
            results[name] = res
            out.write_text(json.dumps(results, indent=1) + "\n")
            print(f"{name}: {json.dumps(res.get('summary', {}))}", flush=True)
    finally:
        if a.scratch is None:
            shutil.rmtree(scratch, ignore_errors=True)
    print(f"wrote {out}")
    return 0


# -- its section of docs/figures.md, beside the code that writes its results. benchmarks/report.py
# runs `docs_section` (and the `_docs_*` helpers) on the results file without importing this file
# (so the report stays standard-library only), giving it the formatters named below.
def _docs_scale_dask(d: dict) -> list[str]:
    i, med = d["input"], d["median_s"]
    rows = [[k.replace("_", " "), num(v, 2), ", ".join(num(x, 2) for x in d["wall_s"][k])] for k, v in med.items()]
    return table(["scheduler", "median wall s", "rounds (s)"], rows) + [
        f"Dask: {i['ranks']} ranks of `{i['source']}`, {i['events']:,} events, {i['json_bytes'] / 2**20:.0f} MiB "
        f"JSON, stored through LocalClusters reached by address (the `--scheduler` path). Speed-up of 2 workers "
        f"over 1: **{d['speedup_2_over_1']:.2f}x** (target 1.6x); the same pure-Python loop in 2 processes over 1: "
        f"{d['cpu_scaling_2_over_1']:.2f}x; identical stores: {num(d['identical_stores'])}; load average "
        f"{d['load_average'][0]:.1f} -> {d['load_average'][1]:.1f} on {d['cpus']} CPUs.",
        "",
    ]


def _docs_scale_generic(d: dict) -> list[str]:
    rows = [[k, num(v) if not isinstance(v, str) else v] for k, v in d.get("summary", {}).items()]
    return table(["figure", "value"], rows) + [""]


def _docs_scale_load(d: dict) -> list[str]:
    rows = []
    for r in [*d["sizes"], d["control"]]:
        rows.append(
            [
                f"{r['items']:,}" + (" (control)" if r is d["control"] else ""),
                f"{r['json_mib']:,.0f}",
                num(r["floor"]["wall_s"], 2),
                num(r.get("typed_decode", {}).get("wall_s"), 2),
                num(r["load"]["wall_s"], 2),
                f"**{r['ratio_wall']:.2f}x**",
                num(r.get("ratio_over_typed_decode"), 2),
                f"**{r['load']['peak_rss_mib']:,}**",
                num(r["parquet_mib"], 1),
            ]
        )
    head = [
        "items",
        "JSON MiB",
        "decode floor s",
        "typed decode s",
        "load s",
        "load / floor",
        "load / typed",
        "load peak RSS MiB",
        "Parquet MiB",
    ]
    return table(head, rows) + [
        f"Load: `{d['sizes'][0]['source']}` tiled in time (control: `{d['control']['source']}`), best of "
        f"the interleaved rounds, each in a fresh process. Targets: peak RSS <= {d['targets']['peak_rss_mib_max']:,} MiB "
        f"({num(d['summary']['rss_ok'])}), load <= {d['targets']['load_over_floor_max']}x the floor ({num(d['summary']['ratio_ok'])}).",
        "",
    ]


def _docs_scale_fleet(d: dict) -> list[str]:
    rows = []
    for name, r in d["runs"].items():
        if "error" in r:
            rows.append([name, "error: " + str(r["error"])[:80], "", "", "", "", ""])
            continue
        rows.append(
            [
                name.replace("_", " "),
                f"{r['tasks']:,}",
                f"**{num(r['wall_s'], 1)}**",
                num(r.get("build_s"), 1),
                num(r.get("solve_s"), 1),
                f"**{r['peak_rss_tree_mib']:,.0f}**",
                f"{r['tasks_per_s']:,.0f}",
                num(r.get("predicted_iteration_ms"), 2),
            ]
        )
    sm = d["summary"]
    head = ["ranks, edit", "tasks", "wall s", "build s", "solve s", "peak RSS MiB", "tasks/s", "predicted iteration ms"]
    return table(head, rows) + [
        f"Fleet: copies of `{d['input'].get('source')}` with per-rank perturbed durations; each run in a fresh process "
        f"(peak RSS of its process tree). Largest run < 10 min: {num(sm.get('largest_wall_ok'))}; < 12 GB: "
        f"{num(sm.get('largest_rss_ok'))}; tasks/s at the largest within 1.5x of the smallest: {num(sm.get('ratio_ok'))} "
        f"(smallest / largest {num(sm.get('tasks_per_s_ratio_smallest_over_largest'), 2)}); the DP-1024 what-if never "
        f"shortens the step: {num(sm.get('dp_never_shorter'))}.",
        "",
    ]


def _docs_scale_overview(d: dict) -> list[str]:
    b = d["browser"]
    rows = [
        ["ranks x steps", f"{d['ranks']} x {d['steps_per_rank']}"],
        ["events in the store", f"{d['events']:,}"],
        ["per-rank summaries, cold (s)", num(d["summary_cold_s"], 1)],
        ["summary table read (ms)", num(d["summary_read_ms"], 0)],
        ["first open in Chromium (ms)", num(b["first_open_ms"], 0)],
        ["warm opens in Chromium (ms)", ", ".join(num(x, 0) for x in b["warm_open_ms"])],
        ["**warm open, median (ms)**", f"**{num(b['warm_open_median_ms'], 0)}**"],
        ["one rank's timeline opened (ms)", num(b.get("rank_timeline_open_ms"), 0)],
    ]
    return table(["rank overview", "value"], rows) + [
        f"Overview: a {d['ranks']}-rank store of `{d['trace']}`; target: warm render < 3 s "
        f"({num(d['summary'].get('warm_render_under_3s'))}).",
        "",
    ]


def _docs_scale_rawfleet(d: dict) -> list[str]:
    if "error" in d:
        return [f"Raw fleet: error: {d['error']}", ""]
    i = d["input"]
    rows = [
        ["ranks (rank files)", f"{i['ranks']:,}"],
        ["JSON (MiB)", f"{i['json_mib']:,}"],
        ["**wall, JSON to prediction (s)**", f"**{num(d['wall_s'], 1)}**"],
        ["ingest: store build on Dask (s)", num(d["ingest_s"], 1)],
        ["ingest rate (MiB JSON/s)", num(d["ingest_mib_per_s"], 1)],
        ["fleet simulate, DP-1024 (s)", num(d["simulate_s"], 1)],
        ["**peak RSS, process tree (MiB)**", f"**{d['peak_rss_tree_mib']:,}**"],
        ["tasks", f"{d['tasks']:,}"],
        ["predicted iteration (ms)", num(d["predicted_iteration_ms"], 2)],
    ]
    return table(["from raw JSON", "value"], rows) + [
        f"Raw fleet: `mystique simulate FOLDER --what-if DP-1024` on {i['ranks']} JSON copies of `{i['source']}` "
        f"(per-rank perturbed durations), empty cache, no `--fleet` (routed rank by rank by itself: "
        f"{num(d['routed'])}); LocalCluster on {d['cpus']} CPUs; load average {d['load_average'][0]:.1f} -> "
        f"{d['load_average'][1]:.1f}.",
        "",
    ]


def _docs_scale_open(d: dict) -> list[str]:
    rows = []
    for r in d["sizes"]:
        st = r["steps"]

        def cell(k: str, f: str = "wall_s", st: dict = st) -> str:
            return "error" if "error" in st[k] else "–" if "skipped" in st[k] else num(st[k].get(f), 1)

        rows.append(
            [
                f"{r['items']:,}",
                f"{r['json_mib']:,.0f}",
                f"{r['whole_table_estimate_mib']:,}",
                f"{cell('info_cold')} / {cell('info_cold', 'peak_rss_mib')}",
                f"{cell('info_warm')} / {cell('info_warm', 'peak_rss_mib')}",
                f"**{cell('explore_timeline')} / {cell('explore_timeline', 'peak_rss_mib')}**",
                f"{cell('explore_analysis', 'analysis_s')} / {cell('explore_analysis', 'peak_rss_mib')}",
            ]
        )
    head = [
        "items",
        "JSON MiB",
        "whole tables would take MiB",
        "info, cold: s / peak MiB",
        "info, warm: s / peak MiB",
        "Explore first render: s / peak MiB",
        "Explore Analysis: s / peak MiB",
    ]
    loads = ", ".join(f"{r['load_average'][0]:.1f} -> {r['load_average'][1]:.1f}" for r in d["sizes"])
    return table(head, rows) + [
        f"Open: `{d['input']['source']}` tiled in time, over the whole-table budget, read through the store; each "
        f"step in a fresh process (cold: the store built inside it; Explore: the Traces page loads the trace, then "
        f"Explore's Timeline draws its first window, through Streamlit's AppTest). Peak RSS <= "
        f"{d['target']['peak_rss_mib_max']:,} MiB for info and the first render: {num(d['summary']['rss_ok'])}; "
        f"load average {loads}.",
        "",
    ]


_DOCS_SCALE_PARTS = {
    "load": _docs_scale_load,
    "fleet": _docs_scale_fleet,
    "dask": _docs_scale_dask,
    "overview": _docs_scale_overview,
    "rawfleet": _docs_scale_rawfleet,
    "open": _docs_scale_open,
}


def docs_section(d: dict) -> list[str]:
    """Inputs built from shared real GPU traces: big single traces by tiling steps in time, fleets by
    copying a rank with per-rank perturbed durations (no two ranks identical); peak RSS from fresh
    processes. One run of the script measures every part in order (each part records its load)."""
    out: list[str] = []
    for part in _DOCS_SCALE_PARTS:
        if part in d:
            out += [
                f"**{part}** ({d[part].get('date', '?')}, load {num(d[part].get('load_avg_1m_end'), 1)} at its end)",
                "",
            ]
            out += _DOCS_SCALE_PARTS.get(part, _docs_scale_generic)(d[part])
    return out


if __name__ == "__main__":
    sys.exit(main())
