"""Timeline figure on real Kineto traces: µs-exact bars, WebGL segments for big traces, arrows."""

from __future__ import annotations

import numpy as np
import pytest

from engine.figures.timeline import TimelineView, prepare, timeline_figure


def load_shared(tmp_path_factory, shared, *rel):
    from engine.trace import load

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MYSTIQUE_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
        return load(*(shared / r for r in rel))


@pytest.fixture(scope="module")
def simple(shared_traces, tmp_path_factory):
    return load_shared(
        tmp_path_factory,
        shared_traces,
        "hta_simple_add/benchmark_simple_add_et.json.gz",
        "hta_simple_add/benchmark_simple_add_trace.json.gz",
    )


@pytest.fixture(scope="module")
def control(shared_traces, tmp_path_factory):
    return load_shared(tmp_path_factory, shared_traces, "hta_trace_diff/control.json.gz")


def test_bars_are_microsecond_exact(simple):
    ev = simple.events
    fig = timeline_figure(ev)
    origin = float(ev["ts_us"].min())
    assert fig.layout.meta["origin_us"] == origin and fig.layout.meta["bars"] is True
    by_ev = ev.set_index("ev")
    seen = 0
    for tr in fig.data:
        assert tr.type == "bar" and tr.orientation == "h"
        ids = np.asarray(tr.customdata)
        np.testing.assert_array_equal(np.asarray(tr.base), by_ev.loc[ids, "ts_us"].to_numpy() - origin)
        np.testing.assert_array_equal(np.asarray(tr.x), by_ev.loc[ids, "dur_us"].to_numpy())
        seen += len(ids)
    assert seen == len(ev)  # every X event drawn once


def test_kernels_sit_on_gpu_stream_lanes(simple):
    laid = prepare(simple.events)
    kernels = laid[laid["cat"].astype(str) == "kernel"]
    assert len(kernels) == 4  # MANIFEST: 4 kernels
    assert kernels["lane"].str.startswith("GPU ").all()
    assert laid[laid["cat"].astype(str) == "cpu_op"]["lane"].str.startswith("CPU ").all()


def test_window_and_min_duration_filter(simple):
    ev = simple.events
    origin = float(ev["ts_us"].min())
    span = float((ev["ts_us"] + ev["dur_us"]).max()) - origin
    view = TimelineView(start_us=span * 0.25, end_us=span * 0.75, min_dur_us=5.0)
    laid = prepare(ev, view)
    assert len(laid) > 0 and (laid["dur_us"] >= 5.0).all()
    assert ((laid["start_us"] + laid["dur_us"] >= span * 0.25) & (laid["start_us"] <= span * 0.75)).all()
    rel = ev["ts_us"] - origin
    expect = ev[(rel + ev["dur_us"] >= span * 0.25) & (rel <= span * 0.75) & (ev["dur_us"] >= 5.0)]
    assert sorted(laid["ev"]) == sorted(expect["ev"])


def test_nested_events_stack_in_sub_rows(simple):
    laid = prepare(simple.events)
    lane = laid[laid["lane"].str.startswith("CPU ")]
    top = lane[lane["sub"] == 0]
    # sub-row 0 events of one lane never overlap each other
    for _, part in top.groupby("lane"):
        s = part.sort_values("start_us")
        assert (s["start_us"].to_numpy()[1:] >= (s["start_us"] + s["dur_us"]).to_numpy()[:-1]).all()
    assert lane["sub"].max() >= 1


def test_flow_arrow_from_launch_to_its_kernel(simple):
    ev = simple.events
    launch = ev[ev["name"].astype(str) == "cudaLaunchKernel"].iloc[0]
    fig = timeline_figure(ev, flow_from=int(launch["ev"]))
    assert len(fig.layout.annotations) == 1
    arrow = fig.layout.annotations[0]
    kernel = ev[(ev["cat"].astype(str) == "kernel") & (ev["correlation"] == launch["correlation"])].iloc[0]
    origin = float(ev["ts_us"].min())
    assert arrow.ax == float(launch["ts_us"]) - origin and arrow.x == float(kernel["ts_us"]) - origin


def test_big_trace_uses_webgl_segments(control, manifest):
    ev = control.events
    assert len(ev) > 50_000
    fig = timeline_figure(ev)
    assert fig.layout.meta["bars"] is False
    assert all(tr.type == "scattergl" for tr in fig.data)
    n_segments = sum(len(tr.x) for tr in fig.data) // 3
    assert n_segments == len(ev)
    kernels = next(e for e in manifest if e["path"] == "hta_trace_diff/control.json.gz")["kernels"]
    ktrace = next(tr for tr in fig.data if tr.name == "kernel")
    assert len(ktrace.x) // 3 == kernels
    # segments start and end exactly at ts and ts + dur
    xs = np.asarray(ktrace.x, dtype=float)
    ids = np.asarray(ktrace.customdata)[0::3]
    by_ev = ev.set_index("ev").loc[ids]
    origin = float(ev["ts_us"].min())
    np.testing.assert_array_equal(xs[0::3], by_ev["ts_us"].to_numpy() - origin)
    np.testing.assert_array_equal(xs[1::3], xs[0::3] + by_ev["dur_us"].to_numpy())
    assert len(fig.to_json()) < 12e6  # payload stays a few MB
    # rows go downward as negative y: WebGL lines collapse on a reversed y axis (seen in chromium)
    assert fig.layout.yaxis.autorange != "reversed"
    ys = np.asarray(ktrace.y, dtype=float)
    assert np.nanmax(ys) <= 0 and ys[0] in set(fig.layout.yaxis.tickvals)  # kernels of one stream: lane row


def test_bad_view_rejected():
    with pytest.raises(ValueError):
        TimelineView(min_dur_us=-1)
    with pytest.raises(ValueError):
        TimelineView(start_us=10, end_us=5)
