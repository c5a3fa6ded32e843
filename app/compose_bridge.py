"""The Compose page's data side: the spec dict kept in session state and its translation to
the engine's `engine.compose` objects. Kept out of the page so the page stays layout only and
tests can drive the same translation without a browser.

The spec dict *is* the engine's BenchmarkSpec JSON (version 1, see `engine.compose.spec`):
    {"version": 1, "name", "sources": [ET path], "segments": [{"selection", "source": 0,
     "repeat", "label"}], "device", "dtype", "batch_scale", "warmup", "iters", "sharding"}
plus a UI-only "trace" key (the loaded trace's name), dropped on save.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import orjson
import pandas as pd
import streamlit as st

from app.markup import md_escape
from engine.compose.shard.kinds import SHARDINGS
from engine.compose.spec import BenchmarkSpec
from engine.errors import TraceError
from engine.rules import choices

if TYPE_CHECKING:
    from engine.compose.benchmark import Benchmark
    from engine.trace.model import Trace

DTYPES = ("as traced", *(choices(BenchmarkSpec.rules_of("dtype")) or ()))  # the spec's dtype rule; null: as traced
SHARDING = ("none", *(k.value for k in SHARDINGS))  # the registry's kinds (engine.compose.shard.kinds)


def et_sources(trace, paths: list[str]) -> list[str]:
    """The ET file(s) among a loaded trace's paths (what a spec's `sources` names)."""
    ets = [s["path"] for s in trace.meta.get("sources", []) if s.get("kind") == "execution_trace"]
    return [str(p) for p in ets] or [str(paths[0])]


def spec_state(trace_name: str, trace=None, paths: list[str] | None = None) -> dict:
    specs = st.session_state.setdefault("specs", {})
    if trace_name not in specs:
        specs[trace_name] = {
            "version": 1,
            "name": "benchmark",
            "trace": trace_name,
            "sources": et_sources(trace, paths or []) if trace is not None else [],
            "segments": [],
            "device": "cpu",
            "dtype": None,
            "batch_scale": 1.0,
            "warmup": 1,
            "iters": 5,
            "sharding": None,
        }
    return specs[trace_name]


def op_table(trace, pattern: str = "") -> pd.DataFrame:
    """Replayable ops of the trace (lowest rank) as a table for row selection."""
    from engine.graph import replay_ops

    ids = replay_ops(trace)
    ops = trace.ops[trace.ops["id"].isin(ids)]
    cols = [c for c in ("id", "name", "category", "phase", "module", "k_dur_us", "gpu_dur_us") if c in ops.columns]
    t = ops[cols].copy()
    for c in ("name", "category", "phase", "module"):
        if c in t:
            t[c] = t[c].astype(str)
    if pattern:
        from engine.errors import TraceError
        from engine.user_regex import compile_user

        try:
            t = t[compile_user(pattern, "the name filter").mask(t["name"])]
        except TraceError as exc:  # a user's bad regex: shown, table unfiltered
            st.warning(md_escape(exc))
    return t.reset_index(drop=True)


def new_segment(trace, ids: list[int], *, whole_module: bool, index: int) -> dict:
    """A segment selecting `ids` (closed over call-tree descendants), or the ops of their module."""
    ops = trace.ops
    sel: dict[str, Any] = {"ids": sorted(int(i) for i in ids)}
    label = f"{len(ids)} ops"
    if whole_module and "module" in ops.columns:
        mods = sorted(set(ops[ops["id"].isin(ids)]["module"].astype(str)) - {""})
        if len(mods) == 1:
            sel, label = {"module": mods[0]}, mods[0]
        elif mods:
            members = ops[ops["module"].astype(str).isin(mods)]["id"].astype(int)
            sel, label = {"ids": sorted(set(members) | {int(i) for i in ids})}, f"{len(mods)} modules"
    return {"selection": sel, "source": 0, "repeat": 1, "label": f"segment {index + 1}: {label}"}


def describe(seg: dict) -> str:
    s = seg["selection"]
    if s.get("module"):
        return f"module {s['module']}"
    return f"{len(s.get('ids') or [])} picked ops (+ descendants)"


def folder_name(name: str) -> str:
    """A safe folder name for a benchmark name (letters, digits, `-`, `_`, `.`)."""
    import re

    out = re.sub(r"[^A-Za-z0-9._-]+", "_", name.strip()).strip("._")
    return out or "benchmark"


def export_folder(name: str, trace_hash: str, spec: dict) -> str:
    """The default export folder: the benchmark's name and a short hash of the trace's content and
    the spec, so two traces (or two specs) never share a folder by default (issue 32: exporting
    one trace's "benchmark" overwrote another's and broke its run's Compare); the same trace and
    spec export to the same folder again."""
    import hashlib
    import json

    key = json.dumps({"trace": trace_hash, "spec": spec_json(spec)}, sort_keys=True, default=str)
    return f"{folder_name(name)}-{hashlib.sha256(key.encode()).hexdigest()[:8]}"


def spec_json(spec: dict) -> dict:
    return {k: v for k, v in spec.items() if k != "trace"}


def spec_from_json(data: bytes, trace_name: str) -> dict:
    """A saved spec back into session form; validated by the engine (TraceError names the field)."""
    from engine.compose.spec import spec_from_dict

    try:
        d = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise TraceError(f"spec is not JSON: {exc}") from None
    spec = spec_from_dict(d)
    out = spec.to_dict()
    out["trace"] = trace_name
    return out


@st.cache_resource(max_entries=8, show_spinner="Composing…")
def _compose_cached(spec_key: str):
    from engine.compose.build import compose
    from engine.compose.spec import spec_from_dict

    return compose(spec_from_dict(orjson.loads(spec_key)))


def compose_spec(trace, spec: dict):
    """(benchmark, summary): summary has ops, inputs, memory_mb, ranks, op_table, inputs_table.

    The op list and memory come from the composed benchmark (rank 0); the closure table lists
    the tensors each segment reads from outside its selection (synthesized at replay).
    """
    from engine.compose.benchmark import rank_summary
    from engine.graph import select, selection_from_dict

    if not spec["segments"]:
        raise TraceError("the spec has no segment")
    bench = _compose_cached(orjson.dumps(spec_json(spec), option=orjson.OPT_SORT_KEYS).decode())
    rank0 = sorted(bench.ranks)[0]
    rs = rank_summary(bench, rank0)
    replay = set(bench.replay_ids[rank0])
    rows = [
        {"id": n["id"], "name": n["name"], "input shapes": str((n.get("inputs") or {}).get("shapes", ""))[:120]}
        for n in bench.ranks[rank0]
        if n["id"] in replay
    ]
    closures = []
    for seg in spec["segments"]:
        ext = select(trace, selection_from_dict(seg["selection"])).external_inputs
        cols = [c for c in ("tensor_id", "shape", "dtype", "numel", "device", "consumer") if c in ext.columns]
        closures.append(ext[cols].assign(segment=seg["label"]).astype({"shape": str} if "shape" in cols else {}))
    inputs = pd.concat(closures, ignore_index=True) if closures else pd.DataFrame()
    summary = {
        "ops": rs["replay_ops"],
        "inputs": rs["external_inputs"],
        "memory_mb": rs["estimated_memory_bytes"] / 2**20,
        "ranks": bench.world_size,
        "op_table": pd.DataFrame(rows),
        "inputs_table": inputs,
        "warnings": bench.meta.get("warnings", []),
    }
    return bench, summary


def export_benchmark(bench: Benchmark, out_dir: str) -> dict:
    """Write the benchmark folder; returns {"files", "et_path", "dir"} for session state."""
    from pathlib import Path

    from engine.compose.export import export

    res = export(bench, out_dir)
    ranks = res["ranks"]
    first = ranks[sorted(ranks)[0]]
    return {"dir": res["dir"], "et_path": str(first), "files": sorted(p.name for p in Path(res["dir"]).iterdir())}


EMBEDDING_OPS = (
    "aten::embedding_bag",
    "aten::_embedding_bag",
    "aten::_embedding_bag_forward_only",
    "aten::_embedding_bag_backward",
    "aten::_embedding_bag_dense_backward",
)


def sharding_report(trace: Trace, bench: Benchmark, spec: dict) -> dict | None:
    """What embedding sharding did, rank by rank (issue 13 problem 7), or None without it.

    dropped: picked replayable ops that are not embedding lookups, by name (the per-rank ETs
    hold the sharded embedding stage only, so they are left out: said, not silent);
    per_rank: tables, shards, lookups, cost, load vs the mean, weight MB, all_to_all MB and an
    estimated time = the picked ops' original embedding time x the rank's share of the cost.
    """
    info = (bench.meta or {}).get("sharding") or {}
    if info.get("kind") != "embedding":
        return None
    from collections import Counter

    from engine.graph import select, selection_from_dict
    from engine.trace.tbe import tbe_kind

    picked: list[int] = []
    for seg in spec["segments"]:
        picked += [int(i) for i in select(trace, selection_from_dict(seg["selection"])).replay_ids]
    ops = trace.ops[trace.ops["id"].isin(picked)]
    names = ops["name"].astype(str)
    # an FBGEMM TBE lookup is an embedding lookup too (sharding rewrites it to aten::embedding_bag):
    # the report called it a "non-embedding op" and summed 0 µs of embedding time (issue 32)
    emb = names.isin(EMBEDDING_OPS) | names.map(lambda n: tbe_kind(n) is not None).astype(bool)
    dropped = Counter(names[~emb].tolist())
    t_col = "gpu_dur_us" if "gpu_dur_us" in ops and ops["gpu_dur_us"].fillna(0).gt(0).any() else "k_dur_us"
    emb_us = float(ops.loc[emb.to_numpy(), t_col].fillna(0).sum()) if t_col in ops else 0.0
    per = info.get("per_rank") or {}
    costs = {int(r): float(p["cost"]) for r, p in per.items()}
    total = sum(costs.values()) or 1.0
    mean = total / max(len(costs), 1)
    rows = []
    for r in sorted(costs):
        p = per[r] if r in per else per[str(r)]
        rows.append(
            {
                "rank": r,
                "tables": ", ".join(str(t) for t in p["tables"]),
                "shards": p["shards"],
                "lookups": p["lookups"],
                "cost": p["cost"],
                "load vs mean": round(costs[r] / mean, 3) if mean else None,
                "weights MB": round(p["weight_bytes"] / 2**20, 2),
                "all_to_all MB": round(p["all_to_all_bytes"] / 2**20, 3),
                "est. embedding µs": round(emb_us * costs[r] / total, 1),
            }
        )
    return {
        "plan": info.get("plan"),
        "ranks": info.get("ranks"),
        "per_rank": pd.DataFrame(rows),
        "imbalance": max(costs.values()) / mean if costs and mean else None,
        "dropped": dict(dropped.most_common()),
        "n_dropped": int((~emb).sum()),
        "note": info.get("note", ""),
    }


def shard_time_figure(per_rank: pd.DataFrame):
    """Estimated embedding time per rank (bars), from `sharding_report`'s per-rank table."""
    import plotly.graph_objects as go

    fig = go.Figure(
        go.Bar(
            x=[f"rank {r}" for r in per_rank["rank"]],
            y=per_rank["est. embedding µs"].to_numpy(float),
            marker_color="#7c5cff",
            hovertemplate="%{x}: %{y:,.1f} µs<extra></extra>",
        )
    )
    fig.update_layout(
        height=220,
        margin=dict(l=10, r=10, t=30, b=30),
        yaxis_title="est. embedding µs",
        title="Embedding time per rank",
    )
    return fig


def rank_ops_table(bench: Benchmark, rank: int) -> pd.DataFrame:
    """The composed op list of one rank (ids, names, input shapes)."""
    replay = set(bench.replay_ids[rank])
    return pd.DataFrame(
        [
            {"id": n["id"], "name": n["name"], "input shapes": str((n.get("inputs") or {}).get("shapes", ""))[:120]}
            for n in bench.ranks[rank]
            if n["id"] in replay
        ]
    )
