"""Trace analyses users expect from HTA, Perfetto and TensorBoard's profiler (issue 13):

* `temporal_breakdown`: per rank, the step's span split into compute, communication and idle,
  plus how much communication overlapped compute (HTA's temporal breakdown + comm/comp overlap);
* `kernel_table`: calls, total, mean and share per kernel (per cpu_op on CPU-only traces);
* `critical_path`: the chain of events that set a step's length, found backwards from the
  last event to end ("who released me last": the previous event on its lane, or the launch of
  a kernel) - the standard last-arrival approximation;
* `straggler_table`: per-rank step times, the slowest rank flagged;
* `rank_timelines` and `timeline_with_metrics`: timelines side by side (one row per rank) and
  metric curves under a timeline on the same µs axis.
All tables are pure pandas on the `Trace.events` table (µs).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from engine.figures.breakdown import GPU_CATS, self_time
from engine.trace.categories import classify

if TYPE_CHECKING:
    import plotly.graph_objects as go


def _union(s: np.ndarray, e: np.ndarray) -> np.ndarray:
    """Disjoint sorted intervals covering [s, e) pairs (n x 2)."""
    if len(s) == 0:
        return np.zeros((0, 2))
    o = np.argsort(s, kind="stable")
    s, e = s[o], e[o]
    ends = np.maximum.accumulate(e)
    new = np.r_[True, s[1:] > ends[:-1]]
    idx = np.flatnonzero(new)
    return np.stack([s[idx], np.r_[ends[idx[1:] - 1], ends[-1]]], axis=1)


def _length(iv: np.ndarray) -> float:
    return float((iv[:, 1] - iv[:, 0]).sum()) if len(iv) else 0.0


def _intersect(a: np.ndarray, b: np.ndarray) -> float:
    i = j = 0
    tot = 0.0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i, 0], b[j, 0]), min(a[i, 1], b[j, 1])
        if hi > lo:
            tot += hi - lo
        if a[i, 1] < b[j, 1]:
            i += 1
        else:
            j += 1
    return tot


def _is_comm(names: pd.Series) -> np.ndarray:
    uniq = pd.unique(names.astype(str))
    comm = {n for n in uniq if classify(n) == "communication" or "nccl" in n.lower()}
    return names.astype(str).isin(comm).to_numpy()


def _work(events: pd.DataFrame) -> tuple[pd.DataFrame, str]:
    """The events that count as a rank's work: GPU work when there is any, else top-level
    host ops (cpu_op) - a CPU-only trace's compute is its host ops."""
    cats = events["cat"].astype(str)
    gpu = events[cats.isin(GPU_CATS).to_numpy()]
    if len(gpu):
        return gpu, "gpu"
    return events[(cats == "cpu_op").to_numpy()], "cpu"


def _exclusive_segments(
    s: np.ndarray, e: np.ndarray, comm: np.ndarray, tid: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Host ops nest on a thread: a time point belongs to communication when any op active
    there on that thread is a collective (the c10d op and what it calls), else to compute.
    Returns (compute intervals, comm intervals) before the union across threads."""
    comp_iv: list[tuple[float, float]] = []
    comm_iv: list[tuple[float, float]] = []

    def emit(a: float, b: float, c: bool) -> None:
        if b > a:
            (comm_iv if c else comp_iv).append((a, b))

    order = np.lexsort((-(e - s), s, tid))
    stack: list[tuple[float, bool]] = []
    t, cur = 0.0, None
    for i in order.tolist():
        if tid[i] != cur:
            while stack:
                end, c = stack.pop()
                emit(t, end, c)
                t = max(t, end)
            cur, t = tid[i], s[i]
        while stack and stack[-1][0] <= s[i]:
            end, c = stack.pop()
            emit(t, end, c)
            t = max(t, end)
        if stack:
            emit(t, s[i], stack[-1][1])
        t = max(t, s[i])
        stack.append((e[i], bool(comm[i]) or (bool(stack) and stack[-1][1])))
    while stack:
        end, c = stack.pop()
        emit(t, end, c)
        t = max(t, end)
    a = np.array(comp_iv).reshape(-1, 2)
    b = np.array(comm_iv).reshape(-1, 2)
    return a, b


def temporal_breakdown(events: pd.DataFrame) -> pd.DataFrame:
    """Per rank: span, compute, communication, overlap, idle (µs and % of span)."""
    rows = []
    ranks = sorted(events["rank"].unique()) if "rank" in events.columns else [0]
    for r in ranks:
        ev = events[events["rank"] == r] if "rank" in events.columns else events
        work, basis = _work(ev)
        if len(work) == 0:
            continue
        s = work["ts_us"].to_numpy(float)
        e = s + work["dur_us"].to_numpy(float)
        comm = _is_comm(work["name"])
        if basis == "cpu":  # nested host ops: exclusive per thread first, then across threads
            tid = pd.factorize(work["pid"].astype(str) + "/" + work["tid"].astype(str))[0]
            ci, mi = _exclusive_segments(s, e, comm, tid)
            u_comp, u_comm = _union(ci[:, 0], ci[:, 1]), _union(mi[:, 0], mi[:, 1])
        else:
            u_comm, u_comp = _union(s[comm], e[comm]), _union(s[~comm], e[~comm])
        span = float(e.max() - s.min())
        comm_us, comp_us = _length(u_comm), _length(u_comp)
        overlap = _intersect(u_comm, u_comp)
        busy = comm_us + comp_us - overlap
        rows.append(
            {
                "rank": int(r),
                "basis": basis,
                "span_us": span,
                "compute_us": comp_us,
                "comm_us": comm_us,
                "overlap_us": overlap,
                "idle_us": span - busy,
                "compute_pct": 100 * comp_us / span if span else 0.0,
                "comm_pct": 100 * comm_us / span if span else 0.0,
                "idle_pct": 100 * (span - busy) / span if span else 0.0,
                "comm_overlapped_pct": 100 * overlap / comm_us if comm_us else float("nan"),
            }
        )
    return pd.DataFrame(rows)


def breakdown_figure(tb: pd.DataFrame) -> go.Figure:
    import plotly.graph_objects as go

    y = [f"rank {r}" for r in tb["rank"]]
    fig = go.Figure()
    exclusive_comm = tb["comm_us"] - tb["overlap_us"]
    for name, vals, color in (
        ("compute", tb["compute_us"], "#7c5cff"),
        ("communication (not overlapped)", exclusive_comm, "#ff6b6b"),
        ("idle", tb["idle_us"], "#adb5bd"),
    ):
        fig.add_trace(go.Bar(y=y, x=vals, name=name, orientation="h", marker_color=color))
    fig.update_layout(
        barmode="stack",
        height=120 + 40 * len(tb),
        xaxis_title="µs",
        margin=dict(l=10, r=10, t=30, b=30),
        legend=dict(orientation="h", yanchor="bottom", y=1.0, xanchor="left", x=0.0),
    )
    return fig


def kernel_table(events: pd.DataFrame, top: int | None = None) -> pd.DataFrame:
    """Per kernel name (cpu_op name on CPU-only traces): calls, total, mean, self, share %."""
    work, basis = _work(events)
    if len(work) == 0:
        return pd.DataFrame(columns=["name", "calls", "total_us", "mean_us", "self_us", "share_pct"])
    sel = self_time(events)[events.index.get_indexer(work.index)] if basis == "cpu" else work["dur_us"].to_numpy()
    w = work.assign(self_us=sel)
    g = w.groupby(w["name"].astype(str), observed=True)
    out = pd.DataFrame(
        {"calls": g.size(), "total_us": g["dur_us"].sum(), "mean_us": g["dur_us"].mean(), "self_us": g["self_us"].sum()}
    )
    tot = float(out["self_us"].sum())
    out["share_pct"] = 100 * out["self_us"] / tot if tot else 0.0
    out = out.sort_values("self_us", ascending=False).reset_index().rename(columns={"index": "name"})
    out.insert(0, "kind", "kernel" if basis == "gpu" else "cpu_op")
    return out.head(top) if top else out


def steps(events: pd.DataFrame, rank: int | None = None) -> pd.DataFrame:
    ev = events if rank is None or "rank" not in events.columns else events[events["rank"] == rank]
    st = ev[ev["name"].astype(str).str.startswith("ProfilerStep#")]
    return st.sort_values("ts_us")[["ev", "rank", "name", "ts_us", "dur_us"]].reset_index(drop=True)


def critical_path(events: pd.DataFrame, start_us: float, end_us: float, rank: int | None = None) -> pd.DataFrame:
    """Events on the critical path of [start_us, end_us] (absolute µs), in time order.

    Lanes: each host thread's top-level events and each GPU stream's work. Walking back from the
    event that ends last, the predecessor of an event is whichever ended later: the previous
    event on its lane, or (for GPU work) the runtime call that launched it. Gaps between the
    predecessor's end and the event's start are the idle the path waited for.
    """
    ev = events if rank is None or "rank" not in events.columns else events[events["rank"] == rank]
    s_all = ev["ts_us"].to_numpy(float)
    e_all = s_all + ev["dur_us"].to_numpy(float)
    ev = ev[(s_all >= start_us) & (e_all <= end_us + 1e-6)]
    ev = ev[~ev["name"].astype(str).str.startswith("ProfilerStep#")]
    cats = ev["cat"].astype(str)
    is_gpu = cats.isin(GPU_CATS).to_numpy()
    lane = np.where(
        is_gpu,
        "g" + ev["pid"].astype(str) + "/" + ev.get("stream", ev["tid"]).astype(str),
        "c" + ev["pid"].astype(str) + "/" + ev["tid"].astype(str),
    )
    ev = ev.assign(_lane=lane, _gpu=is_gpu, _end=ev["ts_us"].to_numpy(float) + ev["dur_us"].to_numpy(float))
    # host lanes: top-level events only (not nested in another event of the same thread)
    keep = np.ones(len(ev), bool)
    ev = ev.sort_values(["_lane", "ts_us", "dur_us"], ascending=[True, True, False], kind="stable")
    lanes, s, e = ev["_lane"].to_numpy(), ev["ts_us"].to_numpy(float), ev["_end"].to_numpy()
    cur_lane, cur_end = None, -np.inf
    for i in range(len(ev)):
        if lanes[i] != cur_lane:
            cur_lane, cur_end = lanes[i], -np.inf
        if not ev["_gpu"].iat[i] and s[i] < cur_end:
            keep[i] = False
            continue
        cur_end = max(cur_end, e[i])
    ev = ev[keep].reset_index(drop=True)
    if len(ev) == 0:
        return ev
    prev = np.full(len(ev), -1)
    lanes = ev["_lane"].to_numpy()
    same = np.r_[False, lanes[1:] == lanes[:-1]]
    prev[same] = np.flatnonzero(same) - 1
    launch = np.full(len(ev), -1)
    if "correlation" in ev.columns:
        corr = ev["correlation"]
        host = ev[~ev["_gpu"] & corr.notna()]
        by_corr = dict(zip(host["correlation"].astype("int64"), host.index))
        for g in np.flatnonzero(ev["_gpu"].to_numpy() & corr.notna().to_numpy()).tolist():
            launch[g] = by_corr.get(int(corr.iat[g]), -1)
    ends = ev["_end"].to_numpy()
    i = int(np.argmax(ends))
    path = []
    seen = set()
    while i >= 0 and i not in seen:
        seen.add(i)
        path.append(i)
        cands = [c for c in (prev[i], launch[i]) if c >= 0]
        i = max(cands, key=lambda c: ends[c]) if cands else -1
    out = ev.loc[path[::-1], ["ev", "cat", "name", "ts_us", "dur_us", "_lane"]].rename(columns={"_lane": "lane"})
    out["wait_before_us"] = np.maximum(
        out["ts_us"].to_numpy() - np.r_[out["ts_us"].iloc[0], (out["ts_us"] + out["dur_us"]).to_numpy()[:-1]], 0
    )
    return out.reset_index(drop=True)


def straggler_table(events: pd.DataFrame) -> pd.DataFrame:
    """Per rank: steps, median and max step µs, comm µs; the slowest median is the straggler
    (the others wait for it inside their collectives, so it shows the *least* comm time)."""
    rows = []
    for r in sorted(events["rank"].unique()) if "rank" in events.columns else [0]:
        st = steps(events, int(r))
        tb = temporal_breakdown(events[events["rank"] == r])
        rows.append(
            {
                "rank": int(r),
                "steps": len(st),
                "median_step_us": float(st["dur_us"].median()) if len(st) else float("nan"),
                "max_step_us": float(st["dur_us"].max()) if len(st) else float("nan"),
                "comm_us": float(tb["comm_us"].iloc[0]) if len(tb) else 0.0,
            }
        )
    out = pd.DataFrame(rows)
    if len(out):
        med = out["median_step_us"]
        out["vs_fastest"] = med / med.min() if med.notna().any() else float("nan")
        out["straggler"] = med == med.max()
    return out


def rank_timelines(events: pd.DataFrame, window_us: float | None = None, bar_limit: int = 1500) -> go.Figure:
    """One timeline row per rank, each from its own start, sharing the µs axis."""
    from plotly.subplots import make_subplots

    from engine.figures.timeline import TimelineView, aggregate_trace, level_of_detail, prepare, timeline_traces

    ranks = sorted(int(r) for r in events["rank"].unique())
    fig = make_subplots(
        rows=len(ranks), cols=1, shared_xaxes=True, vertical_spacing=0.04, subplot_titles=[f"rank {r}" for r in ranks]
    )
    total_rows = 0
    for k, r in enumerate(ranks, start=1):
        view = TimelineView(start_us=0.0 if window_us else None, end_us=window_us, rank=r, bar_limit=bar_limit)
        ev = prepare(events, view)
        detail, agg = level_of_detail(ev, bar_limit)
        for tr in timeline_traces(detail, legend=k == 1):
            fig.add_trace(tr, row=k, col=1)
        if len(agg):
            fig.add_trace(aggregate_trace(agg, legend=k == 1), row=k, col=1)
        lanes = ev.attrs["lanes"]
        fig.update_yaxes(
            tickvals=[-v for v in lanes.values()], ticktext=list(lanes.keys()), fixedrange=True, row=k, col=1
        )
        total_rows += int(ev["y"].max()) + 2 if len(ev) else 2
    fig.update_layout(
        barmode="overlay",
        height=max(360, 16 * total_rows + 60 * len(ranks)),
        margin=dict(l=10, r=10, t=40, b=30),
        legend=dict(orientation="h", yanchor="top", y=-0.04, xanchor="left", x=0.0),
    )
    if window_us:
        fig.update_xaxes(range=[0.0, float(window_us)])
    return fig


METRIC_NAMES = {
    "cpu_util_pct": "CPU %",
    "sys_cpu_util_pct": "machine CPU %",
    "rss_mb": "RSS MB",
    "gpu_util_pct": "GPU util %",
}


def timeline_with_metrics(timeline: go.Figure, samples: dict, *, span_us: float) -> go.Figure:
    """`timeline` with one metric panel per sampled metric under it, on the same µs axis.

    `samples` is a MetricsSampler dict ({"t_s": [...], metric: [...]}); sample times are
    placed from 0 over `span_us` of the timeline (the capture samples its own timed run, which
    is as long as the steps it measured; the page says so)."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    t = np.asarray(samples.get("t_s") or [], float)
    metrics = [m for m in samples if m != "t_s" and len(samples[m]) == len(t) and len(t) > 1]
    rows = 1 + len(metrics)
    fig = make_subplots(
        rows=rows,
        cols=1,
        shared_xaxes=True,
        vertical_spacing=0.03,
        row_heights=[0.64] + [0.36 / max(len(metrics), 1)] * len(metrics),
    )
    for tr in timeline.data:
        fig.add_trace(tr, row=1, col=1)
    fig.update_yaxes(timeline.layout.yaxis, row=1, col=1)
    x = (t - t[0]) / (t[-1] - t[0]) * span_us if len(t) > 1 else t
    for k, m in enumerate(metrics, start=2):
        fig.add_trace(
            go.Scatter(x=x, y=samples[m], mode="lines", name=METRIC_NAMES.get(m, m), line=dict(width=1.5)), row=k, col=1
        )
        fig.update_yaxes(title_text=METRIC_NAMES.get(m, m), fixedrange=True, row=k, col=1)
    fig.update_layout(
        barmode="overlay",
        height=int(timeline.layout.height or 400) + 130 * len(metrics),
        margin=dict(l=10, r=10, t=40, b=30),
        legend=dict(orientation="h", yanchor="top", y=-0.04, xanchor="left", x=0.0),
        dragmode="zoom",
    )
    fig.update_xaxes(range=list(timeline.layout.xaxis.range) if timeline.layout.xaxis.range else None)
    return fig
