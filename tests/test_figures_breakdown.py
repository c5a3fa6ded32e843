"""Breakdown tables/figures and comparison figures on real traces (golden counts from MANIFEST)."""

from __future__ import annotations

import numpy as np
import pytest

from engine.analysis import selftime
from engine.figures import breakdown
from engine.figures import compare as cfig
from engine.trace.vocab import GPU_CATS


@pytest.fixture(scope="module")
def alexnet(load_shared):
    return load_shared("hta_alexnet/benchmark_result_2869224_1695835535_trace.json.gz")


def _golden(manifest, path):
    return next(e for e in manifest if e["path"] == path)


def test_time_by_operator_and_kernel_sum_the_events(alexnet, manifest):
    g = _golden(manifest, "hta_alexnet/benchmark_result_2869224_1695835535_trace.json.gz")
    ev = alexnet.events
    ops = selftime.time_by(ev, "cpu_op")
    assert ops["count"].sum() == g["cpu_ops"]
    assert ops["total_us"].sum() == pytest.approx(ev[ev["cat"].astype(str) == "cpu_op"]["dur_us"].sum())
    assert (ops["self_us"].diff().dropna() <= 0).all()  # largest self time first
    assert ops["self_us"].sum() <= ops["total_us"].sum() + 1e-6
    kernels = selftime.time_by(ev, "kernel")
    assert kernels["count"].sum() == g["kernels"]
    fig = breakdown.bar_figure(kernels, "name", top=5)
    assert len(fig.data[0].y) == 5 and fig.data[0].x[-1] == kernels["self_us"].iloc[0]  # largest on top
    assert fig.data[0].hovertext[-1] == kernels["name"].iloc[0]  # the whole name in the hover


def test_gpu_idle_is_span_minus_union_of_busy(alexnet):
    idle = selftime.gpu_idle(alexnet.events)
    assert len(idle) >= 1
    ev = alexnet.events
    k = ev[ev["cat"].astype(str).isin(GPU_CATS)]
    assert idle["events"].sum() == len(k)
    for _, r in idle.iterrows():
        part = k[(k["pid"].astype(str) == r["gpu"]) & (k["tid"].astype(str) == r["stream"])]
        s, e = part["ts_us"].to_numpy(), (part["ts_us"] + part["dur_us"]).to_numpy()
        assert r["span_us"] == pytest.approx(e.max() - s.min())
        assert r["busy_us"] <= part["dur_us"].sum() + 1e-6  # overlaps counted once
        assert r["idle_us"] == pytest.approx(r["span_us"] - r["busy_us"])
    assert breakdown.idle_figure(idle).data[0].name == "busy"


def test_op_time_and_top_ops_on_a_linked_trace(simple_add):
    ops = simple_add.ops
    by_cat = selftime.op_time_by(ops, "category")
    leaves = ops[ops["n_children"] == 0]
    assert by_cat["total_us"].sum() == pytest.approx(leaves["k_dur_us"].fillna(0).sum())
    top = selftime.top_ops(ops, 5)
    col = "gpu_dur_us" if ops["gpu_dur_us"].fillna(0).gt(0).any() else "k_dur_us"
    own = selftime.op_self_us(ops, col)
    ann = ops["category"].astype(str).to_numpy() == "annotation"
    assert list(top["self_us"]) == sorted(own[~ann & (own > 0)], reverse=True)[:5]  # self time, no annotations
    assert "annotation" not in set(top["category"].astype(str))


def test_compare_figures(alexnet, simple_add):
    fig = cfig.aligned_timelines(alexnet.events, simple_add.events, ("alexnet", "simple"))
    assert {tr.xaxis for tr in fig.data} == {"x", "x2"} and fig.layout.xaxis.matches == "x2"
    first_row = [tr for tr in fig.data if tr.xaxis == "x"]
    assert sum(len(tr.x) for tr in first_row) == len(alexnet.events)
    from engine.compare import compare

    diff = compare(alexnet, simple_add, labels=("alexnet", "simple"))
    bars = cfig.time_by_bars(diff.by_category, "cat", "dur_us_a", "dur_us_b", ("alexnet", "simple"))
    assert [tr.name for tr in bars.data] == ["alexnet", "simple"]
    curves = {"u": np.linspace(0, 1, 5), "cpu_util_pct_original": np.ones(5), "cpu_util_pct_replay": np.zeros(5)}
    import pandas as pd

    m = cfig.metric_curves(pd.DataFrame(curves))
    assert len(m.data) == 2 and m.layout.annotations[0].text == "process CPU util (%)"
    assert cfig.metric_curves(pd.DataFrame({"u": []})).layout.title.text.startswith("no metric")
