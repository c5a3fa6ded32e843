"""Views of trace files (the trace, its graphs, timelines, tables, figures), cached on their paths.

Why paths as the key: every page and the prefetch pass the same small tuple, so a view is built
once per server and a rerun that changes nothing costs a dictionary look-up. A path is not
its content, though: a file rewritten in place (a capture into the same folder while the
dashboard runs) would keep showing the old trace. So `check_fresh`, called wherever a page asks
for a trace (`session.get_trace`, `session.add_trace`), compares the files' size and mtime with those
seen when their views were first built and, when they differ, drops every view cache entered
here with `@view` (a rare event; the engine's parse cache is keyed on the content's sha256, so
reloading the unchanged traces costs little).

The engine does the work; this module only caches and never draws widgets.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import streamlit as st

from engine.trace.ranks import of_rank

_VIEWS: list[Any] = []


def view(cache: Callable[..., Any], **options: Any) -> Callable[[Callable[..., Any]], Any]:
    """`cache(**options)` (`st.cache_resource` or `st.cache_data`) for a view of trace files,
    entered in the list `check_fresh` clears."""

    def wrap(fn: Callable[..., Any]) -> Any:
        cached = cache(**options)(fn)
        _VIEWS.append(cached)
        return cached

    return wrap


@st.cache_resource(show_spinner=False)
def _seen() -> dict[tuple[str, ...], tuple]:
    """Server-wide: trace paths -> their files' (size, mtime_ns) when first asked for."""
    return {}


def _stamp(paths: tuple[str, ...]) -> tuple:
    out: list[tuple[int, int] | None] = []
    for p in paths:
        try:
            s = os.stat(p)
        except OSError:  # gone: the load reports it
            out.append(None)
        else:
            out.append((s.st_size, s.st_mtime_ns))
    return tuple(out)


def check_fresh(paths: tuple[str, ...]) -> bool:
    """Drop every cached view when these files changed on disk since they were first seen; True
    when it did."""
    now, seen = _stamp(paths), _seen()
    before = seen.get(paths)
    seen[paths] = now
    if before is None or before == now:
        return False
    for cached in _VIEWS:
        cached.clear()
    return True


# The graph's defaults, shared by its widgets and by the prefetch, whose calls must match the
# page's first render argument for argument to land in the same cache entries.
GRAPH_HEIGHT = 560
GRAPH_COLOR_BY = ("category", "phase")


@view(st.cache_resource, max_entries=12, show_spinner="Loading trace…")
def open_paths(paths: tuple[str, ...]):
    """The trace of these files: a whole `Trace` within the whole-table budget, else a
    `StoreTrace` read through its store (engine.trace.store.handle; keyed on path strings)."""
    from engine.trace.store.handle import open_trace

    return open_trace(*paths)


def is_big(paths: tuple[str, ...]) -> bool:
    """Whether these files are read through the store (over the whole-table budget)."""
    from engine.trace.store.handle import is_store_trace

    return is_store_trace(open_paths(paths))


def load_paths(paths: tuple[str, ...]):
    """The whole `Trace` of these files; TraceError (one line, naming what reads it instead) when
    it is over the whole-table budget."""
    t = open_paths(paths)
    if is_big(paths):
        raise t.refusal()
    return t


def trace_ranks(paths: tuple[str, ...]) -> list[int]:
    """The ranks the trace holds (0 alone when none is known)."""
    from engine.trace.ranks import ranks_of

    t = open_paths(paths)
    return (t.ranks if is_big(paths) else ranks_of(t.ops, t.events)) or [0]


@view(st.cache_data, max_entries=64, show_spinner=False)
def rank_extent(paths: tuple[str, ...], rank: int | None) -> tuple[float, float]:
    """(origin, span) µs of one rank's events: its first start, last end minus that."""
    t = open_paths(paths)
    if is_big(paths):
        return t.extent(int(rank or 0))
    ev = of_rank(t.events, rank)
    if not len(ev):
        return 0.0, 0.0
    t0 = float(ev["ts_us"].min())
    return t0, float((ev["ts_us"] + ev["dur_us"]).max() - t0)


def event_row(paths: tuple[str, ...], ev: int) -> dict | None:
    """One event by its id (`ev`) as a dict, None when absent."""
    t = open_paths(paths)
    if is_big(paths):
        return t.event(ev)
    rows = t.events[t.events["ev"] == ev]
    return rows.iloc[0].to_dict() if len(rows) else None


@view(st.cache_data, max_entries=32, show_spinner=False)
def summary_of(paths: tuple[str, ...]) -> dict:
    from engine.trace import summarize

    t = open_paths(paths)
    if is_big(paths):
        from engine.trace.store.summary import summarize_store

        return summarize_store(t)
    return summarize(t)


@view(st.cache_resource, max_entries=8, show_spinner="Finding data dependencies…")
def dag_of(paths: tuple[str, ...], rank: int | None):
    from engine.graph import data_deps

    return data_deps(load_paths(paths), rank=rank)


@view(st.cache_resource, max_entries=32, show_spinner=False)
def hierarchy_model(paths: tuple[str, ...], rank: int | None, focus_key: str | None):
    """The operator graph at a drill-down focus (same node budget on every page)."""
    from engine.figures.hierarchy import NODE_BUDGET, Focus, build_hierarchy_model
    from engine.trace.ranks import rank_ops

    trace = load_paths(paths)
    focus = Focus.from_key(focus_key) if focus_key else None
    return build_hierarchy_model(rank_ops(trace.ops, rank), dag_of(paths, rank), focus, NODE_BUDGET)


@view(st.cache_resource, max_entries=32, show_spinner=False)
def hierarchy_fig(
    paths: tuple[str, ...],
    rank: int | None,
    focus_key: str | None,
    color_by: str,
    selected: tuple,
    search: str,
    height: int = GRAPH_HEIGHT,
):
    from engine.figures.hierarchy import hierarchy_figure, search_keys
    from engine.trace.ranks import rank_ops

    model = hierarchy_model(paths, rank, focus_key)
    found = tuple(search_keys(model, rank_ops(load_paths(paths).ops, rank), search)) if search else ()
    return hierarchy_figure(model, color_by, selected=selected, found=found, height=height), len(found)


def focus_key_of(focus) -> str | None:
    if focus is None or (focus.parent is None and focus.lo is None):
        return None
    if focus.lo is None:
        return f"tree:{focus.parent}"
    return f"range:{'root' if focus.parent is None else focus.parent}:{focus.lo}:{focus.hi}"


@view(st.cache_resource, max_entries=8, show_spinner="Laying out the timeline…")
def timeline_layout(paths: tuple[str, ...], rank: int | None):
    """Lanes, colours and nesting sub-rows of one rank's events, once per trace (every window,
    filter and click then costs a slice: `engine.figures.timeline.lay_out`)."""
    from engine.figures.timeline import lay_out

    return lay_out(load_paths(paths).events, rank, with_python_free=True)


@view(st.cache_resource, max_entries=32, show_spinner=False)
def timeline_fig(
    paths: tuple[str, ...],
    rank: int | None,
    start_us: float | None,
    end_us: float | None,
    min_dur_us: float,
    flow_from: int | None,
    search: str = "",
    hide_python: bool = False,
    collapsed: tuple[str, ...] = (),
    launch_flows: bool = True,
):
    """One window of the timeline. The page and the prefetch pass every argument, so their calls
    share cache entries (omitted defaults make another key)."""
    from engine.figures.timeline import TimelineView, timeline_figure

    view = TimelineView(
        start_us=start_us,
        end_us=end_us,
        min_dur_us=min_dur_us,
        rank=rank,
        hide_python=hide_python,
        collapsed=tuple(collapsed),
    )
    if is_big(paths):  # the window's rows from the store (their sub-rows equal the whole rank's)
        origin, span = rank_extent(paths, rank)
        lo = origin + (0.0 if start_us is None else start_us)
        hi = origin + (span if end_us is None else end_us)
        ev, left_out = open_paths(paths).window(int(rank or 0), lo, hi)
        fig = timeline_figure(
            ev,
            view,
            flow_from=flow_from,
            search=search,
            laid=window_layout(paths, rank, ev),
            launch_flows=launch_flows,
        )
        if left_out:
            fig.layout.meta = {**(fig.layout.meta or {}), "left_out_under_us": left_out}
        return fig
    trace = load_paths(paths)
    return timeline_figure(
        trace.events,
        view,
        flow_from=flow_from,
        search=search,
        shapes=op_shapes(paths),
        laid=timeline_layout(paths, rank),
        launch_flows=launch_flows,
    )


def window_layout(paths: tuple[str, ...], rank: int | None, ev):
    """`lay_out` of a window's rows read through the store, equal to the whole rank's rows of that
    window: zero-length rows far before the rank (one per distinct lane, in the rank's order of
    first appearance) are laid out first and dropped after, so lanes number as in the whole
    rank; a row's sub-row comes from the rows around it, which the window holds."""
    import pandas as pd

    from engine.figures.timeline import lay_out

    t = open_paths(paths)
    origin = rank_extent(paths, rank)[0]
    seeds = t.lane_seeds(int(rank or 0))
    ghost = seeds.assign(ev=-1, name="", ts_us=origin - 1e9, dur_us=0.0, correlation=pd.NA, rank=rank)
    both = pd.concat([ghost, ev.astype({c: str for c in ("cat", "pid", "tid") if c in ev.columns})])
    laid = lay_out(both.reset_index(drop=True), rank, origin)
    out = laid[laid["ev"].to_numpy() >= 0]
    out.attrs = laid.attrs
    return out


@view(st.cache_data, max_entries=16, show_spinner=False)
def timeline_threads(paths: tuple[str, ...], rank: int | None) -> tuple[list[str], bool]:
    """(CPU lane labels, whether any python frames are recorded) of one rank's timeline (over the
    whole-table budget: from the store's distinct lanes, never the whole trace)."""
    if is_big(paths):
        import pandas as pd

        from engine.figures.timeline import lay_out

        origin = rank_extent(paths, rank)[0]
        seeds = open_paths(paths).lane_seeds(int(rank or 0))
        seeds = seeds.astype({c: str for c in ("cat", "pid", "tid") if c in seeds.columns})
        rows = seeds.assign(ev=range(len(seeds)), name="", ts_us=origin, dur_us=0.0, correlation=pd.NA, rank=rank)
        laid = lay_out(rows.reset_index(drop=True), rank, origin)
    else:
        laid = timeline_layout(paths, rank)
    cpu = sorted(str(x) for x in laid.loc[~laid["is_gpu"].to_numpy(bool), "lane"].unique())
    return cpu, bool((laid["group"] == "python").any())


@view(st.cache_resource, max_entries=8, show_spinner=False)
def op_shapes(paths: tuple[str, ...]) -> dict[int, str]:
    """ET op id -> "in: 64×3×224×224 float32, ..." for timeline hovers (ops linked to events).
    Shapes are formatted once per distinct shape (a trace has tens, over 10k tensor rows)."""
    trace = load_paths(paths)
    t = getattr(trace, "tensors", None)
    if t is None or len(t) == 0:
        return {}
    t = t[t["io"].astype(str) == "in"]
    text: dict = {}

    def fmt(s) -> str:
        try:
            hit = text.get(s)
        except TypeError:  # unhashable (a nested list): format it each time
            return str(s)
        if hit is None:
            hit = text[s] = "×".join(str(int(x)) for x in s) if isinstance(s, tuple) else str(s)
        return hit

    label = [f"{fmt(s)} {d}" for s, d in zip(t["shape"].tolist(), t["dtype"].astype(str).tolist())]
    out: dict[int, str] = {}
    for op, lab in zip(t["op_id"].to_numpy().tolist(), label):
        cur = out.get(op)
        if cur is None:
            out[op] = "in: " + lab
        elif len(cur) < 160:
            out[op] = cur + ", " + lab
    return out


@view(st.cache_data, max_entries=16, show_spinner=False)
def search_events(paths: tuple[str, ...], rank: int | None, pattern: str) -> list[tuple[str, float, float]]:
    """(name, start µs from the rank's origin, dur µs) of events whose name matches `pattern`
    (a regex, case-insensitive; a bad regex is matched as plain text), longest first."""
    from engine.user_regex import search_mask

    if is_big(paths):  # the regex over the distinct names, then those rows from the store
        t = open_paths(paths)
        t0 = t.extent(int(rank or 0))[0]
        names = t.names(int(rank or 0))
        m = t.named(int(rank or 0), names[search_mask(names, pattern)].tolist())
        return list(zip(m["name"].astype(str), (m["ts_us"] - t0).astype(float), m["dur_us"].astype(float)))
    ev = of_rank(load_paths(paths).events, rank)
    if len(ev) == 0:
        return []
    t0 = float(ev["ts_us"].min())
    names = ev["name"].astype(str)
    m = ev[search_mask(names, pattern)]
    m = m.sort_values("ts_us")
    return list(zip(m["name"].astype(str), (m["ts_us"] - t0).astype(float), m["dur_us"].astype(float)))


def capture_meta(paths: tuple[str, ...]) -> dict | None:
    """The capture meta of the trace files (engine.capture.meta rules), None when there is none."""
    from engine.errors import TraceError
    from engine.trace.layout import meta_for

    try:
        return meta_for(*paths)
    except TraceError:
        return None


@view(st.cache_data, max_entries=32, show_spinner=False)
def default_window(paths: tuple[str, ...], rank: int | None) -> tuple[float, float]:
    from engine.figures import timeline

    if is_big(paths):
        t = open_paths(paths)
        rows = t.first_view_rows(int(rank or 0))
        lo, hi = timeline.default_window(rows, origin_us=t.extent(int(rank or 0))[0])
        return float(lo), float(hi)
    ev = of_rank(load_paths(paths).events, rank)
    lo, hi = timeline.default_window(ev)
    return float(lo), float(hi)


@view(st.cache_data, max_entries=16, show_spinner="Analysing…")
def analysis_tables(paths: tuple[str, ...], scheduler: str | None = None) -> dict:
    """The trace's TimeBreakdown (per rank and step) and kernel table (cached on paths);
    `scheduler`: where a trace read through its store fans out over ranks."""
    from engine.analysis.breakdown import TimeBreakdown
    from engine.analysis.selftime import kernel_table
    from engine.trace.kernels import class_shares

    if is_big(paths):  # rank by rank from the store (engine.analysis.store_tables)
        from engine.analysis.store_tables import analysis_tables as from_store

        return from_store(open_paths(paths).store, scheduler=scheduler)
    ev = load_paths(paths).events
    bd = TimeBreakdown.from_events(ev)
    return {
        "breakdown": bd.table,
        "per_rank": bd.per_rank(),
        "mean": bd.mean(),
        "kernels": kernel_table(ev),
        "classes": class_shares(ev),
    }


@view(st.cache_data, max_entries=16, show_spinner="Analysing GPU queues…")
def gpu_queues(paths: tuple[str, ...]) -> dict | None:
    """Queue length and launch delay per GPU task, per-stream summary, idle gaps with their host /
    kernel wait split and the tasks the GPU waited for (engine.analysis.gpu_queue); None for a
    trace read through its store (no whole tables)."""
    from engine.analysis import gpu_queue

    if is_big(paths):
        return None
    ev = load_paths(paths).events
    lz = gpu_queue.launches(ev)
    gaps = gpu_queue.idle_gaps(ev, lz)
    return {
        "launches": lz,
        "streams": gpu_queue.stream_summary(lz),
        "idle": gpu_queue.idle_split(gaps),
        "waited_for": gpu_queue.waited_for(gaps, 50),
    }


@view(st.cache_data, max_entries=16, show_spinner="Reading Input Dims for the GEMM table…")
def gemm_table(paths: tuple[str, ...]) -> tuple:
    """(GEMM / attention table, header) of engine.analysis.gemm (it reads the files again for the
    ops' Input Dims, so the page asks for it)."""
    from engine.analysis import gemm

    return gemm.gemm_table(load_paths(paths))


@view(st.cache_data, max_entries=16, show_spinner="Simulating the unchanged schedule for the critical path…")
def simulated(paths: tuple[str, ...], spec_json: str = "") -> dict:
    """`simulate(trace, spec)` as plain data: its JSON, the critical path's pieces and top
    operators, the straggler table and the predicted events (cached on paths and spec)."""
    import json

    from engine.simulate import simulate

    res = simulate(load_paths(paths), json.loads(spec_json) if spec_json else None)
    cp = res.critical_path
    return {
        "json": res.to_json(),
        "segments": cp.segments if cp is not None else None,
        "top_ops": cp.top_ops if cp is not None else None,
        "stragglers": res.stragglers,
        "events": res.predicted.events,
    }


@view(st.cache_resource, max_entries=8, show_spinner=False)
def rank_timelines_fig(paths: tuple[str, ...], window_us: float | None, with_path: bool = True):
    """The ranks side by side, the critical path of the unchanged schedule highlighted on top of
    each rank's lanes (the unchanged schedule reproduces the trace's times: its error_pct)."""
    from engine.errors import TraceError
    from engine.figures.analysis import rank_timelines

    try:
        seg = simulated(paths)["segments"] if with_path else None
    except TraceError:
        seg = None
    return rank_timelines(load_paths(paths).events, window_us, path=seg)


def _session_ended() -> Callable[[], bool]:
    """A check, made on the script thread now, that turns true once this browser session has gone
    (its tab closed) or its run was asked to stop: the SQL box then interrupts its query."""
    from streamlit.runtime import Runtime
    from streamlit.runtime.scriptrunner import get_script_run_ctx

    ctx = get_script_run_ctx()
    if ctx is None or not Runtime.exists():
        return lambda: False
    runtime, requests = Runtime.instance(), ctx.script_requests

    def ended() -> bool:
        stopping = getattr(getattr(requests, "_state", None), "value", "") == "STOP"
        return stopping or not runtime.is_active_session(ctx.session_id)

    return ended


@view(st.cache_data, max_entries=16, show_spinner="Querying…")
def sql_result(paths: tuple[str, ...], sql: str, scheduler: str | None = None):
    """Read-only SQL over the trace store of `paths` (engine.trace.store.sql.run: built on first
    use, fanned out on the dashboard's `scheduler` setting): the first MAX_ROWS rows only (what is
    cached), under UI_TIMEOUT_S, interrupted when the session ends."""
    from engine.trace.store.sql import MAX_ROWS, UI_TIMEOUT_S, run

    return run(
        list(paths), sql, scheduler=scheduler, max_rows=MAX_ROWS, timeout_s=UI_TIMEOUT_S, cancel=_session_ended()
    )


@view(st.cache_data, max_entries=16, show_spinner=False)
def whatif(content_hash: str, paths: tuple[str, ...], spec_json: str, cfg_json: str):
    """The What-if page's run: the unchanged schedule and the edited one with its sensitivity,
    under one `SimConfig` (cached on the trace's content hash, spec and config); plain data:
    (base JSON, edited JSON, predicted events, measured events, critical path pieces, stragglers)."""
    from engine.simulate import simulate
    from engine.simulate.config import SimConfig

    trace = load_paths(paths)
    cfg = SimConfig.parse(cfg_json)
    base = simulate(trace, config=cfg)
    res = simulate(trace, spec_json, config=cfg, sensitivity=True)  # the spec parser names bad fields
    cp = res.critical_path
    path = {"segments": cp.segments, "top_ops": cp.top_ops} if cp is not None else None
    return base.to_json(), res.to_json(), res.predicted.events, trace.events, path, res.stragglers


@view(st.cache_data, max_entries=16, show_spinner=False)
def breakdown_tables(paths: tuple[str, ...]) -> dict:
    """Explore's Breakdown tables of a whole trace (cached on paths): self time by operator and by
    kernel, kernel classes, GPU idle, annotations; with an ET, linked CPU time by category and
    phase and the top operators. Keys absent where the trace lacks their part."""
    from engine.analysis import selftime
    from engine.trace.kernels import class_shares
    from engine.trace.vocab import GPU_CATS

    t = load_paths(paths)
    out: dict = {}
    if t.has_kineto:
        out["ops"] = selftime.time_by(t.events, "cpu_op")
        out["kernels"] = selftime.time_by(t.events, GPU_CATS)
        if len(out["kernels"]):
            out["classes"] = class_shares(t.events)
            out["idle"] = selftime.gpu_idle(t.events)
        ann = selftime.time_by(t.events, ("user_annotation", "cpu_op"))
        out["annotations"] = ann[ann["kind"] == "annotation"]
    if t.has_et and t.has_kineto:
        out["category"] = selftime.op_time_by(t.ops, "category")
        out["phase"] = selftime.op_time_by(t.ops, "phase")
        out["top_ops"] = selftime.top_ops(t.ops, 50)
    return out


@view(st.cache_data, max_entries=32, show_spinner=False)
def rank_inputs(paths: tuple[str, ...], ranks: tuple[int, ...], bench_dir: str | None) -> dict:
    """Files and recorded ranks a distributed replay of these files (or of the composed benchmark
    in `bench_dir`) takes (engine.replay.distributed.rank_inputs)."""
    from engine.replay.distributed import rank_inputs as _ri

    return _ri(list(paths), list(ranks), bench_dir)


def rank_medians(paths: tuple[str, ...]) -> dict[int, float]:
    """Unprofiled per-rank step medians of a multi-rank capture ({} for others)."""
    from engine.replay.distributed import capture_rank_medians

    return capture_rank_medians(list(paths))


@view(st.cache_data, max_entries=16, show_spinner="Estimating the world's memory…")
def world_memory(paths: tuple[str, ...], world: int, mirror: int | None, cfg: str) -> tuple[dict | None, str]:
    """(WorldBudget.to_json(), "") or (None, the refusal the CLI gives) for this world."""
    import json

    from engine.errors import TraceError
    from engine.replay.budget import check_world_memory, world_budget
    from engine.replay.config import ReplayConfig
    from engine.replay.distributed import DistConfig, plan_ranks

    tr = load_paths(paths)
    config = ReplayConfig.from_dict(json.loads(cfg))
    _, rank_map = plan_ranks(tr, DistConfig(world_size=world, mirror_rank=mirror))
    try:
        return check_world_memory(tr, list(paths), rank_map, config, paths[0]).to_json(), ""
    except TraceError as exc:
        return world_budget(tr, list(paths), rank_map, config).to_json(), str(exc)


@view(st.cache_data, max_entries=8, show_spinner="Comparing the two traces…")
def trace_diff(pa: tuple[str, ...], pb: tuple[str, ...], a: str, b: str, keep: bool):
    """compare_traces of two loaded traces, cached on their files, labels and the bookkeeping switch."""
    from engine.compare import compare_traces

    return compare_traces(load_paths(pa), load_paths(pb), labels=(a, b), bookkeeping=keep)


@view(st.cache_resource, max_entries=8, show_spinner=False)
def replay_compare(paths: tuple[str, ...], result_path: str):
    """(the replay's `ReplayResult`, its comparison with the original trace of these files), cached
    on the files and the result file (a finished job's result is written once)."""
    from engine.compare import compare
    from engine.replay.result import ReplayResult  # lazy: engine.replay imports torch

    report = ReplayResult.read(result_path)
    return report, compare(load_paths(paths), report, original_meta=capture_meta(paths))


@view(st.cache_data, max_entries=32, show_spinner=False)
def step_count(paths: tuple[str, ...]) -> int:
    """How many steps (ProfilerStep spans) the whole trace of these files holds."""
    from engine.trace.steps import step_spans

    return len(step_spans(load_paths(paths).events))


@view(st.cache_resource, max_entries=8, show_spinner=False)
def shown_events(paths: tuple[str, ...], keep: bool):
    """The trace's events as Compare's timelines draw them: all of them (`keep`), or without python
    frames and profiler bookkeeping (engine.compare.gpu_pairs.bookkeeping). Shared: read only."""
    ev = load_paths(paths).events
    if keep:
        return ev
    from engine.compare.gpu_pairs import bookkeeping

    return ev[~bookkeeping(ev)]


@view(st.cache_data, max_entries=16, show_spinner=False)
def replay_ids(paths: tuple[str, ...], ids: tuple[int, ...]) -> list[int]:
    """The ET ids a replay of the picked ops runs: the picks closed over their call-tree
    descendants, with the replay rule applied inside (engine.graph.selection)."""
    from engine.graph import Selection, select

    return [int(i) for i in select(load_paths(paths), Selection(ids=list(ids))).replay_ids]
