"""UI journeys through Streamlit's AppTest: timeline tooltips, a big trace's timeline, the graph
hierarchy, a session surviving reload and restart, replays in workers, the compare window, the
embedding-sharding report, the analysis views and the explore prefetch. Written for issue 13's
numbered problems (the browser-only one, problem 8, is in tests/test_e2e_browser.py; tests are
named p<N> after them); each failed on main at 4eb7f39, and the docstrings say why."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from mdtext import shown

pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest

ROOT = Path(__file__).resolve().parents[1]
MAIN = str(ROOT / "app" / "main.py")
MLP = ROOT / "sample_traces" / "mlp"


def _ok(at):
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]


def _new(ui_dir: Path) -> AppTest:
    if not (MLP / "mlp_et.json.gz").exists():
        pytest.skip("bundled mlp sample missing (make samples)")
    os.environ["MYSTIQUE_UI_DIR"] = str(ui_dir)
    at = AppTest.from_file(MAIN, default_timeout=300)
    at.run()
    _ok(at)
    return at


@pytest.fixture()
def ui(tmp_path, monkeypatch, cache_dir):
    monkeypatch.setenv("MYSTIQUE_UI_DIR", str(tmp_path / "ui"))
    monkeypatch.delenv("MYSTIQUE_WORKSPACE", raising=False)
    return tmp_path / "ui"


def _page(at, name):
    at.switch_page(f"../pages/{name}.py")
    at.run()
    _ok(at)
    return at


def _load(at, paths: list[Path], name: str):
    at = _page(at, "traces")
    at.text_area(key="server_paths").input("\n".join(str(p) for p in paths))
    at.text_input(key="path_name").input(name)
    at.button(key="load_path").click()
    at.run()
    _ok(at)
    return at


def _chart(at, key: str) -> dict:
    c = next(c for c in at.get("plotly_chart") if c.proto.id.endswith(key))
    return json.loads(c.proto.spec)


def test_p2_timeline_tooltip_shows_duration_on_explore_and_compose(ui):
    """4eb7f39: hovertemplate 'dur %{x}' (a horizontal bar's x on hover is its end)."""
    import engine.trace as et

    at = _page(_new(ui), "explore")
    at.radio(key="explore_view").set_value("Timeline")
    at.run()
    _ok(at)
    trace = et.load(MLP / "mlp_et.json.gz", MLP / "mlp_kineto.json.gz")
    dur = trace.events.set_index("ev")["dur_us"]
    for page, key in (("explore", "explore_timeline"), ("compose", "compose_timeline")):
        if page == "compose":
            at = _page(at, "compose")
        fig = _chart(at, key)
        bars = [t for t in fig["data"] if t.get("type") == "bar" and t.get("name") != "grouped short events"]
        assert bars
        for t in bars:
            assert "%{x" not in t["hovertemplate"] and "dur %{customdata[1]" in t["hovertemplate"]
            for row in t["customdata"][:50]:
                assert row[1] == pytest.approx(float(dur.loc[int(row[0])]))


def test_p3_big_trace_timeline_is_one_interactive_bar_timeline(ui, shared_traces):
    """4eb7f39: >4,000 events became WebGL lines (no names, no click/box select, y zoom)."""
    f = shared_traces / "hta_trace_diff" / "control.json.gz"
    at = _load(_new(ui), [f], "control")
    at = _page(at, "explore")
    at.radio(key="explore_view").set_value("Timeline")
    at.run()
    _ok(at)
    _lo, _hi = at.slider(key="t_window").value
    at.slider(key="t_window").set_value((0.0, at.slider(key="t_window").max))  # the whole trace
    at.run()
    _ok(at)
    fig = _chart(at, "explore_timeline")
    # bars only (no WebGL), besides the launch lines: one SVG path from drawn kernels to launches
    assert {t["type"] for t in fig["data"] if t["name"] != "launch → kernel"} == {"bar"}
    assert all(t["type"] == "scatter" for t in fig["data"] if t["name"] == "launch → kernel")
    meta = fig["layout"]["meta"]
    import engine.trace as et

    n_events = len(et.load(f).events)
    assert n_events > 70_000  # 109k trace records, of which 75k are duration events
    assert meta["drawn"] + meta["grouped"] == n_events  # every event: drawn, or in a grouped bar
    assert fig["layout"]["yaxis"]["fixedrange"] is True and fig["layout"]["dragmode"] == "zoom"
    aggregate = ("grouped short events", "GPU busy (merged kernels)", "launch → kernel")
    assert all(t.get("textposition") == "inside" for t in fig["data"] if t["name"] not in aggregate)
    # search by name: hits are listed and highlighted
    at.text_input(key="t_search").input("ncclKernel|Memcpy")
    at.run()
    _ok(at)
    assert "matches" in at.selectbox(key="t_jump").label
    n = int(at.selectbox(key="t_jump").label.split()[0].replace(",", ""))
    assert n > 0
    at.selectbox(key="t_jump").set_value(0)
    at.run()
    _ok(at)
    w = at.slider(key="t_window").value
    assert w[1] - w[0] < 0.5 * at.slider(key="t_window").max  # jumped to a narrow window
    fig = _chart(at, "explore_timeline")
    assert fig["layout"]["meta"]["grouped"] == 0 or fig["layout"]["meta"]["drawn"] > 0


@pytest.mark.perf  # also bounds a drill-down step's wall time
def test_p4_graph_is_a_readable_hierarchy_on_resnet(ui, shared_traces):
    """4eb7f39: a flat 600/1500-node Scattergl tangle without labels, different budgets on
    Explore and Compose, no search or drill-down (no `explore_graph_search` widget)."""
    from engine.figures.hierarchy import NODE_BUDGET

    d = shared_traces / "param_resnet"
    at = _load(_new(ui), [d / "resnet_et.json.gz", d / "resnet_kineto.json.gz"], "resnet")
    at = _page(at, "explore")
    fig = _chart(at, "explore_graph")
    nodes = [t for t in fig["data"] if "markers" in t.get("mode", "") and t.get("customdata")]
    n_nodes = sum(len(t["customdata"]) for t in nodes)
    # exactly the engine's top-level hierarchy of the whole trace, within the shared budget
    from engine.figures.hierarchy import build_hierarchy_model
    from engine.graph import data_deps
    from engine.trace import load

    tr = load(d / "resnet_et.json.gz", d / "resnet_kineto.json.gz")
    model = build_hierarchy_model(tr.ops, data_deps(tr), None, NODE_BUDGET)
    assert n_nodes == len(model.nodes), (n_nodes, len(model.nodes))
    assert n_nodes <= NODE_BUDGET, n_nodes
    # golden: the ResNet ET records two threads (ops with tid 1 and 2; tid 0 is the root), so the
    # top level is one group per thread, labelled with its op count
    assert sorted(int(t) for t in tr.ops["tid"].unique() if t > 0) == [1, 2]
    assert model.nodes["label"].tolist() == ["thread 1 (1194)", "thread 2 (2511)"]
    assert sorted(x for t in nodes for x in t["text"]) == ["thread 1 (1194)", "thread 2 (2511)"]
    assert all(t.get("text") for t in nodes)  # labelled
    crumbs = [b for b in at.button if b.key and b.key.startswith("explore_graph_crumb_")]
    assert len(crumbs) >= 2
    # drill into the biggest group: fewer ops per node, a longer breadcrumb
    focus = next(k for t in nodes for k in t["customdata"] if isinstance(k, str) and k.startswith("tree:"))
    at.session_state["graph_focus"] = {"resnet|0": focus}
    t0 = time.perf_counter()
    at.run()
    warm_s = time.perf_counter() - t0
    _ok(at)
    crumbs2 = [b for b in at.button if b.key and b.key.startswith("explore_graph_crumb_")]
    assert len(crumbs2) > len(crumbs)
    assert warm_s < 5.0  # a drill-down step on the 14k-node trace (the model alone is ~0.2 s)
    # search rings the groups holding a match
    at.text_input(key="explore_graph_search").input("conv")
    at.run()
    _ok(at)
    fig = _chart(at, "explore_graph")
    assert any(t.get("name") == "search hits" for t in fig["data"])
    # Compose draws the same graph with the same budget
    at.session_state["graph_focus"] = {}
    at = _page(at, "compose")
    fig_c = _chart(at, "compose_graph")
    n_c = sum(len(t["customdata"]) for t in fig_c["data"] if "markers" in t.get("mode", "") and t.get("customdata"))
    assert n_c == n_nodes


def _wait_job(ui: Path, n: int) -> dict:
    from engine.workspace import Catalog, JobRunner

    cat = Catalog(ui / "workspace")
    jobs = cat.jobs(kind="replay")
    return JobRunner(cat).wait(jobs[n - 1]["id"], timeout_s=300)


@pytest.mark.slow
def test_p5_session_survives_reload_and_restart(ui):
    """4eb7f39: a new session (reload/restart) had only the bundled sample; settings reset
    across pages; nothing was written to a workspace."""
    at = _new(ui)
    at = _load(at, [MLP / "mlp_et.json.gz", MLP / "mlp_kineto.json.gz"], "mine")
    at = _page(at, "replay")
    at.number_input(key="replay_iters").set_value(3)
    at.run()
    at = _page(at, "explore")
    at = _page(at, "replay")
    assert at.number_input(key="replay_iters").value == 3  # kept across pages
    at.button(key="run_replay").click()
    at.run()
    _ok(at)
    at.session_state["selection"] = {"trace": "mine", "ids": [5, 6], "source": "graph"}
    at = _page(at, "compose")
    at.checkbox(key="compose_use_explore").check()
    at.run()
    at.button(key="compose_add").click()
    at.run()
    _ok(at)
    assert _wait_job(ui, 1)["status"].value == "done"

    again = _new(ui)  # a reload: a new session on the same workspace
    assert "mine" in again.session_state["traces"] and again.session_state["current"] == "mine"
    assert len(again.session_state["specs"]["mine"]["segments"]) == 1
    assert again.session_state["selection"]["ids"] == [5, 6]
    again = _page(again, "replay")
    assert again.number_input(key="replay_iters").value == 3
    runs = next(d.value for d in again.dataframe if "peak_rss_mb" in d.value.columns)
    assert len(runs) == 1  # the run is listed again
    assert "median ms / iteration" in {m.label for m in again.metric}
    assert (ui / "workspace" / "catalog.sqlite").exists()


@pytest.mark.slow
def test_p6_replays_run_in_workers_with_progress_cancel_and_queue(ui):
    """4eb7f39: the replay ran inside the page script (blocking, no cancel, no queue, the
    server's RSS); there was no job catalog."""
    from engine.workspace import Catalog, JobStatus

    at = _page(_new(ui), "replay")
    at.number_input(key="replay_iters").set_value(3)
    at.number_input(key="replay_warmup").set_value(0)
    for _ in range(3):
        at.button(key="run_replay").click()
        at.run()
        _ok(at)
    cat = Catalog(ui / "workspace")
    jobs = cat.jobs(kind="replay")
    assert [j["status"] for j in jobs].count(JobStatus.QUEUED) >= 1  # several queued behind one
    assert jobs[0]["pid"] and jobs[0]["pid"] != os.getpid()  # a worker process, not the server
    cancel = [b for b in at.button if b.key and b.key.startswith("cancel_")]
    assert cancel
    last = jobs[-1]["id"]
    at.button(key=f"cancel_{last}").click()
    at.run()
    assert cat.job(last)["status"] == JobStatus.CANCELLED
    at = _page(at, "explore")  # leaving the page does not stop the running job
    first = _wait_job(ui, 1)
    assert first["status"] == JobStatus.DONE, first.get("error")
    assert first["summary"]["worker_peak_rss_mb"] > 0
    seen_progress = first["message"] == "done" and first["fraction"] == 1.0
    assert seen_progress
    second = _wait_job(ui, 2)
    assert second["status"] == JobStatus.DONE  # the queue went on by itself
    assert cat.job(last)["status"] == JobStatus.CANCELLED


def test_p9_compare_window_self_time_names_legends(ui, shared_traces):
    """4eb7f39: the window did not set the axis range, bars summed inclusive time (nested ops
    counted once per ancestor), names were cut at 60 characters, legends sat under the toolbar."""
    f = next((shared_traces / "hta_alexnet").glob("*.json.gz"))
    at = _load(_new(ui), [f], "alexnet")
    at = _page(at, "compare")
    at.radio(key="cmp_mode").set_value("trace vs trace")
    at.run()
    at.selectbox(key="cmp_a").set_value("alexnet")
    at.selectbox(key="cmp_b").set_value("sample:mlp")
    at.number_input(key="tt_window").set_value(5000.0)
    at.run()
    _ok(at)
    tl = _chart(at, "tt_timelines")
    assert tl["layout"]["xaxis"]["range"] == [0.0, 5000.0]
    by_name = _chart(at, "tt_name")
    labels = [y.replace("<br>", "") for y in by_name["data"][0]["y"]]
    assert labels == by_name["data"][0]["customdata"]  # every drawn name is whole (wrapped, not cut)
    from engine.figures.compare import wrap_label

    long = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>"
    assert wrap_label(long).replace("<br>", "") == long and "<br>" in wrap_label(long)
    assert by_name["layout"]["legend"]["xanchor"] == "left"
    import engine.trace as et
    from engine.analysis.selftime import self_time

    ev = et.load(f).events
    cpu = ev[ev["cat"].astype(str) == "cpu_op"]
    selfs = self_time(cpu)
    lane_span = (cpu["ts_us"] + cpu["dur_us"]).max() - cpu["ts_us"].min()
    assert selfs.sum() <= lane_span * cpu["tid"].nunique() + 1e-6 < cpu["dur_us"].sum()
    cat = _chart(at, "tt_cat")
    assert "Self time" in cat["layout"]["title"]["text"]


@pytest.mark.slow
def test_p7_embedding_sharding_says_what_it_drops_and_shows_every_rank(ui):
    """4eb7f39: picked non-embedding ops vanished silently, only rank 0 was shown, and the
    export folder kept the first benchmark name typed."""
    dlrm = ROOT / "sample_traces" / "dlrm"
    if not (dlrm / "dlrm_et.json.gz").exists():
        pytest.skip("bundled dlrm sample missing")
    import engine.trace as et
    from engine.graph import replay_ops

    at = _load(_new(ui), [dlrm / "dlrm_et.json.gz", dlrm / "dlrm_kineto.json.gz"], "dlrm")
    ids = [int(i) for i in replay_ops(et.load(dlrm / "dlrm_et.json.gz"))]
    at.session_state["selection"] = {"trace": "dlrm", "ids": ids, "source": "table"}
    at = _page(at, "compose")
    at.checkbox(key="compose_use_explore").check()
    at.run()
    at.button(key="compose_add").click()
    at.run()
    tk = at.session_state["traces"]["dlrm"]["hash"][:12] + ".0"  # compose widgets: keyed per trace content
    at.selectbox(key=f"compose_sharding:{tk}").set_value("embedding")
    at.run()
    at.selectbox(key=f"compose_plan:{tk}").set_value("greedy")
    at.number_input(key=f"compose_ranks:{tk}").set_value(4)
    at.text_input(key=f"compose_name:{tk}").input("dlrm emb4")
    at.run()
    _ok(at)
    warn = " ".join(shown(w.value) for w in at.warning)
    assert "not in the per-rank benchmarks" in warn and "aten::linear" in warn
    ranks = next(d.value for d in at.dataframe if "est. embedding µs" in d.value.columns)
    assert list(ranks["rank"]) == [0, 1, 2, 3] and ranks["est. embedding µs"].gt(0).all()
    assert at.selectbox(key="compose_show_rank").options == ["0", "1", "2", "3"]
    at.selectbox(key="compose_show_rank").set_value(3)
    at.run()
    _ok(at)
    assert "rank 3" in " ".join(e.label for e in at.expander)
    assert any("dlrm_emb4" in shown(c.value) for c in at.caption)  # export folder named after the benchmark


def test_analysis_views_breakdown_kernels_critical_path_ranks_metrics(ui):
    """Beyond the numbered problems: per-rank temporal breakdown, kernel table, critical path,
    ranks side by side with a straggler, metric curves under the timeline."""
    ddp = ROOT / "sample_traces" / "ddp"
    files = sorted(ddp.glob("ddp_rank*_kineto.json.gz")) if ddp.is_dir() else []
    if len(files) < 2:
        pytest.skip("2-rank ddp sample missing")
    at = _load(_new(ui), files, "ddp")
    at = _page(at, "explore")
    at.radio(key="explore_view").set_value("Analysis")
    at.run()
    _ok(at)
    tb = next(d.value for d in at.dataframe if "exposed_communication_ms" in d.value.columns)
    assert list(tb["rank"]) == [0, 1]
    parts = tb["compute_ms"] + tb["exposed_communication_ms"] + tb["idle_ms"]
    assert (parts - tb["step_ms"]).abs().max() <= 0.005 * tb["step_ms"].max()  # the parts make up the step
    assert (tb["communication_ms"] > 0).all()  # gloo collectives of the ddp sample
    kernels = next(d.value for d in at.dataframe if "share_pct" in d.value.columns)
    assert kernels["share_pct"].sum() == pytest.approx(100.0) and (kernels["calls"] > 0).all()
    metrics = {m.label: m.value for m in at.metric}
    step, path = (
        float(metrics["step ms (simulated, unchanged)"].replace(",", "")),
        float(metrics["critical path ms"].replace(",", "")),
    )
    assert path == pytest.approx(step, rel=5e-3) and metrics["ranks on it"] == "0, 1"
    assert any(c.proto.id.endswith("a_cp_fig") for c in at.get("plotly_chart"))
    strag = next(d.value for d in at.dataframe if "held_others_ms" in d.value.columns)
    assert len(strag) == 2 and strag["straggler"].sum() == 1
    assert any(c.proto.id.endswith("a_rank_timelines") for c in at.get("plotly_chart"))
    # metric curves under the timeline (the mlp sample's capture meta has samples)
    at.selectbox(key="explore_trace").set_value("sample:mlp")
    at.radio(key="explore_view").set_value("Timeline")
    at.run()
    at.checkbox(key="t_metrics").check()
    at.run()
    _ok(at)
    fig = _chart(at, "explore_timeline")
    assert any(t.get("name") == "CPU %" for t in fig["data"]) and fig["layout"].get("xaxis2")


def test_explore_views_are_prefetched_and_reruns_recompute_nothing(ui, monkeypatch):
    """Responsiveness (issue 13 goal: first Explore render < 3 s cold, < 1 s warm): after a load
    the first graph and timeline views are built in the background, so opening Explore builds
    nothing, and a timeline rerun (here a new duration filter) slices the trace's cached layout
    instead of laying 100k events out again. Before: both views were built inside the Explore
    run, and every window/filter change redid the whole layout (lane labels, a stack walk)."""
    import engine.figures.hierarchy as hier
    import engine.figures.timeline as tl
    from app import prefetch, views

    calls = {"model": 0, "layout": 0}
    real_model, real_layout = hier.build_hierarchy_model, tl.lay_out

    def model(*a, **k):
        calls["model"] += 1
        return real_model(*a, **k)

    def layout(*a, **k):
        calls["layout"] += 1
        return real_layout(*a, **k)

    monkeypatch.setattr(hier, "build_hierarchy_model", model)
    monkeypatch.setattr(tl, "lay_out", layout)
    monkeypatch.delenv("MYSTIQUE_PREFETCH", raising=False)
    for f in (views.hierarchy_model, views.hierarchy_fig, views.timeline_layout, views.timeline_fig):
        f.clear()
    at = _new(ui)  # the bundled sample is loaded: its views are prefetched
    assert prefetch.wait_idle(120)
    built = dict(calls)
    assert built == {"model": 1, "layout": 1}
    at = _page(at, "explore")
    assert _chart(at, "explore_graph")["data"]
    at.radio(key="explore_view").set_value("Timeline")
    at.run()
    _ok(at)
    assert _chart(at, "explore_timeline")["data"]
    assert calls == built  # both first renders came from the caches
    at.number_input(key="t_min_dur").set_value(5.0)
    at.run()
    _ok(at)
    assert _chart(at, "explore_timeline")["layout"]["title"]["text"] != ""
    assert calls == built  # a new filter: a slice of the cached layout, no new layout


@pytest.mark.slow
def test_replay_form_and_compare_picks_survive_a_reload_with_the_memory_estimate_shown(ui):
    """Issue 32: a reload reset the Replay form to "whole trace, World size 1", Compare forgot its
    mode and picks, and an 8-rank world was preset with no memory estimate before Run."""
    ddp = ROOT / "sample_traces" / "ddp"
    at = _new(ui)
    at = _load(at, sorted(ddp.glob("ddp_rank*.json.gz")), "ddp")
    at = _page(at, "replay")
    world = next(w for w in at.number_input if (w.key or "").startswith("replay_world:"))
    assert world.value == 2  # the recorded ranks
    captions = " ".join(c.value for c in at.caption)
    assert "Memory estimate: 2 ranks × up to" in captions and "GiB at once" in captions, captions
    assert not at.button(key="run_replay").disabled
    world.set_value(64)  # 64 torch processes at once fit no test machine: the CLI's refusal, Run disabled
    at.run()
    assert any("refused: 64 ranks need about" in e.value for e in at.error), [e.value for e in at.error]
    assert at.button(key="run_replay").disabled
    world = next(w for w in at.number_input if (w.key or "").startswith("replay_world:"))
    world.set_value(2)
    at.run()
    at = _page(at, "compare")
    at.radio(key="cmp_mode").set_value("trace vs trace")
    at.run()
    at.selectbox(key="cmp_a").set_value("ddp")
    at.selectbox(key="cmp_b").set_value("sample:mlp")
    at.run()
    _ok(at)

    again = _page(_new(ui), "compare")  # a reload: a new session on the same workspace
    assert again.radio(key="cmp_mode").value == "trace vs trace"
    assert (again.selectbox(key="cmp_a").value, again.selectbox(key="cmp_b").value) == ("ddp", "sample:mlp")
    again = _page(again, "replay")
    world = next(w for w in again.number_input if (w.key or "").startswith("replay_world:"))
    assert world.value == 2 and again.radio(key="replay_target").value == "whole trace"
