"""Every page has a size and time budget on real traces (issue 32: Explore's Analysis froze a tab
for minutes on a 37 MB critical-path figure).

Each page is rendered through Streamlit's AppTest with a big shared trace loaded; a page fails past
2 MB of figure payload (the plotly JSON of its charts, summed: what the browser must parse and
draw) or 5 s of server CPU time for one render (CPU time: the test runs in make test's parallel
pass). Every render takes seconds, so the test is marked `slow`: `make quick` leaves it out and
`make test` runs it on every shared Kineto trace, the three largest first.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest

ROOT = Path(__file__).resolve().parents[1]
MAIN = str(ROOT / "app" / "main.py")
PAYLOAD_LIMIT = 2 * 2**20
SERVER_S_LIMIT = 5.0

LARGEST = [
    "param_resnet/resnet_kineto.json.gz",  # 111,631 events
    "hta_trace_diff/control.json.gz",  # 109,123 events
    "kineto_resnet50_dataloader/nw0_worker0.pt.trace.json.gz",  # 82,276 events
]
OTHERS = [
    "hta_trace_diff/test.json.gz",
    "param_linear/linear_kineto.json.gz",
    "kineto_resnet50_dataloader/nw4_worker0.pt.trace.json.gz",
    "tracelens_mi300_resnet_ckpt/resnet_act_checkpoint.json.gz",
    "tracelens_timesformer/h100_timesformer.json.gz",
    "tracelens_timesformer/mi300_timesformer.json.gz",
    "tracelens_b200_eager/eager_trace.json.gz",
    "tracelens_bert_small/h100_bert_small.json.gz",
    "tracelens_mi300_bert_small/mi300_bert_small.json.gz",
    "tracelens_mi210_gpu_only/gpu_only_trace.json.gz",
    "tracelens_compile_triton/trace.json.gz",
    "hta_alexnet/benchmark_result_2869224_1695835535_trace.json.gz",
    "hta_amd_mi250/mi250_minitoy_train_ROCm6_2_kineto.json.gz",
    "hta_event_sync/event_sync_trace.json.gz",
    "hta_simple_add/benchmark_simple_add_trace.json.gz",
]


def _timed(at: AppTest) -> float:
    """The server's CPU seconds for one render: this process runs only the app (AppTest), and
    CPU time, unlike wall time, does not grow when another test shares the machine, so the
    bound holds in the parallel pass (a render here waits on nothing but its own work)."""
    t0 = time.process_time()
    at.run()
    took = time.process_time() - t0
    assert not at.exception, [e.value for e in at.exception]
    return took


def _payload(at: AppTest) -> dict[str, int]:
    return {c.proto.id.rsplit("-", 1)[-1]: len(c.proto.spec) for c in at.get("plotly_chart")}


def _walk(at: AppTest) -> dict[str, tuple[float, dict[str, int]]]:
    """(server s, chart key -> plotly JSON bytes) of each page and view, the big trace picked."""
    out = {}
    at.switch_page("../pages/traces.py")
    out["traces"] = (_timed(at), _payload(at))
    at.switch_page("../pages/explore.py")
    _timed(at)
    for view in ("Timeline", "Breakdown", "Analysis"):
        at.radio(key="explore_view").set_value(view)
        out[f"explore/{view}"] = (_timed(at), _payload(at))
    at.switch_page("../pages/whatif.py")
    out["whatif"] = (_timed(at), _payload(at))
    at.switch_page("../pages/compare.py")
    _timed(at)
    at.radio(key="cmp_mode").set_value("trace vs trace")
    _timed(at)
    at.selectbox(key="cmp_a").set_value("big")
    at.selectbox(key="cmp_b").set_value("sample:mlp")
    out["compare/trace vs trace"] = (_timed(at), _payload(at))
    return out


@pytest.mark.slow
@pytest.mark.parametrize("rel", [*LARGEST, *OTHERS], ids=lambda r: r.split("/")[-1])
def test_every_page_stays_within_its_budget(rel, shared_traces, tmp_path, monkeypatch, cache_dir):
    path = shared_traces / rel
    monkeypatch.setenv("MYSTIQUE_UI_DIR", str(tmp_path / "ui"))
    at = AppTest.from_file(MAIN, default_timeout=300)
    at.run()
    at.text_area(key="server_paths").input(str(path))
    at.text_input(key="path_name").input("big")
    at.button(key="load_path").click()
    _timed(at)
    assert "big" in at.session_state["traces"], [e.value for e in at.error]
    pages = _walk(at)
    over = {
        page: (round(s, 2), {k: v for k, v in charts.items() if v > 0})
        for page, (s, charts) in pages.items()
        if s > SERVER_S_LIMIT or sum(charts.values()) > PAYLOAD_LIMIT
    }
    worst = max(pages.items(), key=lambda kv: sum(kv[1][1].values()))
    print(
        f"{rel}: slowest {max(s for s, _ in pages.values()):.2f} CPU-s, largest {worst[0]} {sum(worst[1][1].values()):,} B"
    )
    assert not over, f"{rel}: pages over 2 MB of figures or 5 s: {over}"
    assert pages["explore/Analysis"][1].get("a_cp_fig"), "the critical path is drawn"
