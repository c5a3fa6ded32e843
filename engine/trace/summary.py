"""`summarize(trace)`: the facts `mystique info --json` prints, with stable keys.

One object per trace file (`summarize_sources`) or for the whole trace (`summarize`); for a
trace loaded from one file the two are the same object. Keys (all always present):

    path            str        the file (tarball members as "archive.tar.gz!member")
    kind            str        "execution_trace" | "kineto" ("execution_trace+kineto" for a
                               whole-trace summary of a linked pair)
    schema          str        ET schema as in the file ("" for Kineto)
    nodes           int        ET node count as in the file (0 for Kineto)
    events          int        Kineto event count, every phase (len(traceEvents); 0 for ET)
    rank            int|null   rank the file declares (Kineto distributedInfo.rank) or that its
                               name carries ("rank3", "_3.json"); null when neither says
    ranks           [int]      ranks the loaded rows carry (0 when unknown)
    world_size      int|null   distributedInfo.world_size
    link_rate       float|null linked ET ops / eligible ET ops (see engine.trace.link); null
                               unless an ET and a Kineto trace were loaded together
    ops_by_category {str: int} ET nodes per category; for Kineto-only, cpu_op/user_annotation
                               events per category of their names
    time_span_us    float|null last event end - first event start (Kineto X events; for ET,
                               over linked ops); null when unknown
    top_ops         [{name, count, dur_us}]  10 names with the most total host time (Kineto
                               cpu_op events; ET: linked Kineto time, dur_us null if unlinked)
    kernels         int        Kineto events with cat "kernel"
    kernel_classes  [{class, kernels, dur_us, share}]  GPU tasks per kernel class
                               (engine.trace.kernels), largest first; share of summed GPU task
                               time; [] without GPU work
    cpu_ops         int        Kineto events with cat "cpu_op"
    iterations      [{name, ts_us, dur_us, rank}]  ProfilerStep#N windows
    step_ms         float|null mean measured step (engine/trace/steps.py): ProfilerStep spans,
                               else a serving framework's step annotations; null otherwise
    step_source     str|null   where the step came from: "ProfilerStep", "annotation:<pattern>"
                               (vLLM/xDiT execute_*, SGLang step[*]) or "window" (the whole
                               capture); null without events
    warnings        [str]
    resources       [str]      files bundled with the trace (e.g. pt2_et_resources/*.py); listed,
                               never imported or executed
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from engine.trace.categories import categorize
from engine.trace.model import CATEGORIES, Trace, TraceMeta
from engine.trace.ranks import ranks_of

KEYS = (
    "path",
    "kind",
    "schema",
    "nodes",
    "events",
    "rank",
    "ranks",
    "world_size",
    "link_rate",
    "ops_by_category",
    "time_span_us",
    "top_ops",
    "kernels",
    "kernel_classes",
    "cpu_ops",
    "iterations",
    "step_ms",
    "step_source",
    "warnings",
    "resources",
)
_TOP = 10


def _count(col: pd.Series, value: str) -> int:
    return int((col == value).sum()) if len(col) else 0


def _by_category(cat: pd.Series) -> dict[str, int]:
    counts = cat.value_counts()
    return {c: int(counts.get(c, 0)) for c in CATEGORIES if int(counts.get(c, 0))}


def _top(names: pd.Series, dur: pd.Series) -> list[dict]:
    if not len(names):
        return []
    df = pd.DataFrame({"name": names.astype(str).to_numpy(), "dur": dur.to_numpy(dtype=float)})
    g = df.groupby("name", sort=False)["dur"].agg(["size", "sum"])
    g["has"] = df.groupby("name", sort=False)["dur"].count()
    g = g.sort_values(["sum", "size"], ascending=False).head(_TOP)
    return [
        {"name": n, "count": int(r["size"]), "dur_us": (round(float(r["sum"]), 3) if r["has"] else None)}
        for n, r in g.iterrows()
    ]


def _object(trace: Trace, ops: pd.DataFrame, events: pd.DataFrame, src: dict | None, paired: bool) -> dict:
    meta = trace.meta
    kind = src["kind"] if src else meta.get("kind", "")
    if src is None and len(meta.get("sources", [])) == 1:
        src = meta["sources"][0]
    ranks = ranks_of(ops, events)
    if events is not None and len(events):
        host = events[events["cat"].isin(["cpu_op", "user_annotation"])]
        end = (events["ts_us"] + events["dur_us"]).max()
        span = float(end - events["ts_us"].min())
    else:
        host = events.iloc[0:0]
        span = None
    if len(ops):
        by_cat = _by_category(ops["category"])
        top = _top(ops["name"], ops["k_dur_us"])
        if span is None and ops["k_ts_us"].notna().any():
            span = float((ops["k_ts_us"] + ops["k_dur_us"]).max() - ops["k_ts_us"].min())
    else:
        by_cat = _by_category(pd.Series(categorize(host["name"]))) if len(host) else {}
        cpu = events[events["cat"] == "cpu_op"] if len(events) else events
        top = _top(cpu["name"], cpu["dur_us"])
    link = meta.get("link") or {}
    iters = [it for it in meta.get("iterations", []) if it.get("rank") in ranks] if events is not None else []
    rank_decl, world = declared(src, ranks, meta)
    return {
        "path": src["path"] if src else ", ".join(s["path"] for s in meta.get("sources", [])),
        "kind": kind,
        "schema": src.get("schema", "") if src else meta.get("schema", ""),
        "nodes": int(src.get("nodes", 0)) if src else int(meta.get("nodes", 0)),
        "events": int(src.get("events", 0)) if src else int(meta.get("events", 0)),
        "rank": rank_decl,
        "ranks": ranks,
        "world_size": world,
        "link_rate": (float(link["link_rate"]) if paired and link.get("link_rate") is not None else None),
        "ops_by_category": by_cat,
        "time_span_us": None if span is None or np.isnan(span) else round(span, 3),
        "top_ops": top,
        "kernels": _count(events["cat"], "kernel") if len(events) else 0,
        "kernel_classes": _kernel_classes(events),
        "cpu_ops": _count(events["cat"], "cpu_op") if len(events) else 0,
        "iterations": iters if len(events) else [],
        **_steps(events),
        "warnings": _warnings(meta, src),
        "resources": sorted(meta.get("resources", {})),
    }


def declared(src: dict | None, ranks: list[int], meta: TraceMeta) -> tuple[int | None, int | None]:
    """(rank, world size) a summary's source declares: the file's own record, else the rank in
    its name; for a whole multi-file trace, its one rank (if one) and the trace's world size."""
    if src is None:
        return (ranks[0] if len(ranks) == 1 else None), meta.get("world_size")
    rank = src.get("rank_in_file")
    if rank is None:
        from engine.trace.layout import rank_in_name

        rank = rank_in_name(src["path"])
    return rank, src.get("world_size")


def _steps(events: pd.DataFrame | None) -> dict:
    from engine.trace.steps import WINDOW, measured_steps

    if events is None or not len(events):
        return {"step_ms": None, "step_source": None}
    ms = measured_steps(events)
    mean = None if ms.spans.empty or ms.step_source == WINDOW else float(ms.spans["dur_us"].mean()) / 1e3
    return {"step_ms": None if mean is None else round(mean, 6), "step_source": ms.step_source}


def _warnings(meta: TraceMeta, src: dict | None) -> list[str]:
    """All warnings for a whole-trace object; per file: its own plus those naming no file."""
    warns = list(meta.get("warnings", []))
    if src is None:
        return warns
    paths = [s["path"] for s in meta.get("sources", [])]
    return [w for w in warns if src["path"] in w or not any(p in w for p in paths)]


def _paired(trace: Trace) -> bool:
    return trace.has_et and trace.has_kineto and bool(trace.meta.get("link"))


def _kernel_classes(events: pd.DataFrame | None) -> list[dict]:
    from engine.trace.kernels import class_shares

    if events is None or not len(events):
        return []
    return class_rows(class_shares(events))


def class_rows(t: pd.DataFrame) -> list[dict]:
    """The `kernel_classes` records of a class / kernels / dur_us / share table (loader and store)."""
    return [
        {
            "class": str(r["class"]),
            "kernels": int(r["kernels"]),
            "dur_us": round(float(r["dur_us"]), 3),
            "share": round(float(r["share"]), 4),
        }
        for _, r in t.iterrows()
    ]


def summarize(trace: Trace) -> dict:
    """The whole trace as one object (keys above); for a one-file trace, that file's object."""
    return _object(trace, trace.ops, trace.events, None, _paired(trace))


def summarize_sources(trace: Trace) -> list[dict]:
    """One object per loaded file, in load order (each with the pair's link_rate)."""
    sources = trace.meta.get("sources", [])
    if len(sources) <= 1:
        return [summarize(trace)]
    paired = _paired(trace)
    out = []
    for i, src in enumerate(sources):
        ops = trace.ops[trace.ops["src"] == i] if "src" in trace.ops.columns else trace.ops.iloc[0:0]
        ev = trace.events[trace.events["src"] == i] if "src" in trace.events.columns else trace.events.iloc[0:0]
        out.append(_object(trace, ops, ev, src, paired))
    return out
