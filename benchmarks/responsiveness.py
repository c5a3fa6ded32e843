"""UI responsiveness: time to first render of the Explore page and size of the big figures.

Measures (all wall-clock, this machine; printed as a table and written to
benchmarks/results/responsiveness.json):
  * Explore for the 14,392-node ResNet ET + its 111k-event Kineto (param_resnet), through
    Streamlit's AppTest (the server-side work of a page run: load, graph model, figures,
    protobuf serialization; not the browser's drawing):
      cold  = fresh process, empty parse cache: load through the Traces page + Explore run
      warm  = fresh process, parse cache on disk: the same
      rerun = the same session, Explore run again (Streamlit caches hot)
    Targets: cold < 3 s, warm < 1 s.
  * Figure builders alone (ResNet graph; the ~75k-X-event hta_trace_diff control timeline):
    build time, number of points, JSON payload in MB.

Usage: .venv/bin/python benchmarks/responsiveness.py [--traces DIR] [--repeat N]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

from harness import ROOT  # first: puts the repo root on sys.path (benchmarks/harness.py)

if TYPE_CHECKING:
    from benchmarks.report import table

OUT = ROOT / "benchmarks" / "results" / "responsiveness.json"
RESNET = ("param_resnet/resnet_et.json.gz", "param_resnet/resnet_kineto.json.gz")
CONTROL = "hta_trace_diff/control.json.gz"


def _child_explore(traces: Path) -> dict:
    """Run in a subprocess: one AppTest session that loads ResNet and opens Explore."""
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(ROOT / "app" / "main.py"), default_timeout=600)
    at.run()
    t0 = time.perf_counter()
    at.text_area(key="server_paths").input("\n".join(str(traces / p) for p in RESNET))
    at.text_input(key="path_name").input("resnet")
    at.button(key="load_path").click()
    at.run()
    t1 = time.perf_counter()
    at.switch_page("../pages/explore.py")
    at.run()
    t2 = time.perf_counter()
    at.run()
    t3 = time.perf_counter()
    errors = [e.value for e in at.exception] + [e.value for e in at.error]
    title = next((c.proto.id for c in at.get("plotly_chart") if c.proto.id.endswith("explore_graph")), None)
    return {
        "load_s": t1 - t0,
        "explore_s": t2 - t1,
        "first_render_s": t2 - t0,
        "rerun_s": t3 - t2,
        "errors": errors,
        "graph_chart": title is not None,
    }


def _run_child(traces: Path, cache: Path, ui: Path) -> dict:
    env = dict(os.environ, MYSTIQUE_CACHE_DIR=str(cache), MYSTIQUE_UI_DIR=str(ui))
    cmd = [sys.executable, __file__, "--child", "--traces", str(traces)]
    res = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900, cwd=str(ROOT))
    line = next((ln for ln in reversed(res.stdout.splitlines()) if ln.startswith("{")), None)
    if res.returncode != 0 or line is None:
        raise SystemExit(f"child failed ({res.returncode}): {res.stderr[-2000:]}")
    return json.loads(line)


def _figures(traces: Path, cache: Path) -> dict:
    os.environ["MYSTIQUE_CACHE_DIR"] = str(cache)
    from engine.figures.graph import GraphView, build_graph_model, graph_figure
    from engine.figures.timeline import timeline_figure
    from engine.graph import data_deps
    from engine.trace import load

    out = {}
    t = time.perf_counter()
    resnet = load(*(traces / p for p in RESNET))
    out["resnet_load_s"] = time.perf_counter() - t
    t = time.perf_counter()
    dag = data_deps(resnet)
    out["resnet_data_deps_s"] = time.perf_counter() - t
    t = time.perf_counter()
    model = build_graph_model(resnet.ops, dag, GraphView())
    out["resnet_graph_model_s"] = time.perf_counter() - t
    t = time.perf_counter()
    fig = graph_figure(model)
    payload = fig.to_json()
    out["resnet_graph_figure_s"] = time.perf_counter() - t
    out.update(
        resnet_et_nodes=len(resnet.ops),
        resnet_dag_nodes=dag.number_of_nodes(),
        resnet_graph_nodes_drawn=len(model.nodes),
        resnet_graph_collapse=model.collapse,
        resnet_graph_edges_drawn=len(model.edges),
        resnet_graph_json_mb=len(payload) / 1e6,
    )

    control = load(traces / CONTROL)
    t = time.perf_counter()
    fig = timeline_figure(control.events)
    out["control_timeline_build_s"] = time.perf_counter() - t
    t = time.perf_counter()
    payload = fig.to_json()
    out["control_timeline_json_s"] = time.perf_counter() - t
    out.update(
        control_x_events=len(control.events),
        control_timeline_points=sum(len(tr.x) for tr in fig.data),
        control_timeline_mode="bars" if fig.layout.meta["bars"] else "webgl segments",
        control_timeline_json_mb=len(payload) / 1e6,
    )
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--traces", type=Path, default=ROOT.parent / "shared" / "traces")
    ap.add_argument("--repeat", type=int, default=1, help="cold/warm runs each (median reported)")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if not (args.traces / RESNET[0]).exists():
        print(f"shared traces not found under {args.traces}", file=sys.stderr)
        return 2
    if args.child:
        print(json.dumps(_child_explore(args.traces)))
        return 0

    runs: dict[str, list[dict]] = {"cold": [], "warm": []}
    with tempfile.TemporaryDirectory(prefix="mystique-resp-") as tmp:
        for i in range(args.repeat):
            cache = Path(tmp) / f"cache{i}"
            runs["cold"].append(_run_child(args.traces, cache, Path(tmp) / "ui"))
            runs["warm"].append(_run_child(args.traces, cache, Path(tmp) / "ui"))
        figs = _figures(args.traces, Path(tmp) / "cache0")

    def med(kind: str, key: str) -> float:
        return statistics.median(r[key] for r in runs[kind])

    result = {
        "explore_resnet": {
            kind: {k: med(kind, k) for k in ("load_s", "explore_s", "first_render_s", "rerun_s")} for kind in runs
        },
        "targets_s": {"cold": 3.0, "warm": 1.0},
        "errors": sorted({e for kind in runs for r in runs[kind] for e in r["errors"]}),
        "figures": figs,
        "machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0]},
        "note": "AppTest measures the server side of a page run (no browser drawing); shared, noisy CPUs",
        "command": "python benchmarks/responsiveness.py",
    }
    cold, warm = result["explore_resnet"]["cold"], result["explore_resnet"]["warm"]

    def pair(a: str, b: str) -> str:
        return f"{figs[a]} / {figs[b]}"

    rows = [  # (measure, value, unit, target)
        ("Explore ResNet cold: first render (load + page)", cold["first_render_s"], "s", "< 3"),
        ("  of which load through Traces page", cold["load_s"], "s", ""),
        ("  of which Explore page run", cold["explore_s"], "s", ""),
        ("Explore ResNet warm: first render (load + page)", warm["first_render_s"], "s", "< 1"),
        ("  of which Explore page run", warm["explore_s"], "s", ""),
        ("Explore ResNet rerun (same session)", warm["rerun_s"], "s", ""),
        ("ResNet graph: model build", figs["resnet_graph_model_s"], "s", ""),
        ("ResNet graph: figure + JSON", figs["resnet_graph_figure_s"], "s", ""),
        ("ResNet graph: nodes drawn / DAG nodes", pair("resnet_graph_nodes_drawn", "resnet_dag_nodes"), "", ""),
        ("ResNet graph: JSON payload", figs["resnet_graph_json_mb"], "MB", ""),
        ("hta control timeline: build", figs["control_timeline_build_s"], "s", ""),
        ("hta control timeline: X events / points", pair("control_x_events", "control_timeline_points"), "", ""),
        ("hta control timeline: JSON payload", figs["control_timeline_json_mb"], "MB", ""),
    ]
    print(f"{'measure':52s} {'value':>14s} {'unit':4s} target")
    for name, v, unit, target in rows:
        val = f"{v:14.3f}" if isinstance(v, float) else f"{v:>14s}"
        print(f"{name:52s} {val} {unit:4s} {target}")
    if result["errors"]:
        print("errors:", result["errors"])
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(result, indent=2))
    print(f"wrote {OUT.relative_to(ROOT)}")
    return 0


# -- its section of docs/figures.md, beside the code that writes its results. benchmarks/report.py
# runs `docs_section` (and the `_docs_*` helpers) on the results file without importing this file
# (so the report stays standard-library only), giving it the formatters named below.
def docs_section(d: dict) -> list[str]:
    """Streamlit AppTest: the server side of a page run, no browser drawing."""
    rows = []
    for view, v in d.get("explore_resnet", {}).items():
        rows.append(
            [
                f"Explore, ResNet ET + Kineto, {view}: first render",
                f"{v['first_render_s']:.2f} s",
                f"< {d['targets_s'].get(view)} s",
            ]
        )
        rows.append([f"… rerun in the same session ({view})", f"{v['rerun_s']:.2f} s", ""])
    return table(["measurement (server side, AppTest)", "value", "target"], rows) + [d.get("note", ""), ""]


if __name__ == "__main__":
    sys.exit(main())
