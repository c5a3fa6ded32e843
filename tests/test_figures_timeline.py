"""Timeline figure on real Kineto traces: µs-exact bars, WebGL segments for big traces, arrows."""

from __future__ import annotations

import numpy as np
import pytest

from engine.figures.lanes import BUSY_NAME
from engine.figures.timeline import TimelineView, prepare, timeline_figure

# aggregate bars (no event of their own): grey groups and, on GPU rows, merged busy spans
AGG = ("grouped short events", BUSY_NAME)


@pytest.fixture(scope="module")
def control(load_shared):
    return load_shared("hta_trace_diff/control.json.gz")


def test_bars_are_microsecond_exact(simple_add):
    ev = simple_add.events
    fig = timeline_figure(ev)
    origin = float(ev["ts_us"].min())
    assert fig.layout.meta["origin_us"] == origin and fig.layout.meta["bars"] is True
    by_ev = ev.set_index("ev")
    seen = 0
    for tr in fig.data:
        assert tr.type == "bar" and tr.orientation == "h"
        ids = np.asarray(tr.customdata)[:, 0].astype(np.int64)
        np.testing.assert_array_equal(np.asarray(tr.base), by_ev.loc[ids, "ts_us"].to_numpy() - origin)
        np.testing.assert_array_equal(np.asarray(tr.x), by_ev.loc[ids, "dur_us"].to_numpy())
        seen += len(ids)
    assert seen == len(ev)  # every X event drawn once


def test_kernels_sit_on_gpu_stream_lanes(simple_add):
    laid = prepare(simple_add.events)
    kernels = laid[laid["cat"].astype(str) == "kernel"]
    assert len(kernels) == 4  # MANIFEST: 4 kernels
    assert kernels["lane"].str.startswith("GPU ").all()
    assert laid[laid["cat"].astype(str) == "cpu_op"]["lane"].str.startswith("CPU ").all()


def test_window_and_min_duration_filter(simple_add):
    ev = simple_add.events
    origin = float(ev["ts_us"].min())
    span = float((ev["ts_us"] + ev["dur_us"]).max()) - origin
    view = TimelineView(start_us=span * 0.25, end_us=span * 0.75, min_dur_us=5.0)
    laid = prepare(ev, view)
    assert len(laid) > 0 and (laid["dur_us"] >= 5.0).all()
    assert ((laid["start_us"] + laid["dur_us"] >= span * 0.25) & (laid["start_us"] <= span * 0.75)).all()
    rel = ev["ts_us"] - origin
    expect = ev[(rel + ev["dur_us"] >= span * 0.25) & (rel <= span * 0.75) & (ev["dur_us"] >= 5.0)]
    assert sorted(laid["ev"]) == sorted(expect["ev"])


def test_nested_events_stack_in_sub_rows(simple_add):
    laid = prepare(simple_add.events)
    lane = laid[laid["lane"].str.startswith("CPU ")]
    top = lane[lane["sub"] == 0]
    # sub-row 0 events of one lane never overlap each other
    for _, part in top.groupby("lane"):
        s = part.sort_values("start_us")
        assert (s["start_us"].to_numpy()[1:] >= (s["start_us"] + s["dur_us"]).to_numpy()[:-1]).all()
    assert lane["sub"].max() >= 1


def test_flow_arrow_from_launch_to_its_kernel(simple_add):
    ev = simple_add.events
    launch = ev[ev["name"].astype(str) == "cudaLaunchKernel"].iloc[0]
    fig = timeline_figure(ev, flow_from=int(launch["ev"]))
    assert len(fig.layout.annotations) == 1
    arrow = fig.layout.annotations[0]
    kernel = ev[(ev["cat"].astype(str) == "kernel") & (ev["correlation"] == launch["correlation"])].iloc[0]
    origin = float(ev["ts_us"].min())
    assert arrow.ax == float(launch["ts_us"]) - origin and arrow.x == float(kernel["ts_us"]) - origin


def test_hover_shows_the_duration_not_the_end(simple_add):
    """Issue 13 problem 2: a horizontal bar's hover `%{x}` is its end (base + x); the tooltip read
    "dur 5435 µs" for a 1,096 µs op. The duration now comes from customdata (fails on 4eb7f39)."""
    ev = simple_add.events
    fig = timeline_figure(ev)
    by_ev = ev.set_index("ev")
    for tr in fig.data:
        assert "%{x" not in tr.hovertemplate  # never the bar end
        cd = np.asarray(tr.customdata, dtype=object)
        assert "dur %{customdata[1]" in tr.hovertemplate and "%{customdata[4]}" in tr.hovertemplate
        ids = cd[:, 0].astype(np.int64)
        np.testing.assert_array_equal(cd[:, 1].astype(float), by_ev.loc[ids, "dur_us"].to_numpy())
        assert list(cd[:, 4]) == by_ev.loc[ids, "name"].astype(str).tolist()


def test_big_trace_stays_interactive_bars(control):
    """Issue 13 problem 3: a 100k-event trace gets the same bar timeline (hover, click, box
    select, names on bars, x-only zoom), reduced by level of detail; on 4eb7f39 it was WebGL
    lines without names (fails there: traces were scattergl)."""
    ev = control.events
    assert len(ev) > 50_000
    fig = timeline_figure(ev, TimelineView(bar_limit=3000))
    bars = [tr for tr in fig.data if tr.type == "bar"]
    assert len(bars) == len(fig.data)
    detail = [tr for tr in bars if tr.name not in AGG]
    from engine.figures.timeline import LABEL_MIN_PX, MIN_BAR_PX, PLOT_PX

    # the 3,000 longest events, less those under MIN_BAR_PX on screen (seen by nobody, drawn at a cost)
    span = float((ev["ts_us"] + ev["dur_us"]).max() - ev["ts_us"].min())
    visible = int((ev["dur_us"].nlargest(3000) * PLOT_PX / span >= MIN_BAR_PX).sum())
    assert 100 < visible <= 3000
    assert sum(len(tr.x) for tr in detail) == visible == fig.layout.meta["drawn"]
    assert all((np.asarray(tr.x, float) * PLOT_PX / span >= MIN_BAR_PX).all() for tr in detail)
    counts = np.concatenate(
        [np.asarray(tr.customdata, dtype=object)[:, 1].astype(int) for tr in bars if tr.name in AGG]
    )
    assert counts.sum() + visible == len(ev) == fig.layout.meta["drawn"] + fig.layout.meta["grouped"]
    assert fig.layout.yaxis.fixedrange is True and fig.layout.dragmode == "zoom"  # x-only zoom
    assert all(tr.textposition == "inside" and tr.text is not None for tr in detail)  # names when they fit
    # a name is drawn only where it fits the bar on screen (at most one char per 6.5 px)
    for tr in detail:
        px = np.asarray(tr.x, float) * PLOT_PX / span
        text = list(tr.text)
        assert all((t == "") == (p < LABEL_MIN_PX) for t, p in zip(text, px))
        assert all(len(t) <= max(int(p / 6.5), 1) for t, p in zip(text, px) if t)
    # the longest events are the ones drawn: nothing drawn is shorter than anything grouped
    shortest_drawn = min(float(np.min(np.asarray(tr.x, float))) for tr in detail)
    longest_grouped_event = ev["dur_us"].nlargest(visible + 1).iloc[-1]
    assert shortest_drawn >= longest_grouped_event
    # a narrow window shows every event in it one bar each
    origin = float(ev["ts_us"].min())
    kernel = ev[ev["cat"].astype(str) == "kernel"].iloc[100]
    lo = float(kernel["ts_us"]) - origin
    fig = timeline_figure(ev, TimelineView(start_us=lo, end_us=lo + 200.0, bar_limit=3000))
    assert fig.layout.meta["grouped"] == 0
    drawn = {int(r[0]) for tr in fig.data for r in np.asarray(tr.customdata, dtype=object)}
    assert int(kernel["ev"]) in drawn


def test_search_highlights_hits(simple_add):
    fig = timeline_figure(simple_add.events, search="cudaLaunch")
    hits = 0
    for tr in fig.data:
        names = np.asarray(tr.customdata, dtype=object)[:, 4]
        op = np.asarray(tr.marker.opacity, float)
        match = np.array(["cudalaunch" in n.lower() for n in names])
        assert (op[match] == 1.0).all() and (op[~match] < 0.5).all()
        hits += int(match.sum())
    assert hits == int((simple_add.events["name"].astype(str) == "cudaLaunchKernel").sum()) > 0


def test_layout_once_then_windows_slice_it(control):
    """The dashboard lays a trace out once (`lay_out`, cached per trace) and every window is a
    slice of it: the same events, rows and lanes as laying the window out from scratch, and an
    event keeps its sub-row whatever the window (the layout never jumps)."""
    from engine.figures.timeline import default_window, lay_out

    ev = control.events
    laid = lay_out(ev)
    assert len(laid) == len(ev) and (laid["sub"] >= 0).all()
    lo, hi = default_window(ev)
    for view in (TimelineView(start_us=lo, end_us=hi), TimelineView(start_us=lo, end_us=lo + 500.0, min_dur_us=2.0)):
        a = prepare(ev, view).set_index("ev").sort_index()
        b = prepare(ev, view, laid=laid).set_index("ev").sort_index()
        assert len(a) > 0 and a.index.equals(b.index)
        assert (a["y"] == b["y"]).all() and (a["lane"] == b["lane"]).all()
        assert a.attrs["lanes"] == b.attrs["lanes"]
        whole = laid.set_index("ev")["sub"]
        assert (b["sub"] == whole.loc[b.index]).all()


def test_level_of_detail_skips_bars_nobody_can_see(control):
    """Over budget, only events at least MIN_BAR_PX wide at the window's scale get a bar (a
    sub-pixel bar cannot be seen or hovered but costs the browser a DOM element); the rest are
    counted in the grey grouped bars."""
    from engine.figures.timeline import BAR_LIMIT, MIN_BAR_PX, PLOT_PX, default_window

    ev = control.events
    lo, hi = default_window(ev)
    fig = timeline_figure(ev, TimelineView(start_us=lo, end_us=hi))
    meta = fig.layout.meta
    origin = float(ev["ts_us"].min())
    rel = ev["ts_us"] - origin
    in_window = ev[(rel + ev["dur_us"] >= lo) & (rel <= hi)]
    assert len(in_window) > BAR_LIMIT and meta["drawn"] + meta["grouped"] == len(in_window)
    wide = int((in_window["dur_us"] * PLOT_PX / (hi - lo) >= MIN_BAR_PX).sum())
    assert meta["drawn"] == min(BAR_LIMIT, wide) > 0
    for tr in fig.data:
        if tr.name not in AGG:
            assert (np.asarray(tr.x, float) * PLOT_PX / (hi - lo) >= MIN_BAR_PX).all()


def _drawn(fig) -> tuple[set[int], float]:
    """(event ids drawn as bars of their own, the shortest such bar in µs)."""
    ids, short = set(), float("inf")
    for tr in fig.data:
        if tr.name not in AGG and len(tr.x):
            ids |= {int(r[0]) for r in tr.customdata}
            short = min(short, float(np.min(np.asarray(tr.x, float))))
    return ids, short


def test_min_bar_us_follows_the_zoom(control):
    """Issue 21: the level of detail follows the window. The shortest event with a bar of its own
    is MIN_BAR_PX on screen, so it scales with the window's width; zooming 20x into a window's
    grouped events draws them: bars shorter than any the wide window drew, events it had not."""
    from engine.figures.timeline import MIN_BAR_PX, PLOT_PX, default_window, min_bar_us

    assert min_bar_us(0.0, PLOT_PX) == pytest.approx(MIN_BAR_PX)
    assert min_bar_us(100.0, 100.0 + 20 * PLOT_PX) == pytest.approx(20 * min_bar_us(100.0, 100.0 + PLOT_PX))
    assert min_bar_us(5.0, 5.0, min_px=2.0) > 0  # a point window still has a threshold
    ev = control.events
    lo, hi = default_window(ev)
    wide = timeline_figure(ev, TimelineView(start_us=lo, end_us=hi))
    assert wide.layout.meta["grouped"] > 0 and wide.layout.meta["min_bar_us"] == pytest.approx(min_bar_us(lo, hi))
    ids_wide, short_wide = _drawn(wide)
    assert short_wide >= min_bar_us(lo, hi)
    grey = next(tr for tr in wide.data if tr.name == "grouped short events")
    busiest = int(np.argmax(np.asarray(grey.customdata)[:, 1].astype(float)))
    a = float(grey.base[busiest])
    b = a + (hi - lo) / 20
    narrow = timeline_figure(ev, TimelineView(start_us=a, end_us=b))
    ids_narrow, short_narrow = _drawn(narrow)
    assert ids_narrow - ids_wide  # events the wide window only counted in grey now have bars
    assert short_narrow < short_wide
    meta = narrow.layout.meta
    assert meta["min_bar_us"] == 0.0 or meta["min_bar_us"] == pytest.approx(min_bar_us(a, b))
