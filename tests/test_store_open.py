"""Issue 31 item 21: a trace over the whole-table budget opens through its trace store.

`mystique info`, the Traces page and Explore (timeline, Analysis) read such a trace's columns and
windows from Parquet instead of decoding the JSON whole (engine.trace.store.handle). The budget
is set low here (MYSTIQUE_WHOLE_TABLE_MAX_BYTES) so that a real trace of tens of MB counts as
big; what is read through the store must equal what the whole tables give (the loader is the
reference), and the whole decode must never run (a spy on the loader's build).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from conftest import ROOT, SAMPLES
from mdtext import shown

CONTROL = "hta_trace_diff/control.json.gz"  # one rank of an 8-rank NCCL job: steps, GPU work


def _no_store_note(objs: list[dict]) -> list[dict]:
    out = []
    for o in objs:
        notes = [w for w in o["warnings"] if w.startswith("read through the trace store")]
        assert len(notes) == 1, o["warnings"]
        out.append({**o, "warnings": [w for w in o["warnings"] if w not in notes]})
    return out


def test_info_over_the_budget_reads_the_store_with_the_loaders_keys(shared_traces, cache_dir, monkeypatch, capsys):
    """`mystique info --json` over the budget: every key equals the whole-table summary's (plus
    one warning naming the budget), on a real GPU trace and on a two-rank capture (per file)."""
    from engine.cli.main import main
    from engine.trace import load
    from engine.trace.summary import summarize_sources

    for paths in ([str(shared_traces / CONTROL)], [str(p) for p in sorted((SAMPLES / "ddp").glob("*_kineto.json.gz"))]):
        want = summarize_sources(load(*paths, use_cache=False))
        monkeypatch.setenv("MYSTIQUE_WHOLE_TABLE_MAX_BYTES", "1")
        monkeypatch.setenv("MYSTIQUE_SCHEDULER", "serial")
        from engine.trace import loader

        with monkeypatch.context() as m:
            m.setattr(loader, "_build", lambda *a, **k: pytest.fail("decoded whole"))
            assert main(["info", "--json", *paths]) == 0
        got = json.loads(capsys.readouterr().out)
        got = got if isinstance(got, list) else [got]
        assert _no_store_note(got) == want
        monkeypatch.delenv("MYSTIQUE_WHOLE_TABLE_MAX_BYTES")


@pytest.mark.alone
def test_info_on_a_big_trace_stays_in_bounded_memory(shared_traces, tmp_path):
    """A generated 122 MiB trace (the real MI300 ResNet trace's steps tiled in time) whose whole
    tables would take about 1 GB: `mystique info` peaks under 600 MiB (measured 430-440 MiB on
    2 busy cores: 115 MiB of imports, the streamed store build to 268 MiB, DuckDB's aggregates
    and their Arrow scans the rest; the loader's whole tables peak at 8x the JSON)."""
    from engine.testing.tiled import make_tiled

    src = shared_traces / "tracelens_mi300_resnet_ckpt" / "resnet_act_checkpoint.json.gz"
    big = tmp_path / "tiled.json"
    facts = make_tiled(src, big, 500_000)
    whole_mib = 8 * facts["json_bytes"] / 2**20
    assert whole_mib > 800, facts
    child = (
        "import sys, json\nfrom engine.cli.main import main\nrc = main(['info', '--json', sys.argv[1]])\n"
        "hwm = next(int(l.split()[1]) for l in open('/proc/self/status') if l.startswith('VmHWM:'))\n"
        "print(json.dumps({'rc': rc, 'peak_mib': hwm / 1024}))"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MYSTIQUE_CACHE_DIR": str(tmp_path / "cache")}
    env.pop("MYSTIQUE_WHOLE_TABLE_MAX_BYTES", None)  # the default budget (2 GiB) is what a user gets
    env["MYSTIQUE_LOAD_MAX_BYTES"] = str(512 << 20)  # as on a machine with 512 MiB free: whole is refused
    r = subprocess.run([sys.executable, "-c", child, str(big)], capture_output=True, text=True, env=env, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-2000:]
    lines = r.stdout.strip().splitlines()
    info, res = json.loads("\n".join(lines[:-1])), json.loads(lines[-1])
    assert info["events"] == facts["items"]
    assert info["iterations"] and info["step_source"] == "ProfilerStep"
    assert any("read through the trace store" in w for w in info["warnings"])
    assert res["peak_mib"] < 600, (res, whole_mib)


@pytest.mark.slow
def test_traces_and_explore_over_the_budget_read_the_store(shared_traces, tmp_path, monkeypatch):
    """The Traces page and Explore's timeline and Analysis on a trace over the budget: no whole
    decode of it, the summary's counts are MANIFEST's, the first timeline window draws what the
    whole tables draw (bar for bar), Analysis's kernel table is the whole table's."""
    pytest.importorskip("streamlit")
    import pandas as pd
    import plotly.io as pio
    from streamlit.testing.v1 import AppTest

    from engine.analysis.selftime import kernel_table
    from engine.figures import timeline as tl
    from engine.trace import load, loader
    from engine.trace.ranks import of_rank

    path = str(shared_traces / CONTROL)
    man = {m["path"]: m for m in json.loads((shared_traces / "MANIFEST.json").read_text())}[CONTROL]
    monkeypatch.setenv("MYSTIQUE_CACHE_DIR", str(tmp_path / "cache"))
    # the references, from whole tables, before the spy
    ev = load(path, use_cache=False).events
    rank = int(ev["rank"].iloc[0])
    lo, hi = tl.default_window(of_rank(ev, rank))
    want_fig = tl.timeline_figure(ev, tl.TimelineView(start_us=lo, end_us=hi, rank=rank), launch_flows=True)
    want = json.loads(pio.to_json(want_fig, validate=False))
    ref = kernel_table(ev).head(200)
    del ev

    decoded: list[str] = []
    real = loader._build

    def spy(raws, *a, **k):
        decoded.extend(str(f) for f, _ in raws)
        return real(raws, *a, **k)

    monkeypatch.setattr(loader, "_build", spy)
    monkeypatch.setenv("MYSTIQUE_UI_DIR", str(tmp_path / "ui"))
    monkeypatch.setenv("MYSTIQUE_WHOLE_TABLE_MAX_BYTES", str(64 << 20))  # the samples fit, the control does not
    monkeypatch.setenv("MYSTIQUE_PREFETCH", "0")
    monkeypatch.setenv("MYSTIQUE_SCHEDULER", "serial")
    at = AppTest.from_file(str(ROOT / "app" / "main.py"), default_timeout=180)
    at.run()
    at.text_area(key="server_paths").input(path)
    at.text_input(key="path_name").input("big")
    at.button(key="load_path").click()
    at.run()
    assert not at.exception and not at.error, [e.value for e in (*at.exception, *at.error)]
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Kineto events"] == f"{man['events']:,}" and metrics["ET nodes"] == "0"

    at.switch_page("../pages/explore.py")
    at.run()
    at.radio(key="explore_view").set_value("Timeline")
    at.run()
    assert not at.exception and not at.error, [e.value for e in (*at.exception, *at.error)]
    (chart,) = [c for c in at.get("plotly_chart") if c.proto.id.endswith("explore_timeline")]
    got = json.loads(chart.proto.spec)
    assert got["layout"]["title"]["text"] == want["layout"]["title"]["text"]
    assert got["data"] == want["data"]
    assert got["layout"]["yaxis"]["ticktext"] == want["layout"]["yaxis"]["ticktext"]

    at.radio(key="explore_view").set_value("Analysis")
    at.run()
    assert not at.exception and not at.error, [e.value for e in (*at.exception, *at.error, *at.info)]
    kern = at.dataframe[1].value  # the breakdown, the kernels, the classes
    assert kern["name"].tolist() == ref["name"].tolist()
    pd.testing.assert_series_equal(kern["self_us"], ref["self_us"], check_names=False, rtol=1e-9)
    assert any("No critical path" in shown(i.value) and "whole-table budget" in shown(i.value) for i in at.info)
    at.radio(key="explore_view").set_value("Breakdown")
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert any("whole-table budget" in shown(i.value) for i in at.info)
    assert path not in decoded, decoded


def test_simulate_a_folder_over_the_load_budget_goes_rank_by_rank(tmp_path, cache_dir):
    """`mystique simulate FOLDER` of rank traces whose whole tables exceed the loader's budget:
    the fleet simulator from the store (one line on stderr says so), not a refusal, with every
    rank of the folder in its result (before: "too big to load whole", exit 2)."""
    from clirun import cli

    from engine.testing.fleet import make_fleet

    folder = tmp_path / "job"
    make_fleet(SAMPLES / "ddp" / "ddp_rank0_kineto.json.gz", folder, 4)
    spec = '{"version": 1, "edits": [{"kind": "data_parallel", "ranks": 1024}]}'
    r = cli(
        "simulate",
        str(folder),
        "--json",
        "--what-if",
        spec,
        cache=cache_dir,
        pre="export MYSTIQUE_LOAD_MAX_BYTES=65536 MYSTIQUE_SCHEDULER=serial",
    )
    assert r.returncode == 0, r.stderr[-1500:]
    assert "simulated rank by rank from the trace store" in r.stderr
    data = json.loads(r.stdout)
    assert data["ranks"] == 4 and sorted(int(r) for r in data["step_ms"]) == [0, 1, 2, 3]
    assert data["report"]["dp"]["ranks"] == 1024
