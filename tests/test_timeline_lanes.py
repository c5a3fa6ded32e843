"""Timeline lanes on the H100 TimeSformer trace (issue 32 item 7): full-depth thread rows, python
frames that fold away, GPU work that reads as busy at any zoom, labelled streams, launch lines.

Golden values come from the raw events (nesting counted by containment, busy time by summing
kernel durations), not from the layout code under test."""

from __future__ import annotations

import numpy as np
import pytest

from engine.figures.lanes import BUSY_NAME, FLOW_NAME, busy_spans
from engine.figures.timeline import TimelineView, default_window, lay_out, prepare, timeline_figure

H100 = "tracelens_timesformer/h100_timesformer.json.gz"


@pytest.fixture(scope="module")
def h100(load_shared):
    return load_shared(H100)


def _main_thread(ev):
    cpu = ev[~ev["cat"].astype(str).isin(["kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation"])]
    tid = cpu.groupby(["pid", "tid"]).size().idxmax()
    return cpu[(cpu["pid"] == tid[0]) & (cpu["tid"] == tid[1])]


def _containment_depth(t) -> int:
    """Deepest nesting of one thread's events: for each event, how many others contain it
    (sweep over starts; an O(n log n) count independent of the layout's stack walk)."""
    s = t["ts_us"].to_numpy(float)
    e = s + t["dur_us"].to_numpy(float)
    order = np.lexsort((-e, s))
    s, e = s[order], e[order]
    best, stack = 0, []
    for a, b in zip(s.tolist(), e.tolist()):
        while stack and stack[-1] <= a:
            stack.pop()
        best = max(best, len(stack))
        stack.append(b)
    return best


def test_thread_rows_are_full_depth(h100):
    """A thread with python stacks nests 50+ deep; rows past 6 were clamped onto row 6, so aten
    ops and runtime calls were drawn under python frames."""
    ev = h100.events
    thread = _main_thread(ev)
    deep = _containment_depth(thread)
    assert deep > 40  # python frames: recorded stacks
    laid = lay_out(ev)
    lane = laid[laid["ev"].isin(thread["ev"])]
    assert int(lane["sub"].max()) == deep
    # no two events of a row overlap: nothing is drawn over anything else
    for _, row in lane.groupby("sub"):
        r = row.sort_values("start_us")
        assert (r["start_us"].to_numpy()[1:] >= (r["start_us"] + r["dur_us"]).to_numpy()[:-1] - 1e-6).all()


def test_folding_python_frames_lifts_aten_ops(h100):
    ev = h100.events
    whole = prepare(ev)
    folded = prepare(ev, TimelineView(hide_python=True))
    assert not (folded["group"] == "python").any()
    assert set(folded["ev"]) == set(whole.loc[whole["group"] != "python", "ev"])
    aten = folded[folded["name"].astype(str).str.startswith("aten::")]
    under = whole.set_index("ev").loc[aten["ev"], "sub"]
    # each aten op sits at its depth among non-python events only: most rise by tens of rows
    assert float(np.median(under.to_numpy() - aten["sub"].to_numpy())) > 10
    thread = _main_thread(ev)
    assert int(folded.loc[folded["ev"].isin(thread["ev"]), "sub"].max()) == _containment_depth(
        thread[~thread["cat"].astype(str).str.startswith("python")]
    )


def test_a_folded_thread_keeps_its_top_level_row(h100):
    ev = h100.events
    whole = prepare(ev)
    lane = whole.loc[whole["sub"] > 10, "lane"].iloc[0]
    folded = prepare(ev, TimelineView(collapsed=(lane,)))
    mine = folded[folded["lane"] == lane]
    assert len(mine) == int(((whole["lane"] == lane) & (whole["sub"] == 0)).sum()) > 0
    assert (mine["sub"] == 0).all()
    others = whole[whole["lane"] != lane]
    assert set(others["ev"]) <= set(folded["ev"])  # other lanes untouched


def test_a_busy_gpu_reads_busy_at_the_whole_window(h100):
    """At the default (whole-run) window the GPU row was one grey 'grouped' bar; now its work is
    merged busy spans in the kernel colour, whose busy time is the kernels' (hand sum), and the
    stream's label says how busy it is."""
    ev = h100.events
    lo, hi = default_window(ev)
    fig = timeline_figure(ev, TimelineView(start_us=lo, end_us=hi))
    origin = float(ev["ts_us"].min())
    gpu = ev[ev["cat"].astype(str).isin(["kernel", "gpu_memcpy", "gpu_memset"])]
    rel = gpu["ts_us"].to_numpy(float) - origin
    inside = (rel + gpu["dur_us"].to_numpy(float) >= lo) & (rel <= hi)
    hand_us = float(gpu["dur_us"].to_numpy(float)[inside].sum())  # one stream: kernels never overlap
    lanes = fig.layout.yaxis
    gpu_rows = {-int(v) for v, t in zip(lanes.tickvals, lanes.ticktext) if t.startswith("GPU ")}
    assert len(gpu_rows) == 1
    grey = next((tr for tr in fig.data if tr.name == "grouped short events"), None)
    if grey is not None:
        assert not set((-np.asarray(grey.y)).astype(int).tolist()) & gpu_rows  # no grey on the GPU row
    busy = next(tr for tr in fig.data if tr.name == BUSY_NAME)
    drawn_gpu = sum(
        float(np.sum(np.asarray(tr.x, float)))
        for tr in fig.data
        if tr.name in ("kernel", "memory") and tr.customdata is not None
    )
    busy_us = float(np.sum(np.asarray(busy.customdata, dtype=object)[:, 2].astype(float)))
    assert busy_us + drawn_gpu == pytest.approx(hand_us, rel=1e-6)
    label = next(t for t in lanes.ticktext if t.startswith("GPU "))
    assert label == f"GPU 0 stream 7 · {100 * hand_us / (hi - lo):.0f} % busy", label


def test_busy_spans_merge_within_the_gap():
    y = np.array([0, 0, 0, 1])
    s = np.array([0.0, 10.5, 30.0, 0.0])
    e = np.array([10.0, 20.0, 31.0, 5.0])
    out = busy_spans(y, s, e, gap_us=1.0)
    assert out[["start_us", "end_us", "count"]].values.tolist() == [[0.0, 20.0, 2], [30.0, 31.0, 1], [0.0, 5.0, 1]]
    assert out["busy_us"].tolist() == [19.5, 1.0, 5.0]


def test_launch_lines_join_each_drawn_kernel_to_its_launch(h100):
    ev = h100.events
    k = ev[ev["cat"].astype(str) == "kernel"].iloc[200]
    launch = ev[(ev["correlation"] == k["correlation"]) & ev["cat"].astype(str).str.startswith("cuda_")].iloc[0]
    origin = float(ev["ts_us"].min())
    lo = float(launch["ts_us"]) - origin - 100.0
    hi = float(k["ts_us"] + k["dur_us"]) - origin + 100.0
    view = TimelineView(start_us=lo, end_us=hi, hide_python=True)
    fig = timeline_figure(ev, view, launch_flows=True)
    line = next(tr for tr in fig.data if tr.name == FLOW_NAME)
    xs, ys = list(line.x), list(line.y)
    n = len(xs) // 3
    assert n == fig.layout.meta["flows"] > 0
    by_start = {}
    laid = prepare(ev, view)
    for _, r in laid.iterrows():
        by_start[(round(float(r["start_us"]), 3), -int(r["y"]))] = r
    for i in range(n):
        a = by_start[(round(xs[3 * i], 3), int(ys[3 * i]))]
        b = by_start[(round(xs[3 * i + 1], 3), int(ys[3 * i + 1]))]
        assert str(a["cat"]) in ("cuda_runtime", "cuda_driver") and str(b["cat"]) in (
            "kernel",
            "gpu_memcpy",
            "gpu_memset",
        )
        assert a["correlation"] == b["correlation"]
    off = timeline_figure(ev, view)
    assert not any(tr.name == FLOW_NAME for tr in off.data)


def test_each_lane_has_one_label(h100):
    """The GPU annotation (no stream id, tid 7) and the kernels of stream 7 were two lanes named
    "GPU 0 stream 7": one tick label covered the other, and the kernel row had none."""
    laid = lay_out(h100.events)
    names = laid.groupby("lane_code")["lane"].first()
    assert names.is_unique, names.tolist()
    gpu = laid[laid["is_gpu"]]
    assert gpu["lane"].unique().tolist() == ["GPU 0 stream 7"]
    ann = gpu[gpu["cat"].astype(str) == "gpu_user_annotation"]
    kernels = gpu[gpu["cat"].astype(str) == "kernel"]
    # the step annotation encloses the kernels inside it: they sit in rows under it, in one lane
    assert (ann["sub"] == 0).all() and (kernels["sub"] >= 0).all()
    assert kernels["lane_code"].nunique() == 1 and set(ann["lane_code"]) == set(kernels["lane_code"])


def test_cross_gpu_timelines_align_at_the_step(load_shared):
    """Compare's two timelines start at each trace's ProfilerStep (or its first GPU work), not at
    each file's first event: the H100's step begins 375 µs in, its GPU work 218 ms in."""
    from engine.figures.compare import aligned_timelines, step_alignment

    sides = [load_shared(H100).events, load_shared("tracelens_timesformer/mi300_timesformer.json.gz").events]
    for ev in sides:
        step = ev[ev["name"].astype(str).str.startswith("ProfilerStep#") & (ev["cat"].astype(str) == "user_annotation")]
        t0 = float(step["ts_us"].iloc[0])
        assert step_alignment(ev)[:2] == pytest.approx((t0, float(step["dur_us"].iloc[0])), abs=1e-3)
        gpu = ev[ev["cat"].astype(str).isin(["kernel", "gpu_memcpy", "gpu_memset"]) & (ev["ts_us"] >= t0)]
        assert step_alignment(ev, at="gpu")[0] == float(gpu["ts_us"].min())
    al = [step_alignment(ev, at="gpu") for ev in sides]
    fig = aligned_timelines(
        *sides, ("H100", "MI300X"), window_us=max(a[1] for a in al), origins_us=(al[0][0], al[1][0])
    )
    for axis in ("y", "y2"):
        starts = [min(tr.base) for tr in fig.data if tr.yaxis == axis and tr.name in ("kernel", "memory", BUSY_NAME)]
        assert min(starts) == pytest.approx(0.0, abs=1e-6)  # both GPUs' first work at 0
