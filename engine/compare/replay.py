"""Original (a loaded Trace + its capture meta) versus a replay result (`ReplayResult`).

The replay side is an `engine.replay.ReplayResult` (read from replay.json with
`ReplayResult.read`); its file contract is described once, in engine/replay/result.py.

Per-op matching: the replay labels each op with the node id of the ET it ran. For the original's
own ET that id names the same operator on both sides; a composed benchmark's ET renumbers nodes,
so its ids are mapped back through the `mystique_origin` provenance each exported node carries
(engine.compare.provenance). A distributed replay is matched rank by rank, each through the ET
that rank replayed (replay.json `ranks[i].et`); its rows carry `rank`, and the sums and groups
are the slowest rank's (one rank's step against the original's). Ops whose names differ are never paired. Each per-op row carries
both sides: `replay_id`, `replay_name`, `original_id`, `original_name` (+ `segment`, `repeat`). Original per-op times are
the linked Kineto `k_dur_us` of those ops (host time), or `gpu_dur_us` (kernel time launched
under the op) when the replay ran on a GPU and the original has GPU kernels.
Errors are relative: |replay - original| / original.

`mystique compare ORIGINAL REPLAY --json` prints `Comparison.to_json()`:

    kind         "replay"
    e2e          {original_ms, replay_ms, error, original_source, original_device,
                  replay_device, replay_iterations}   end-to-end step times and their error
    time_basis   str       "cpu" (host op time) or "gpu" (kernel time under each op)
    matching     {by, replay_ops, paired, matched, times_unknown, unknown_ids, name_mismatch,
                  match_rate, original_sum_us, replay_sum_us, sum_error, inserted, by_rank}
                           `by`: "node id" or "provenance"; paired: replayed ops paired with an
                           original op (same name) by id or provenance; matched: the paired ops
                           with an original time; times_unknown: paired ops without one (an
                           original that is an ET alone has no times); name_mismatch: pairs refused because
                           names differ; inserted: ops a composition added (no provenance in
                           a composed ET, e.g. TP all-reduces), left out of match_rate;
                           by_rank (distributed): [{rank, replay_ops, paired, matched}]
    coverage     {...}     the replay's coverage (engine/replay/result.py)
    by_phase, by_category, by_name   [{...}]  time per group, both sides and the error
    per_op       [{replay_id, replay_name, original_id, original_name, rank, segment, repeat,
                   original_us, replay_us, error}]  (segment, repeat: composed benchmarks;
                   rank: distributed replays)
    metrics      {...}     RSS / CPU / GPU metric summaries side by side
    curves       [{...}]   metric samples of both sides on a common time axis
    warnings     [str]
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pandas as pd

from engine.compare.curves import align
from engine.replay.result import ReplayResult
from engine.trace.steps import step_ms

if TYPE_CHECKING:
    from engine.trace.model import Trace


def rel_error(original: float, replay: float) -> float:
    if original is None or replay is None:
        return math.nan
    o, r = float(original), float(replay)
    if not (math.isfinite(o) and math.isfinite(r)) or o == 0:
        return math.nan
    return abs(r - o) / abs(o)


@dataclass(kw_only=True, slots=True)
class Comparison:
    """Original vs replay. Tables are DataFrames; `to_json()` gives the JSON-ready dict."""

    kind: str = "replay"
    e2e: dict[str, Any] = field(default_factory=dict)
    time_basis: str = "cpu"
    per_op: pd.DataFrame = field(default_factory=pd.DataFrame)
    by_name: pd.DataFrame = field(default_factory=pd.DataFrame)
    by_phase: pd.DataFrame = field(default_factory=pd.DataFrame)
    by_category: pd.DataFrame = field(default_factory=pd.DataFrame)
    curves: pd.DataFrame = field(default_factory=pd.DataFrame)
    metrics: dict[str, Any] = field(default_factory=dict)
    coverage: dict[str, Any] = field(default_factory=dict)
    matching: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "e2e": json_clean(self.e2e),
            "time_basis": self.time_basis,
            "matching": json_clean(self.matching),
            "coverage": self.coverage,
            "by_phase": json_records(self.by_phase),
            "by_category": json_records(self.by_category),
            "by_name": json_records(self.by_name),
            "per_op": json_records(self.per_op),
            "metrics": json_clean(self.metrics),
            "curves": json_records(self.curves),
            "warnings": list(self.warnings),
        }


def original_step_ms(trace: Trace, meta: dict[str, Any] | None) -> tuple[float, str]:
    """(median step ms, source): the capture's unprofiled median, else the profiled iterations."""
    if meta and meta.get("median_ms") is not None:
        return float(meta["median_ms"]), "capture meta median_ms (unprofiled)"
    ms = step_ms(trace)
    if ms is not None:
        return ms, "trace ProfilerStep iterations (profiled)"
    return math.nan, "unknown (no capture meta and no ProfilerStep iterations)"


def compare_replay(
    original: Trace,
    replay: ReplayResult,
    *,
    original_meta: dict[str, Any] | None = None,
    provenance: dict[int, dict] | None = None,
) -> Comparison:
    """Compare an original Trace (+ capture meta) with a replay result (see module doc)."""
    from engine.compare.checks import check_device, check_source

    path = replay.paths.get("replay_json")
    cmp = Comparison(kind="replay")
    check_source(original, replay, path, cmp.warnings)  # a replay of another trace is refused
    check_device(original, original_meta, replay, cmp.warnings)
    o_ms, source = original_step_ms(original, original_meta)
    r_ms = replay.median_step_ms  # per recorded step: an ET of N profiler steps replays N per iteration
    cmp.e2e = {
        "original_ms": o_ms,
        "replay_ms": r_ms,
        "error": rel_error(o_ms, r_ms),
        "original_source": source,
        "original_device": (original_meta or {}).get("device"),
        "replay_device": replay.device,
        "replay_iterations": len(replay.iteration_ms),
        "replay_steps_per_iteration": replay.steps_per_iteration,
    }
    cmp.coverage = dict(replay.coverage)

    ops = original.ops
    gpu = replay.device.startswith("cuda") and "gpu_dur_us" in ops and ops["gpu_dur_us"].notna().any()
    cmp.time_basis = "gpu" if gpu else "cpu"
    col = "gpu_dur_us" if gpu else "k_dur_us"
    if not original.has_et:
        cmp.warnings.append("original trace has no ET: per-op matching by node id is impossible")
    if not gpu and (col not in ops or ops[col].notna().sum() == 0):
        cmp.warnings.append(
            "original ops carry no linked Kineto durations (k_dur_us): per-op original times are unknown"
        )

    from engine.compare.provenance import rank_sides

    sides = [(None, [dict(x) for x in replay.per_op], provenance)] if provenance is not None else rank_sides(replay)
    rep = pd.concat([_replay_rows(r, rows, prov) for r, rows, prov in sides], ignore_index=True)
    by_prov = any(prov for _, _, prov in sides)
    orig = pd.DataFrame(
        {
            "original_id": ops["id"].astype("Int64") if len(ops) else pd.Series(dtype="Int64"),
            "original_name": ops["name"].astype(str) if len(ops) else pd.Series(dtype=str),
            "o_category": ops["category"].astype(str) if len(ops) else pd.Series(dtype=str),
            "o_phase": ops["phase"].astype(str) if len(ops) else pd.Series(dtype=str),
            "original_us": ops[col].astype("float64") if col in ops else math.nan,
        }
    )
    orig = orig.drop_duplicates("original_id")  # multi-rank traces: the first rank's node
    per = rep.merge(orig, on="original_id", how="left")
    found = per["original_name"].notna()
    inserted = per["inserted"].fillna(False).astype(bool) if "inserted" in per.columns else found & False
    # never pair ops whose names differ: such a pair is two different operators
    mismatch = found & (per["original_name"].astype(str) != per["replay_name"].astype(str))
    per.loc[mismatch, "original_us"] = math.nan
    per["category"] = per["o_category"].fillna(per["category"])
    per["phase"] = per["o_phase"].fillna(per["phase"])
    per = per.rename(columns={"dur_us": "replay_us"})
    per["op_id"] = per["replay_id"]  # kept for older readers: the id the replay ran
    per["name"] = per["replay_name"]
    cols = ["replay_id", "replay_name", "original_id", "original_name", "op_id", "name", "category", "phase"]
    cols += [c for c in ("rank", "segment", "repeat") if c in per.columns] + ["original_us", "replay_us"]
    per = per[cols]
    per["error"] = [rel_error(o, r) for o, r in zip(per["original_us"], per["replay_us"])]
    cmp.per_op = per.reset_index(drop=True)

    matched = per["original_us"].notna()
    paired = found & ~mismatch & ~inserted
    unknown = int((~found & ~inserted).sum())
    cmp.matching = {
        "by": "provenance" if by_prov else "node id",
        "replay_ops": len(per),
        "paired": int(paired.sum()),
        "matched": int(matched.sum()),
        "times_unknown": int((paired & ~matched).sum()),
        "unknown_ids": unknown,
        "name_mismatch": int(mismatch.sum()),
        "inserted": int(inserted.sum()),
        "match_rate": float(matched.sum() / (~inserted).sum()) if (~inserted).any() else math.nan,
        "original_sum_us": float(per.loc[matched, "original_us"].sum()),
        "replay_sum_us": float(per.loc[matched, "replay_us"].sum()),
    }
    if "rank" in per.columns:  # a distributed replay: every rank matched through its own ET
        cmp.matching["by_rank"] = [
            {
                "rank": int(r),
                "replay_ops": len(g),
                "inserted": int(inserted[g.index].sum()),
                "paired": int(paired[g.index].sum()),
                "matched": int(g["original_us"].notna().sum()),
            }
            for r, g in per.groupby("rank", sort=True)
        ]
        # sums and groups: one rank's step against the original's (the slowest rank's, as e2e)
        one = per["rank"] == int((replay.config or {}).get("slowest_rank") or sides[0][0] or 0)
        matched = matched & one
        cmp.matching["original_sum_us"] = float(per.loc[matched, "original_us"].sum())
        cmp.matching["replay_sum_us"] = float(per.loc[matched, "replay_us"].sum())
    cmp.matching["sum_error"] = rel_error(cmp.matching["original_sum_us"], cmp.matching["replay_sum_us"])
    if unknown:
        cmp.warnings.append(f"{unknown} replayed op ids are not ET node ids of the original")
    if int(mismatch.sum()):
        cmp.warnings.append(
            f"{int(mismatch.sum())} replayed ops have the id of a differently named original op: left unmatched"
        )

    both = per[matched]
    cmp.by_name = _group(both, "name")
    cmp.by_phase = _group(both, "phase")
    cmp.by_category = _group(both, "category")

    cmp.curves, summary = align((original_meta or {}).get("metrics"), replay.metrics)
    cmp.metrics = {
        "shared": summary,
        "original_summary": ((original_meta or {}).get("metrics") or {}).get("summary", {}),
        "replay_summary": (replay.metrics or {}).get("summary", {}),
    }
    cmp.metrics["starved"] = starved = cpu_starvation(summary)
    for side, flag in starved.items():
        if flag:
            s = summary["cpu_util_pct"]
            cmp.warnings.append(
                f"the {side} was CPU-starved: its process used {s[side + '_mean']:.0f}% of a core "
                f"(the other side {s[('replay' if side == 'original' else 'original') + '_mean']:.0f}%) while "
                f"the machine was {summary['sys_cpu_util_pct'][side + '_mean']:.0f}% busy; "
                "its times include waiting for a CPU and are not comparable"
            )
    return cmp


def _replay_rows(rank: int | None, rows: list[dict], provenance: dict[int, dict]) -> pd.DataFrame:
    """One side's replayed ops (summed per id), with the original's id: through the composed ET's
    provenance when it has one, else the id itself; `rank` column for a distributed replay."""
    rep = pd.DataFrame(rows, columns=["op_id", "name", "category", "phase", "dur_us"])
    rep = rep.astype({"op_id": "int64", "dur_us": "float64"})
    rep = rep.groupby("op_id", as_index=False, sort=False).agg(
        {"name": "first", "category": "first", "phase": "first", "dur_us": "sum"}
    )
    rep = rep.rename(columns={"op_id": "replay_id", "name": "replay_name"})
    if rank is not None:
        rep.insert(0, "rank", rank)
    if provenance:
        # a composed ET: its ids are renumbered, the original's id is in the node's provenance
        origin = [provenance.get(int(i)) for i in rep["replay_id"]]
        rep["inserted"] = [o is None for o in origin]  # added by the composition (TP all-reduce)
        rep["original_id"] = pd.array([o["id"] if o else None for o in origin], dtype="Int64")
        rep["segment"] = pd.array([o.get("segment") if o else None for o in origin], dtype="Int64")
        rep["repeat"] = pd.array([o.get("repeat") if o else None for o in origin], dtype="Int64")
    else:
        rep["original_id"] = rep["replay_id"].astype("Int64")
    return rep


def cpu_starvation(
    shared: dict[str, dict[str, float]], *, ratio: float = 0.75, busy_pct: float = 90.0
) -> dict[str, bool]:
    """Which side ran CPU-starved: its process got < `ratio` of the other side's CPU while the
    whole machine was >= `busy_pct` busy (another process held the cores). Why: on shared
    machines that, not the replay, is the usual cause of a large end-to-end error."""
    out = {"original": False, "replay": False}
    cpu, sys_ = shared.get("cpu_util_pct"), shared.get("sys_cpu_util_pct")
    if not cpu or not sys_:
        return out
    for side, other in (("original", "replay"), ("replay", "original")):
        mine, theirs, busy = cpu[f"{side}_mean"], cpu[f"{other}_mean"], sys_[f"{side}_mean"]
        if all(isinstance(v, float) and math.isfinite(v) for v in (mine, theirs, busy)):
            out[side] = mine < ratio * theirs and busy >= busy_pct
    return out


def _group(df: pd.DataFrame, key: str) -> pd.DataFrame:
    """Side-by-side sums per `key` over matched ops: count, original_us, replay_us, error, share."""
    cols = [key, "count", "original_us", "replay_us", "delta_us", "error", "original_share"]
    if df.empty:
        return pd.DataFrame(columns=cols)
    g = df.groupby(df[key].astype(str), sort=False).agg(
        count=("op_id", "size"), original_us=("original_us", "sum"), replay_us=("replay_us", "sum")
    )
    g = g.reset_index().rename(columns={"index": key})
    g["delta_us"] = g["replay_us"] - g["original_us"]
    g["error"] = [rel_error(o, r) for o, r in zip(g["original_us"], g["replay_us"])]
    total = g["original_us"].sum()
    g["original_share"] = g["original_us"] / total if total else math.nan
    return g.sort_values("original_us", ascending=False, kind="stable").reset_index(drop=True)[cols]


def json_records(df: pd.DataFrame) -> list[dict[str, Any]]:
    if df is None or df.empty:
        return []
    return [json_clean(r) for r in df.to_dict(orient="records")]


def json_clean(obj: Any) -> Any:
    """JSON-safe: NaN -> None, numpy scalars -> Python."""
    if isinstance(obj, dict):
        return {k: json_clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_clean(v) for v in obj]
    if hasattr(obj, "item") and not isinstance(obj, (str, bytes)):
        obj = obj.item()
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj
