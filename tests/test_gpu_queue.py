"""GPU queue length, launch delay, idle split and the GEMM table, against hand counts from the raw
JSON of the shared TimeSformer traces (H100 and MI300X: one program, two vendors)."""

from __future__ import annotations

import pytest

H100 = "tracelens_timesformer/h100_timesformer.json.gz"
MI300 = "tracelens_timesformer/mi300_timesformer.json.gz"


@pytest.fixture(scope="module")
def h100(load_shared):
    return load_shared(H100)


def test_queue_length_and_launch_delay_at_a_hand_counted_launch(h100):
    """Launch 101 in time order (correlation 122600, a cudaLaunchKernel at 1420179714047.801): in
    the raw JSON, 60 GPU tasks on stream 7 were launched before it and end after it; its kernel
    starts at 1420179734990.058, 20942.257 µs after the call."""
    from engine.analysis.gpu_queue import launches, stream_summary

    lz = launches(h100.events)
    assert len(lz) == 534  # 446 kernels + 86 memsets + 2 memcpys, each with its launch call
    row = lz[(lz["launch_ts_us"] - 1420179714047.801).abs() < 1e-3].iloc[0]
    assert row["launch"] == "cudaLaunchKernel"
    assert row["queue_len"] == 60
    assert row["launch_delay_us"] == pytest.approx(20942.257, abs=1e-3)
    s = stream_summary(lz)
    assert s["stream"].tolist() == [7] and s["tasks"].tolist() == [534]


def test_idle_split_and_the_kernel_the_gpu_waited_for(h100):
    """The largest idle gap of the H100 (raw JSON: the union of GPU tasks): 573.341 µs from
    1420179706735.457, ended by a Memset whose cudaMemsetAsync started at 1420179707269.913, so
    534.456 µs of it the host had not launched yet (host wait) and the rest is kernel wait."""
    from engine.analysis.gpu_queue import idle_gaps, idle_split, waited_for

    gaps = idle_gaps(h100.events)
    top = waited_for(gaps, 3).iloc[0]
    assert top["next_task"] == "Memset (Device)" and top["launch"] == "cudaMemsetAsync"
    assert top["idle_us"] == pytest.approx(573.341, abs=1e-3)
    assert top["host_wait_us"] == pytest.approx(534.456, abs=1e-3)
    assert top["kernel_wait_us"] == pytest.approx(573.341 - 534.456, abs=2e-3)
    tot = idle_split(gaps)
    assert tot["unlinked_us"] == 0.0
    assert tot["host_wait_us"] + tot["kernel_wait_us"] == pytest.approx(tot["idle_us"], abs=1e-2)
    assert 0 < tot["host_wait_us"] < tot["idle_us"]


def test_gemm_flops_from_input_dims_and_share_of_h100_peak(h100):
    """aten::addmm with Input Dims [[3072], [25089, 768], [768, 3072]]: 2 x 25089 x 768 x 3072 =
    118,384,754,688 FLOPs per call; the raw JSON has 12 such calls, whose launches (same thread,
    inside the op) start 12 sm90_xmma_gemm_bf16 kernels summing 1967.479 µs. H100's dense bf16 peak
    is 989.4 TFLOP/s."""
    from engine.analysis.gemm import gemm_table

    tab, head = gemm_table(h100)
    assert head["device"] == "H100" and head["default_dtype"] == "bf16"
    row = tab[tab["input_dims"] == "[[3072], [25089, 768], [768, 3072], [], []]"].iloc[0]
    flops = 2 * 25089 * 768 * 3072
    assert row["op"] == "aten::addmm" and row["calls"] == 12 and row["dtype"] == "bf16"
    assert row["gflops_per_call"] == pytest.approx(flops / 1e9)
    assert row["dur_us"] == pytest.approx(1967.479, abs=1e-3)
    tflops = 12 * flops / 1967.479 / 1e6
    assert row["tflops_s"] == pytest.approx(tflops, rel=1e-6)
    assert row["peak_share"] == pytest.approx(tflops / 989.4, rel=1e-6)
    assert set(tab["class"]) <= {"gemm", "attention"}


def test_gemm_table_on_mi300x_counts_the_same_ops(load_shared):
    """The same program on MI300X (hipBLASLt `Cijk_` kernels): the same op and dims give the same
    FLOPs per call, and the peak is MI300X's."""
    from engine.analysis.gemm import gemm_table

    tab, head = gemm_table(load_shared(MI300))
    assert head["device"] == "MI300X"
    row = tab[tab["input_dims"] == "[[3072], [25089, 768], [768, 3072], [], []]"].iloc[0]
    assert row["calls"] == 12 and row["gflops_per_call"] == pytest.approx(2 * 25089 * 768 * 3072 / 1e9)
    assert row["kernel"].startswith("Cijk_")
    assert 0 < row["peak_share"] < 1


def test_info_json_carries_the_gpu_analyses(shared_traces, capsys, cache_dir):
    """`mystique info --json` on the H100 trace: the new keys hold the hand-counted figures."""
    import json

    from engine.cli.main import main

    assert main(["info", "--json", str(shared_traces / H100)]) == 0
    o = json.loads(capsys.readouterr().out)
    assert [(s["stream"], s["tasks"]) for s in o["gpu_streams"]] == [(7, 534)]
    assert o["gpu_waited_for"][0]["host_wait_us"] == pytest.approx(534.456, abs=1e-3)
    idle = o["gpu_idle"]
    assert idle["host_wait_us"] + idle["kernel_wait_us"] + idle["unlinked_us"] == pytest.approx(
        idle["idle_us"], abs=0.01
    )
    assert o["gemm"]["device"] == "H100"
    row = next(r for r in o["gemm"]["rows"] if r["input_dims"] == "[[3072], [25089, 768], [768, 3072], [], []]")
    assert row["calls"] == 12 and row["gflops_per_call"] == pytest.approx(2 * 25089 * 768 * 3072 / 1e9, abs=1e-4)


@pytest.mark.slow
def test_explore_analysis_shows_the_gpu_views_with_csv_downloads(shared_traces, tmp_path, monkeypatch, cache_dir):
    """Explore → Analysis on the H100 trace: the queue figure (bounded), the GEMM table holding the
    hand-counted addmm row, and a CSV download under every table."""
    pytest.importorskip("streamlit")
    from pathlib import Path

    from streamlit.testing.v1 import AppTest

    monkeypatch.setenv("MYSTIQUE_UI_DIR", str(tmp_path / "ui"))
    at = AppTest.from_file(str(Path(__file__).resolve().parents[1] / "app" / "main.py"), default_timeout=120)
    at.run()
    at.text_area(key="server_paths").input(str(shared_traces / H100))
    at.text_input(key="path_name").input("h100")
    at.button(key="load_path").click()
    at.run()
    at.switch_page("../pages/explore.py")
    at.run()
    at.radio(key="explore_view").set_value("Analysis")
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    charts = {c.proto.id.rsplit("-", 1)[-1]: len(c.proto.spec) for c in at.get("plotly_chart")}
    assert 0 < charts["a_gpu_queue"] < 2 * 2**20
    at.toggle(key="a_gpu_gemm_on").set_value(True)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    gemm = next(d.value for d in at.dataframe if "gflops_per_call" in d.value.columns)
    assert (gemm["input_dims"] == "[[3072], [25089, 768], [768, 3072], [], []]").any()
    keys = {b.proto.id.rsplit("-", 1)[-1] for b in at.get("download_button")}
    assert {"a_gpu_streams_csv", "a_gpu_launches_csv", "a_gpu_waited_csv", "a_gpu_gemm_csv"} <= keys, keys


@pytest.mark.parametrize(
    "rel",
    [
        "hta_trace_diff/control.json.gz",  # A100, CUTLASS tensorop_s1688gemm: float inputs on tensor cores (TF32)
        "tracelens_b200_eager/eager_trace.json.gz",  # B200, cuBLAS nvjet_tst (TF32)
        "hta_trace_diff/test.json.gz",  # V100: sgemm, fp32
        MI300,
    ],
    ids=lambda r: r.split("/")[-1],
)
@pytest.mark.slow
def test_no_gemm_beats_its_device_peak(load_shared, rel):
    """A physical bound: achieved TFLOP/s never exceeds the device's dense peak for the kernel's
    dtype. Float GEMMs that ran on TF32 tensor cores were held to the fp32 peak (5.7x over it)
    until the kernel-name dtype hints knew `tensorop_s1688gemm` and `nvjet_tst`."""
    from engine.analysis.gemm import gemm_table

    tab, head = gemm_table(load_shared(rel))
    assert head["device"] is not None and len(tab) > 0
    assert (tab["peak_share"] > 0).all() and (tab["peak_share"] <= 1.0).all(), tab[tab["peak_share"] > 1]


@pytest.mark.parametrize(
    "rel", ["tracelens_bert_small/h100_bert_small.json.gz", "tracelens_mi300_bert_small/mi300_bert_small.json.gz"]
)
def test_attention_flops_from_the_sdpa_input_dims(load_shared, rel):
    """BERT-small on H100 and MI300X (identical input dims): the raw JSON has 4
    aten::_scaled_dot_product_flash_attention calls with Input Dims [1, 8, 141, 64] for Q, K and V:
    4 x B x H x L x S x E = 4 x 1 x 8 x 141 x 141 x 64 = 40,716,288 FLOPs each (QK^T and PV). On the
    H100 their 4 flash_fwd kernels sum to 37.408 µs (hand-summed)."""
    from engine.analysis.gemm import gemm_table

    tab, _ = gemm_table(load_shared(rel))
    att = tab[tab["class"] == "attention"]
    assert len(att) == 1
    row = att.iloc[0]
    assert row["calls"] == 4 and row["gflops_per_call"] == pytest.approx(4 * 8 * 141 * 141 * 64 / 1e9)
    if rel.startswith("tracelens_bert_small"):
        assert row["dur_us"] == pytest.approx(37.408, abs=1e-3)
        assert row["tflops_s"] == pytest.approx(4 * 4 * 8 * 141 * 141 * 64 / 37.408 / 1e6, rel=1e-6)
