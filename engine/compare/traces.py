"""Two loaded Traces side by side (e.g. two Kineto runs, or an original and a replay's Kineto).

What is compared and why:
  * iterations: median `ProfilerStep#N` duration on each side (the end-to-end figure);
  * Kineto events by (cat, name) and by cat: count and total duration, with deltas. Kernels,
    runtime calls and cpu_ops are the units people reason about when two runs differ
    ("which kernels got slower, which ops appeared"), as in HTA's trace diff;
  * ET ops by name (count) when both sides have an ET: structural changes of the program.
Durations are totals over the whole trace (`dur_us` inclusive; `self_us` exclusive of nested
events on the same thread/stream, what the breakdown charts show, so nested ops count once); `*_per_iter_us` divides by the side's iteration
count when both sides have iterations, so runs of different lengths stay comparable.

`mystique compare A B --json` on two traces prints `TraceDiff.to_json(top)`:

    kind         "traces"
    e2e          {a_ms, b_ms, error, a_iterations, b_iterations}   median iterations
    sides        {label: {sources, kind, events, ops, ranks, median_iter_ms, iterations}}
    by_category  [{...}]   per Kineto cat: count, dur_us, self_us (_a / _b) and delta_us
    by_name      [{...}]   per (cat, name), the `top` rows with the largest |delta_us|
    ops_by_name  [{...}]   ET op counts per name on each side (when both have an ET)
    by_class     [{class, a_us, b_us, ratio, direction}]  GPU task time per kernel class (per
                           iteration when both sides have them); ratio = b / a; direction
                           "B 1.32x slower on gemm" (engine.compare.gpu_pairs)
    by_op_type   [{name, class, pairs, a_us, b_us, ratio, direction}]  GPU time of the launching
                           ops paired in launch order on (name, input shapes)
    op_pairs     {a_ops, b_ops, paired}   launching ops on each side and how many paired
    headline     str       "B 1.09x slower on the step" (median iterations)
    warnings     [str]
Python frames and profiler bookkeeping (`gpu_pairs.bookkeeping`: python_function rows, "PyTorch
Profiler (0)", instant events) are left out of by_category and by_name unless
`bookkeeping=True`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pandas as pd

from engine.compare.replay import json_clean, json_records, rel_error
from engine.trace.steps import measured_iterations, step_ms

if TYPE_CHECKING:
    from engine.trace.model import Trace


@dataclass(kw_only=True, slots=True)
class TraceDiff:
    kind: str = "traces"
    e2e: dict[str, Any] = field(default_factory=dict)
    by_name: pd.DataFrame = field(default_factory=pd.DataFrame)  # (cat, name) rows
    by_category: pd.DataFrame = field(default_factory=pd.DataFrame)  # cat rows
    ops_by_name: pd.DataFrame = field(default_factory=pd.DataFrame)  # ET op name counts
    sides: dict[str, Any] = field(default_factory=dict)
    by_class: pd.DataFrame = field(default_factory=pd.DataFrame)  # kernel class rows
    by_op_type: pd.DataFrame = field(default_factory=pd.DataFrame)  # paired launching ops per name
    op_pairs: dict[str, int] = field(default_factory=dict)
    headline: str = ""
    warnings: list[str] = field(default_factory=list)

    def to_json(self, top: int | None = None) -> dict[str, Any]:
        """JSON-ready dict; `top` keeps only the rows with the largest |delta_us| per table."""

        def cut(df: pd.DataFrame) -> pd.DataFrame:
            if top is None or df.empty or "delta_us" not in df:
                return df
            return df.reindex(df["delta_us"].abs().sort_values(ascending=False, kind="stable").index[:top])

        return {
            "kind": self.kind,
            "e2e": json_clean(self.e2e),
            "sides": json_clean(self.sides),
            "by_category": json_records(self.by_category),
            "by_name": json_records(cut(self.by_name)),
            "ops_by_name": json_records(self.ops_by_name if top is None else self.ops_by_name.head(top)),
            "by_class": json_records(self.by_class),
            "by_op_type": json_records(self.by_op_type if top is None else self.by_op_type.head(top)),
            "op_pairs": dict(self.op_pairs),
            "headline": self.headline,
            "warnings": list(self.warnings),
        }


def _iter_stats(trace: Trace) -> dict[str, Any]:
    ms = step_ms(trace)
    return {"iterations": len(measured_iterations(trace)), "median_iter_ms": math.nan if ms is None else ms}


def _events_by(trace: Trace, keys: list[str], keep_bookkeeping: bool = False) -> pd.DataFrame:
    ev = trace.events
    if ev is None or ev.empty:
        return pd.DataFrame(columns=[*keys, "count", "dur_us"])
    from engine.analysis.selftime import self_time
    from engine.compare.gpu_pairs import bookkeeping

    frame = pd.DataFrame({k: ev[k].astype(str) for k in keys})
    frame["dur_us"] = ev["dur_us"].astype("float64").fillna(0.0)
    frame["self_us"] = self_time(ev)
    if not keep_bookkeeping:
        frame = frame[~bookkeeping(ev)]
    return (
        frame.groupby(keys, sort=False)
        .agg(count=("dur_us", "size"), dur_us=("dur_us", "sum"), self_us=("self_us", "sum"))
        .reset_index()
    )


def _side_by_side(a: pd.DataFrame, b: pd.DataFrame, keys: list[str], ia: int, ib: int) -> pd.DataFrame:
    m = a.merge(b, on=keys, how="outer", suffixes=("_a", "_b"))
    for c in ("count_a", "count_b"):
        m[c] = m[c].fillna(0).astype("int64")
    for c in ("dur_us_a", "dur_us_b", "self_us_a", "self_us_b"):
        m[c] = m[c].fillna(0.0).astype("float64")
    m["delta_count"] = m["count_b"] - m["count_a"]
    m["delta_us"] = m["dur_us_b"] - m["dur_us_a"]
    m["error"] = [rel_error(x, y) for x, y in zip(m["dur_us_a"], m["dur_us_b"])]
    if ia and ib:
        m["per_iter_us_a"] = m["dur_us_a"] / ia
        m["per_iter_us_b"] = m["dur_us_b"] / ib
        m["delta_per_iter_us"] = m["per_iter_us_b"] - m["per_iter_us_a"]
    order = m["dur_us_a"].combine(m["dur_us_b"], max)
    return m.loc[order.sort_values(ascending=False, kind="stable").index].reset_index(drop=True)


def _gpu_side_by_side(diff: TraceDiff, a: Any, b: Any, label_b: str, ia: int, ib: int) -> None:
    """Kernel classes and paired launching ops (engine.compare.gpu_pairs), and the headline."""
    from engine.compare import gpu_pairs as gp

    per_a, per_b = (ia, ib) if ia and ib else (1, 1)
    diff.by_class = gp.by_class(a, b, label_b, per_a, per_b)
    la, lb = gp.launch_ops(a), gp.launch_ops(b)
    pairs = gp.pair_ops(la, lb)
    diff.op_pairs = {"a_ops": len(la), "b_ops": len(lb), "paired": len(pairs)}
    diff.by_op_type = gp.by_op_type(pairs, label_b, per_a, per_b)
    a_ms, b_ms = diff.e2e.get("a_ms"), diff.e2e.get("b_ms")
    if a_ms and b_ms and math.isfinite(a_ms) and math.isfinite(b_ms):
        diff.headline = gp.direction(label_b, b_ms / a_ms, "the step")


def compare_traces(a: Any, b: Any, *, labels: tuple[str, str] = ("a", "b"), bookkeeping: bool = False) -> TraceDiff:
    """Side-by-side tables of two Traces; columns suffixed `_a` (first) and `_b` (second)."""
    diff = TraceDiff()
    sa, sb = _iter_stats(a), _iter_stats(b)
    diff.e2e = {
        "a_ms": sa["median_iter_ms"],
        "b_ms": sb["median_iter_ms"],
        "error": rel_error(sa["median_iter_ms"], sb["median_iter_ms"]),
        "a_iterations": sa["iterations"],
        "b_iterations": sb["iterations"],
    }
    for label, t, s in ((labels[0], a, sa), (labels[1], b, sb)):
        diff.sides[label] = {
            "sources": [src.get("path") for src in t.meta.get("sources", [])],
            "kind": t.meta.get("kind"),
            "events": len(t.events),
            "ops": len(t.ops),
            "ranks": t.meta.get("ranks"),
            **s,
        }
    ia, ib = sa["iterations"], sb["iterations"]
    if a.has_kineto and b.has_kineto:
        keys = ["cat", "name"]
        diff.by_name = _side_by_side(_events_by(a, keys, bookkeeping), _events_by(b, keys, bookkeeping), keys, ia, ib)
        diff.by_category = _side_by_side(
            _events_by(a, ["cat"], bookkeeping), _events_by(b, ["cat"], bookkeeping), ["cat"], ia, ib
        )
        _gpu_side_by_side(diff, a, b, labels[1], ia, ib)
    elif a.has_kineto or b.has_kineto:
        diff.warnings.append("only one side has Kineto events: no timing comparison")
    if a.has_et and b.has_et:
        ca = a.ops["name"].astype(str).value_counts().rename("count_a")
        cb = b.ops["name"].astype(str).value_counts().rename("count_b")
        ops = pd.concat([ca, cb], axis=1).fillna(0).astype("int64")
        ops.index.name = "name"
        ops = ops.reset_index()
        ops["delta_count"] = ops["count_b"] - ops["count_a"]
        diff.ops_by_name = ops.sort_values(
            ["delta_count", "count_a"], key=lambda s: s.abs(), ascending=False, kind="stable"
        ).reset_index(drop=True)
    return diff
