"""Paired, interleaved timing of composed benchmarks (the figures of benchmarks/compose_scaling.py).

Why in the package: the benchmark script prints these figures and the test suite asserts bounds
on the same measurements; one implementation serves both. Variants of one figure are prepared
once and replayed *alternately*, one iteration each per round (reversed every other round, ABBA),
so machine-load drift hits them equally; ratios are medians of per-round ratios. CPU, 1 thread.
"""

from __future__ import annotations

import statistics
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from engine.compare.fidelity import paired_ratio
from engine.resources import data_root, sample_traces_dir


def sample(name: str) -> Path:
    return sample_traces_dir() / name / f"{name}_et.json.gz"


def compose_export(spec: dict, out_dir: Path):
    """(benchmark, {rank: ET path}) for a spec dict (sources relative to the repo root)."""
    from engine.compose import compose, export, spec_from_dict

    bench = compose(spec_from_dict(spec, base_dir=data_root()))
    res = export(bench, out_dir)
    return bench, {int(r): Path(p) for r, p in res["ranks"].items()}


def alternate(traces: dict, rounds: int = 7, warmup: int = 1, clock: Callable[[], float] | None = None) -> dict:
    """Median iteration ms per named trace, running them alternately (module docstring).

    `clock` (seconds, e.g. `time.thread_time` for CPU time) times each iteration instead of
    the replay's own wall-clock measurement."""
    from engine.replay import ReplayConfig
    from engine.replay.executor import ReplaySession

    cfg = ReplayConfig(warmup=0, iters=1, metrics=False, num_threads=1)
    sessions = {k: ReplaySession(t, config=cfg) for k, t in traces.items()}
    times: dict = {k: [] for k in sessions}
    for s in sessions.values():
        s.__enter__()
    try:
        for _ in range(warmup):
            for s in sessions.values():
                s.run_iteration(measured=False)
        order = list(sessions.items())
        for i in range(rounds):
            # ABBA: the variant that runs first in a round alternates, so an order effect (the
            # first run after a switch finding caches cold) cancels instead of biasing a ratio
            for k, s in order if i % 2 == 0 else order[::-1]:
                if clock is None:
                    times[k].append(s.run_iteration(measured=True))
                else:
                    t0 = clock()
                    s.run_iteration(measured=True)
                    times[k].append((clock() - t0) * 1000)
        coverage = {k: s.finish().coverage for k, s in sessions.items()}
    finally:
        for s in reversed(list(sessions.values())):
            s.__exit__(None, None, None)
    return {
        k: {
            "median_ms": statistics.median(v),
            "runs_ms": [round(x, 3) for x in v],
            "replayed": coverage[k]["replayed"],
            "skipped": coverage[k]["skipped"],
        }
        for k, v in times.items()
    }


def _load(p: Path):
    import engine.trace as et

    return et.load(p, use_cache=False)


def round_trip(model: str = "mlp", rounds: int = 7, tmp: Path | None = None) -> dict:
    tmp = Path(tmp or tempfile.mkdtemp())
    _, paths = compose_export(
        {"sources": [str(sample(model))], "segments": [{"selection": {}, "label": "all"}]}, tmp / f"rt_{model}"
    )
    r = alternate({"original": _load(sample(model)), "composed": _load(paths[0])}, rounds)
    r["ratio"] = r["composed"]["median_ms"] / r["original"]["median_ms"]
    r["paired_ratio"] = paired_ratio(r["composed"]["runs_ms"], r["original"]["runs_ms"])
    return r


def mlp_batch(scale: float = 2.0, rounds: int = 7, tmp: Path | None = None) -> dict:
    tmp = Path(tmp or tempfile.mkdtemp())
    _, p1 = compose_export({"sources": [str(sample("mlp"))], "segments": [{"selection": {}}]}, tmp / "mlp_x1")
    _, p2 = compose_export(
        {"sources": [str(sample("mlp"))], "segments": [{"selection": {}}], "batch_scale": scale},
        tmp / f"mlp_x{scale:g}",
    )
    r = alternate({"x1": _load(p1[0]), f"x{scale:g}": _load(p2[0])}, rounds)
    r["ratio"] = r[f"x{scale:g}"]["median_ms"] / r["x1"]["median_ms"]
    r["paired_ratio"] = paired_ratio(r[f"x{scale:g}"]["runs_ms"], r["x1"]["runs_ms"])
    return r


def layer_repeat(ks=(1, 2, 4), rounds: int = 7, tmp: Path | None = None, module: str = "nn.Module: blocks.0") -> dict:
    tmp = Path(tmp or tempfile.mkdtemp())
    traces = {}
    for k in ks:
        _, p = compose_export(
            {
                "sources": [str(sample("transformer"))],
                "segments": [{"selection": {"module": module}, "repeat": k, "label": "layer"}],
            },
            tmp / f"layer_x{k}",
        )
        traces[f"k{k}"] = _load(p[0])
    r = alternate(traces, rounds)
    base = r[f"k{ks[0]}"]["median_ms"] / ks[0]
    r["linearity"] = {f"k{k}": r[f"k{k}"]["median_ms"] / (k * base) for k in ks}
    r["paired_linearity"] = {
        f"k{k}": paired_ratio(r[f"k{k}"]["runs_ms"], [x * k / ks[0] for x in r[f"k{ks[0]}"]["runs_ms"]]) for k in ks
    }
    return r


def dlrm_plans(
    ranks=(2, 4),
    plans=("table", "row", "column", "greedy"),
    rounds: int = 5,
    tmp: Path | None = None,
    clock: Callable[[], float] | None = None,
) -> dict:
    """Per-rank replay ms of each embedding plan (`clock`: as in `alternate`)."""
    tmp = Path(tmp or tempfile.mkdtemp())
    out: dict = {}
    for n in ranks:
        traces: dict = {}
        info: dict[str, Any] = {}
        for plan in plans:
            bench, paths = compose_export(
                {
                    "sources": [str(sample("dlrm"))],
                    "segments": [{"selection": {}}],
                    "sharding": {"kind": "embedding", "plan": plan, "ranks": n},
                },
                tmp / f"dlrm_{plan}_{n}",
            )
            sh = bench.meta["sharding"]
            info[plan] = {
                "lookups_per_rank": [sh["per_rank"][r]["lookups"] for r in range(n)],
                "original_lookups": sh["original_lookups"],
                "cost_per_rank": [sh["per_rank"][r]["cost"] for r in range(n)],
                "tables_per_rank": [sh["per_rank"][r]["tables"] for r in range(n)],
            }
            for r, p in paths.items():
                traces[f"{plan}/{r}"] = _load(p)
        t = alternate(traces, rounds, clock=clock)
        for plan in plans:
            per = [t[f"{plan}/{r}"]["median_ms"] for r in range(n)]
            info[plan]["rank_ms"] = [round(x, 3) for x in per]
            info[plan]["slowest_ms"] = max(per)
        info["greedy_vs_naive"] = (
            info["greedy"]["slowest_ms"] / info["table"]["slowest_ms"] if "greedy" in info and "table" in info else None
        )
        out[f"{n}_ranks"] = info
    return out


def tp_linear(model: str = "mlp", degrees=(2, 4), rounds: int = 7, tmp: Path | None = None) -> dict:
    """Tensor-parallel MLP pairs: rank-0 compute time per degree vs the unsharded benchmark."""
    tmp = Path(tmp or tempfile.mkdtemp())
    _, p1 = compose_export({"sources": [str(sample(model))], "segments": [{"selection": {}}]}, tmp / f"tp1_{model}")
    traces, info = {"tp1": _load(p1[0])}, {}
    for n in degrees:
        bench, paths = compose_export(
            {"sources": [str(sample(model))], "segments": [{"selection": {}}], "sharding": {"kind": "tp", "degree": n}},
            tmp / f"tp{n}_{model}",
        )
        sh = bench.meta["sharding"]
        info[f"tp{n}"] = {
            "pairs": len(sh["pairs"]),
            "collectives": len(sh["collectives"]),
            "comm_bytes": sum(c["bytes"] for c in sh["collectives"]),
        }
        traces[f"tp{n}"] = _load(paths[0])
    r = alternate(traces, rounds)
    for n in degrees:
        r[f"tp{n}"].update(info[f"tp{n}"])
        r[f"tp{n}"]["ratio"] = r[f"tp{n}"]["median_ms"] / r["tp1"]["median_ms"]
        r[f"tp{n}"]["paired_ratio"] = paired_ratio(r[f"tp{n}"]["runs_ms"], r["tp1"]["runs_ms"])
    r["model"] = model
    return r
