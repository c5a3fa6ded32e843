"""Every page through Streamlit's AppTest: load, explore, select, compose, replay (CPU), compare.

AppTest cannot click a chart, so selections are made the way the app stores them (session
state) or through widgets (checkbox, table filter); chart-event mapping itself is covered by
tests/test_figures_selection.py and the real-browser test.
"""

from __future__ import annotations

import gzip
import os
from pathlib import Path

import pytest
from mdtext import shown

pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest

ROOT = Path(__file__).resolve().parents[1]
MAIN = str(ROOT / "app" / "main.py")
MLP = ROOT / "sample_traces" / "mlp"


@pytest.fixture()
def app(tmp_path, monkeypatch, cache_dir):
    if not (MLP / "mlp_et.json.gz").exists():
        pytest.skip("bundled mlp sample missing (make samples)")
    monkeypatch.setenv("MYSTIQUE_UI_DIR", str(tmp_path / "ui"))
    at = AppTest.from_file(MAIN, default_timeout=180)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def _ok(at):
    assert not at.exception, [e.value for e in at.exception]


def _page(at, name):
    at.switch_page(f"../pages/{name}.py")
    at.run()
    _ok(at)
    return at


def test_first_start_loads_the_bundled_sample(app):
    from engine.trace import load, summarize

    traces = app.session_state["traces"]
    assert list(traces) == ["sample:mlp"]
    entry = traces["sample:mlp"]
    assert entry["kind"] == "execution_trace+kineto"
    summary = summarize(load(*entry["paths"]))
    metrics = {m.label: m.value for m in app.metric}
    assert metrics["ET nodes"] == f"{summary['nodes']:,}"
    assert metrics["Kineto events"] == f"{summary['events']:,}"
    assert metrics["ET↔Kineto link rate"].endswith("%")
    assert metrics["kind"] == "ET + Kineto"  # short enough for the metric's width
    # session state holds handles only: no DataFrames or traces
    import orjson

    for key in ("traces", "current", "_started"):
        orjson.dumps(app.session_state[key])  # JSON-able small values, never tables


def test_server_paths_pair_et_and_kineto(app, shared_traces):
    d = shared_traces / "hta_simple_add"
    app.text_area(key="server_paths").input(
        f"{d / 'benchmark_simple_add_et.json.gz'}\n{d / 'benchmark_simple_add_trace.json.gz'}"
    )
    app.text_input(key="path_name").input("simple add")
    app.button(key="load_path").click()
    app.run()
    _ok(app)
    assert not app.error, [e.value for e in app.error]
    entry = app.session_state["traces"]["simple add"]
    assert entry["kind"] == "execution_trace+kineto" and entry["link_rate"] == 1.0
    assert "sample:mlp" in app.session_state["traces"]


def test_bad_inputs_show_one_line_errors_and_keep_traces(app, tmp_path):
    before = dict(app.session_state["traces"])
    # corrupt gzip through the uploader
    app.file_uploader(key="uploads").upload("broken_trace.json.gz", b"\x1f\x8b\x08\x00garbage", "application/gzip")
    app.run()
    app.button(key="load_upload").click()
    app.run()
    _ok(app)
    assert len(app.error) == 1 and "broken_trace.json.gz" in shown(app.error[0].value)
    assert "\n" not in app.error[0].value.strip()
    # a non-trace JSON through a server path
    bad = tmp_path / "notes.json"
    bad.write_text('{"hello": "world"}')
    app.text_area(key="server_paths").input(str(bad))
    app.button(key="load_path").click()
    app.run()
    _ok(app)
    assert any("notes.json" in shown(e.value) for e in app.error)
    # missing file
    app.text_area(key="server_paths").input(str(tmp_path / "nope.json.gz"))
    app.button(key="load_path").click()
    app.run()
    assert any("no such file" in shown(e.value) for e in app.error)
    assert app.session_state["traces"] == before


def test_upload_over_the_limit_is_refused(app, monkeypatch):
    from streamlit import config

    before = dict(app.session_state["traces"])
    config.set_option("server.maxUploadSize", 1)
    try:
        app.run()
        big = gzip.compress(b"x") + b"\0" * (1024 * 1024 + 10)
        app.file_uploader(key="uploads").upload("huge_kineto.json.gz", big)
        app.run()
        app.button(key="load_upload").click()
        app.run()
        _ok(app)
        assert any(
            "over the 1 MB upload limit" in shown(e.value) and "huge_kineto.json.gz" in shown(e.value)
            for e in app.error
        )
        assert app.session_state["traces"] == before and app.session_state["current"] == "sample:mlp"
    finally:
        config.set_option("server.maxUploadSize", 200)


NOT_TRACES = [
    ("notes.txt", b"hello world\n", "not valid JSON"),
    ("notes.json", b'{"hello": "world"}', "not an execution trace or Kineto trace"),
    ("photo.png", b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4, "not valid JSON"),
    ("empty.json", b"", "empty file"),
    ("broken.json.gz", b"\x1f\x8b\x08\x00garbage", "gzip"),
]


def test_non_trace_uploads_show_a_message_and_the_app_keeps_working(app):
    before = dict(app.session_state["traces"])
    uploader = app.file_uploader(key="uploads")
    for fname, data, problem in NOT_TRACES:
        uploader.clear()
        app.run()
        uploader = app.file_uploader(key="uploads")
        uploader.upload(fname, data)
        app.run()
        app.button(key="load_upload").click()
        app.run()
        _ok(app)
        assert len(app.error) == 1, (fname, [e.value for e in app.error])
        msg = shown(app.error[0].value)
        assert msg.startswith(f"{fname}: ") and problem in msg and "\n" not in msg.strip(), msg  # no server path
        assert not app.success
        # traces already loaded are untouched, and still shown
        assert app.session_state["traces"] == before and app.session_state["current"] == "sample:mlp"
        assert list(app.dataframe[0].value["name"]) == ["sample:mlp"]
        uploader = app.file_uploader(key="uploads")
    # the app keeps working: a real trace through the same uploader loads next to the old one
    uploader.clear()
    app.run()
    uploader = app.file_uploader(key="uploads")
    for f in sorted((ROOT / "sample_traces" / "cnn").glob("cnn_*.json.gz")):
        uploader.upload(f.name, f.read_bytes(), "application/gzip")
    app.text_input(key="upload_name").input("cnn upload")
    app.run()
    app.button(key="load_upload").click()
    app.run()
    _ok(app)
    assert not app.error, [e.value for e in app.error]
    traces = app.session_state["traces"]
    assert set(traces) == {"sample:mlp", "cnn upload"} and traces["sample:mlp"] == before["sample:mlp"]
    assert traces["cnn upload"]["kind"] == "execution_trace+kineto"


def test_explore_renders_graph_timeline_and_breakdowns(app):
    at = _page(app, "explore")

    def charts():
        return {c.proto.id.rsplit("-", 1)[-1] for c in at.get("plotly_chart")}

    assert charts() == {"explore_graph"}  # one view at a time
    at.selectbox(key="explore_graph_color").set_value("phase")
    at.text_input(key="explore_graph_search").input("addmm")
    at.run()
    _ok(at)
    at.radio(key="explore_view").set_value("Timeline")
    at.run()
    _ok(at)
    assert charts() == {"explore_timeline"}
    at.number_input(key="t_min_dur").set_value(50.0)
    at.run()
    _ok(at)
    at.radio(key="explore_view").set_value("Breakdown")
    at.run()
    _ok(at)
    assert {"b_ops", "b_category", "b_phase"} <= charts()
    top = at.dataframe(key="b_top").value
    assert len(top) > 0 and (top["self_us"].diff().dropna() <= 0).all()  # by self time, largest first
    assert "annotation" not in set(top["category"].astype(str))  # annotations apart (issue 23)


@pytest.mark.slow
def test_compose_replay_compare_flow(app):
    from engine.graph import replay_ops
    from engine.trace import load

    trace = load(*app.session_state["traces"]["sample:mlp"]["paths"])
    ids = [int(i) for i in replay_ops(trace)[:6]]
    app.session_state["selection"] = {"trace": "sample:mlp", "ids": ids, "source": "graph"}
    at = _page(app, "compose")
    at.checkbox(key="compose_use_explore").check()
    at.run()
    _ok(at)
    assert at.session_state["compose_picked"] == sorted(ids)
    at.button(key="compose_add").click()
    at.run()
    _ok(at)
    spec = at.session_state["specs"]["sample:mlp"]
    assert len(spec["segments"]) == 1 and spec["segments"][0]["selection"]["ids"] == sorted(ids)
    tk = at.session_state["traces"]["sample:mlp"]["hash"][:12] + ".0"  # compose widgets: keyed per trace content
    at.number_input(key=f"seg_rep_0:{tk}").set_value(3)
    at.run()
    _ok(at)
    assert not at.error, [e.value for e in at.error]
    assert at.session_state["specs"]["sample:mlp"]["segments"][0]["repeat"] == 3
    metrics = {m.label: m.value for m in at.metric}
    # the composed op list repeats the segment 3 times
    from engine.graph import Selection, select

    n_replay = len(select(trace, Selection(ids=ids)).replay_ids)
    assert metrics["ops per iteration"] == f"{3 * n_replay:,}"
    assert float(metrics["estimated memory"].split()[0].replace(",", "")) > 0
    at.button(key="compose_export").click()
    at.run()
    _ok(at)
    assert not at.error, [e.value for e in at.error]
    bench = at.session_state["benchmark"]
    assert Path(bench["et_path"]).exists() and "benchmark.json" in bench["files"]

    at = _page(at, "replay")
    targets = at.radio(key="replay_target").options
    assert any(t.startswith("selection (6 ops)") for t in targets)
    at.radio(key="replay_target").set_value(next(t for t in targets if t.startswith("selection")))
    at.number_input(key="replay_iters").set_value(2)
    at.number_input(key="replay_warmup").set_value(1)
    at.button(key="run_replay").click()
    at.run()
    _ok(at)
    assert not at.error, [e.value for e in at.error]
    runs = _wait_runs(at, 1)
    assert len(runs) == 1 and Path(runs[0]["path"]).exists() and runs[0]["device"] == "cpu"
    metrics = {m.label: m.value for m in at.metric}
    assert float(metrics["median ms / iteration"]) > 0
    assert metrics["ops replayed"].endswith("/ 6")

    # the exported benchmark replays too
    composed = next(t for t in at.radio(key="replay_target").options if t.startswith("composed"))
    at.radio(key="replay_target").set_value(composed)
    at.button(key="run_replay").click()
    at.run()
    _ok(at)
    assert not at.error, [e.value for e in at.error]
    runs = _wait_runs(at, 2)
    assert len(runs) == 2 and runs[1]["target"] == composed
    assert runs[0]["path"] != runs[1]["path"]  # two runs in one second once shared a folder
    assert {m.label: m.value for m in at.metric}["ops replayed"].endswith(f"/ {3 * n_replay}")

    at = _page(at, "compare")
    assert _by_label(at.selectbox, "Replay run").value == 1  # opens on the run just made (issue 21)
    _by_label(at.selectbox, "Replay run").set_value(0)
    at.run()
    _ok(at)
    metrics = {m.label: m.value for m in at.metric}
    assert float(metrics["replay ms / iteration"]) == pytest.approx(runs[0]["median_ms"], abs=1e-3)
    assert metrics["end-to-end error"].endswith("%")
    # a 6-op selection: the like-with-like figures over the matched ops are shown too
    assert float(metrics["matched ops, replay ms"]) > 0 and float(metrics["matched ops, original ms"]) > 0
    assert metrics["matched-ops error"].endswith("%")
    per_op = next(d.value for d in at.dataframe if "replay_id" in d.value.columns and "error" in d.value.columns)
    assert sorted(per_op["replay_id"]) == sorted(ids)
    err = per_op["error"].dropna()
    assert (err.diff().dropna() <= 0).all()  # sorted by error, worst first

    # issue 13 problem 1: the composed benchmark (renumbered ids) is matched through provenance,
    # and every matched row pairs ops of the same name (4eb7f39 matched by raw id: no such columns)
    _by_label(at.selectbox, "Replay run").set_value(1)
    at.run()
    _ok(at)
    per_op = next(d.value for d in at.dataframe if "replay_id" in d.value.columns and "error" in d.value.columns)
    matched = per_op[per_op["original_us"].notna()]
    assert len(matched) > 0 and (matched["original_name"] == matched["replay_name"]).all()
    assert set(per_op["original_id"].dropna().astype(int)) <= set(ids)
    assert any("provenance" in c.value for c in at.caption)


def _wait_runs(at, n: int) -> list[dict]:
    """Replays run in worker processes: wait for the n-th to finish, then redraw the page."""
    from engine.workspace import Catalog, JobRunner

    cat = Catalog(Path(os.environ["MYSTIQUE_UI_DIR"]) / "workspace")
    jobs = cat.jobs(kind="replay")
    assert len(jobs) >= n, jobs
    done = JobRunner(cat).wait(jobs[n - 1]["id"], timeout_s=300)
    assert done["status"].value == "done", done.get("error")
    at.run()
    _ok(at)
    return [
        {
            "path": j["result_path"],
            "device": j["summary"]["device"],
            "target": j["target"],
            "median_ms": j["summary"]["median_ms"],
        }
        for j in cat.jobs(kind="replay")
        if j["status"].value == "done"
    ]


def test_compare_two_loaded_traces(app, shared_traces):
    d = shared_traces / "hta_alexnet"
    f = next(d.glob("*.json.gz"))
    app.text_area(key="server_paths").input(str(f))
    app.text_input(key="path_name").input("alexnet")
    app.button(key="load_path").click()
    app.run()
    _ok(app)
    at = _page(app, "compare")
    at.radio(key="cmp_mode").set_value("trace vs trace")
    at.run()
    _ok(at)
    at.selectbox(key="cmp_a").set_value("alexnet")
    at.selectbox(key="cmp_b").set_value("sample:mlp")
    at.run()
    _ok(at)
    keys = {c.proto.id.rsplit("-", 1)[-1] for c in at.get("plotly_chart")}
    assert {"tt_cat", "tt_name", "tt_timelines"} <= keys
    assert "alexnet ms / iteration" in {m.label for m in at.metric}


def test_a_trace_rewritten_in_place_is_shown_as_it_is_now(app, tmp_path):
    """Views are cached on paths: a capture into the same folder while the dashboard runs used to
    keep showing the old trace (summary, Explore) until the server restarted."""
    import shutil

    from app import views
    from engine.trace import load

    d = tmp_path / "run"
    d.mkdir()
    et, kineto = d / "run_et.json.gz", d / "run_kineto.json.gz"
    cnn = ROOT / "sample_traces" / "cnn"
    shutil.copy(MLP / "mlp_et.json.gz", et)
    shutil.copy(MLP / "mlp_kineto.json.gz", kineto)
    app.text_area(key="server_paths").input(f"{et}\n{kineto}")
    app.text_input(key="path_name").input("run")
    app.button(key="load_path").click().run()
    _ok(app)
    app.selectbox(key="summary_pick").select("run").run()
    mlp_nodes = len(load(MLP / "mlp_et.json.gz").ops)
    assert {m.label: m.value for m in app.metric}["ET nodes"] == f"{mlp_nodes:,}"
    old_hash = app.session_state["traces"]["run"]["hash"]
    key = (str(et), str(kineto))
    assert views.search_events(key, None, "conv") == []  # a cached view of the MLP: no convolutions

    shutil.copy(cnn / "cnn_et.json.gz", et)  # the same paths, another run's content
    shutil.copy(cnn / "cnn_kineto.json.gz", kineto)
    later = et.stat().st_mtime_ns + 2_000_000_000  # a coarse-mtime filesystem still sees a change
    os.utime(et, ns=(later, later))
    app.run()
    _ok(app)
    cnn_trace = load(cnn / "cnn_et.json.gz", cnn / "cnn_kineto.json.gz")
    assert len(cnn_trace.ops) != mlp_nodes
    assert {m.label: m.value for m in app.metric}["ET nodes"] == f"{len(cnn_trace.ops):,}"
    entry = app.session_state["traces"]["run"]
    assert entry["hash"] != old_hash and entry["hash"] == load(et, kineto).content_hash
    assert views.search_events(key, None, "conv")  # the same cached view, rebuilt on the CNN


@pytest.mark.slow
def test_replay_world_size_defaults_to_the_rank_count_of_a_two_rank_folder(app, tmp_path):
    """Issue 21 item 5: after the page showed a one-rank trace (World size 1), picking a 2-rank
    composed TP benchmark folder in the same page defaults World size to 2. Before: the folder
    did not load (COMPLETE.json read as a trace) and the widget kept 1 (one key for every trace),
    so the TP benchmark ran as one SPMD rank."""
    from engine.compose import compose, export, spec_from_dict

    spec = {
        "sources": [str(MLP / "mlp_et.json.gz")],
        "segments": [{"selection": {}}],
        "sharding": {"kind": "tp", "degree": 2},
    }
    export(compose(spec_from_dict(spec)), tmp_path / "tp2")
    at = _page(app, "traces")
    at.text_area(key="server_paths").input(str(tmp_path / "tp2"))
    at.text_input(key="path_name").input("tp2")
    at.button(key="load_path").click()
    at.run()
    _ok(at)
    assert "tp2" in at.session_state["traces"], [e.value for e in at.error]
    at = _page(at, "replay")
    at.selectbox(key="replay_trace").set_value("sample:mlp")
    at.run()
    _ok(at)
    world = [n for n in at.number_input if n.label == "World size (processes)"]
    assert world and world[0].value == 1
    at.selectbox(key="replay_trace").set_value("tp2")
    at.run()
    _ok(at)
    world = [n for n in at.number_input if n.label == "World size (processes)"]
    assert world and world[0].value == 2


def _by_label(widgets, label):
    return next(w for w in widgets if w.label == label)


def test_compose_settings_and_searches_belong_to_the_trace_shown(app):
    """Issue 21 item 6: batch scale, sharding and the benchmark name set on one trace do not carry
    over to the next trace picked (its spec's defaults show), a regex search resets on a trace
    change, and the trace just loaded is what Compose and What-if open on. Widgets are found by
    label, so the test runs against the old page too (there the second trace showed batch scale 2)."""
    at = _page(app, "whatif")
    assert at.selectbox(key="wi_trace").value == "sample:mlp"
    at = _page(at, "compose")
    _by_label(at.number_input, "Batch scale").set_value(2.0)
    _by_label(at.selectbox, "Sharding").set_value("tp")
    _by_label(at.text_input, "Benchmark name").input("mlp bench")
    at.text_input(key="compose_filter").input("addmm")
    at.run()
    _ok(at)
    assert at.session_state["specs"]["sample:mlp"]["batch_scale"] == 2.0
    at = _page(at, "traces")
    cnn = ROOT / "sample_traces" / "cnn"
    at.text_area(key="server_paths").input(f"{cnn / 'cnn_et.json.gz'}\n{cnn / 'cnn_kineto.json.gz'}")
    at.text_input(key="path_name").input("cnn")
    at.button(key="load_path").click()
    at.run()
    _ok(at)
    at = _page(at, "compose")
    assert at.selectbox(key="compose_trace").value == "cnn"  # the trace just loaded
    assert _by_label(at.number_input, "Batch scale").value == 1.0
    assert _by_label(at.selectbox, "Sharding").value == "none"
    assert _by_label(at.text_input, "Benchmark name").value != "mlp bench"
    assert at.text_input(key="compose_filter").value == ""
    spec = at.session_state["specs"]["cnn"]
    assert spec["batch_scale"] == 1.0 and not spec.get("sharding") and spec["name"] != "mlp bench"
    assert not at.error, [e.value for e in at.error]
    # the first trace keeps its own settings
    at.selectbox(key="compose_trace").set_value("sample:mlp")
    at.run()
    _ok(at)
    assert _by_label(at.number_input, "Batch scale").value == 2.0
    assert _by_label(at.text_input, "Benchmark name").value == "mlp bench"
    # switching the picker on the page itself: the search resets, the settings stay the trace's
    at.text_input(key="compose_filter").input("addmm")
    at.run()
    at.selectbox(key="compose_trace").set_value("cnn")
    at.run()
    _ok(at)
    assert at.text_input(key="compose_filter").value == ""
    assert _by_label(at.number_input, "Batch scale").value == 1.0
    assert _by_label(at.selectbox, "Sharding").value == "none"
    assert at.session_state["specs"]["cnn"]["batch_scale"] == 1.0
    assert not at.error, [e.value for e in at.error]
    at = _page(at, "whatif")
    assert at.selectbox(key="wi_trace").value == "cnn"  # what-if opens on the trace just loaded


@pytest.mark.slow
def test_replay_page_hints_mirror_rank_for_one_rank_of_a_multi_rank_job(app):
    """Issue 21 item 7: rank 0's ET of the 2-rank DDP sample replayed alone: the result says the
    trace records a 2-rank job and offers --mirror-rank with World size 2."""
    ddp = ROOT / "sample_traces" / "ddp"
    at = _page(app, "traces")
    at.text_area(key="server_paths").input(str(ddp / "ddp_rank0_et.json.gz"))
    at.text_input(key="path_name").input("ddp0")
    at.button(key="load_path").click()
    at.run()
    _ok(at)
    at = _page(at, "replay")
    assert at.selectbox(key="replay_trace").value == "ddp0"
    at.number_input(key="replay_iters").set_value(1)
    at.number_input(key="replay_warmup").set_value(0)
    at.button(key="run_replay").click()
    at.run()
    _ok(at)
    _wait_runs(at, 1)
    hints = [shown(i.value) for i in at.info if "--mirror-rank 0 --world-size 2" in shown(i.value)]
    assert hints and "2-rank job" in hints[0] and "World size (processes) to 2" in hints[0], [i.value for i in at.info]


def test_explore_sql_box_queries_the_store_read_only(app, tmp_path):
    """Explore's SQL view (issue 22) answers through engine.trace.store.query: the counts per
    category equal the loader's, and a query naming a file outside the store is an error line."""
    from engine.trace import load

    at = _page(app, "explore")
    at.radio(key="explore_view").set_value("SQL")
    at.run()
    _ok(at)
    (res,) = [d.value for d in at.dataframe]  # the only table of this view
    paths = app.session_state["traces"]["sample:mlp"]["paths"]
    want = load(*paths).events["cat"].astype(str).value_counts()
    assert dict(zip(res["cat"], res["n"])) == want.to_dict()
    secret = tmp_path / "secret.csv"
    secret.write_text("a\n1\n")
    at.text_area(key="explore_sql").input(f"SELECT * FROM read_csv('{secret}')")
    at.run()
    _ok(at)
    assert any("Permission" in shown(e.value) for e in at.error)
    assert any("Permission" in e.value for e in at.error)


def test_default_export_folders_of_two_traces_differ(app):
    """Issue 32: the default export name "benchmark" was shared by every trace, so exporting one
    trace's benchmark overwrote another's. The folder carries a short hash of trace and spec."""
    from app import compose_bridge as bridge

    cnn = ROOT / "sample_traces" / "cnn"
    app.text_area(key="server_paths").input(f"{cnn / 'cnn_et.json.gz'}\n{cnn / 'cnn_kineto.json.gz'}")
    app.text_input(key="path_name").input("cnn")
    app.button(key="load_path").click()
    app.run()
    _ok(app)
    traces = app.session_state["traces"]
    spec = {"name": "benchmark", "segments": [], "batch_scale": 1.0}
    mlp = bridge.export_folder("benchmark", traces["sample:mlp"]["hash"], spec)
    other = bridge.export_folder("benchmark", traces["cnn"]["hash"], spec)
    assert mlp != other and mlp.startswith("benchmark-") and other.startswith("benchmark-")
    assert bridge.export_folder("benchmark", traces["sample:mlp"]["hash"], dict(spec)) == mlp  # stable
    assert bridge.export_folder("benchmark", traces["sample:mlp"]["hash"], {**spec, "batch_scale": 2.0}) != mlp


def test_a_job_folder_loads_and_says_its_rank_count(app, tmp_path):
    """Issue 32: a job folder (ETs and Kineto traces in two subfolders) failed with "folder holds
    0 '_et.json' files", and a loaded multi-rank job never said how many ranks it holds."""
    import shutil

    ddp = ROOT / "sample_traces" / "ddp"
    job = tmp_path / "job"
    for sub in ("et", "kineto"):
        (job / sub).mkdir(parents=True)
        for r in (0, 1):
            shutil.copy(ddp / f"ddp_rank{r}_{sub}.json.gz", job / sub / f"rank{r}.json.gz")
    app.text_area(key="server_paths").input(str(job))
    app.text_input(key="path_name").input("job")
    app.button(key="load_path").click()
    app.run()
    _ok(app)
    assert not app.error, [e.value for e in app.error]
    assert app.session_state["traces"]["job"]["kind"] == "execution_trace+kineto"
    metrics = {m.label: m.value for m in app.metric}
    assert metrics["ranks"] == "2"
