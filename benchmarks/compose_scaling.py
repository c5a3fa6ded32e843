"""Composition figures: round trip, batch scaling, layer repetition, embedding sharding plans,
tensor parallelism.

    .venv/bin/python benchmarks/compose_scaling.py [--rounds 7] [--only round_trip mlp_batch ...]

Every figure replays composed benchmarks (exported, then reloaded with engine.trace.load, as a
user would run them) with engine.replay on CPU, 1 thread (the captures' count). Variants of one
figure are prepared once and run *alternately*, one iteration each per round (in reversed order
every other round), so machine-load
drift hits them equally; each figure is the median over rounds.
  round_trip   original sample vs compose(all ops, repeat 1, scale 1): ratio (target |r-1| <= 3 %)
  mlp_batch    MLP batch x2 vs x1 (target 1.6-2.4x)
  layer_repeat one transformer decoder layer repeated k = 1, 2, 4: time / (k * time(k=1)) (target +-10 %)
  dlrm_plans   DLRM embeddings on 2 and 4 ranks: per-rank replay time per plan; slowest rank of
               greedy vs the naive table-wise round-robin; lookups per rank add up to the original
  tp_linear    MLP split tensor-parallel (Megatron column/row pairs) over 2 and 4 ranks: rank-0
               compute time / unsharded time, pairs and all_reduce bytes
Writes benchmarks/results/compose_scaling.json. Timings on a shared 2-core machine are noisy.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SAMPLES = ROOT / "sample_traces"


def sample(name: str) -> Path:
    return SAMPLES / name / f"{name}_et.json.gz"


def compose_export(spec: dict, out_dir: Path):
    """(benchmark, {rank: ET path}) for a spec dict (sources relative to the repo root)."""
    from engine.compose import compose, export, spec_from_dict

    bench = compose(spec_from_dict(spec, base_dir=ROOT))
    res = export(bench, out_dir)
    return bench, {int(r): Path(p) for r, p in res["ranks"].items()}


def alternate(traces: dict, rounds: int = 7, warmup: int = 1) -> dict:
    """Median iteration ms per named trace, running them alternately (module docstring)."""
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
                times[k].append(s.run_iteration(measured=True))
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
    r["paired_ratio"] = _paired(r["composed"]["runs_ms"], r["original"]["runs_ms"])
    return r


def _paired(a: list, b: list) -> float:
    """Median of per-round ratios a_i / b_i: adjacent runs share the machine's load."""
    return statistics.median(x / y for x, y in zip(a, b))


def mlp_batch(scale: float = 2.0, rounds: int = 7, tmp: Path | None = None) -> dict:
    tmp = Path(tmp or tempfile.mkdtemp())
    _, p1 = compose_export({"sources": [str(sample("mlp"))], "segments": [{"selection": {}}]}, tmp / "mlp_x1")
    _, p2 = compose_export(
        {"sources": [str(sample("mlp"))], "segments": [{"selection": {}}], "batch_scale": scale},
        tmp / f"mlp_x{scale:g}",
    )
    r = alternate({"x1": _load(p1[0]), f"x{scale:g}": _load(p2[0])}, rounds)
    r["ratio"] = r[f"x{scale:g}"]["median_ms"] / r["x1"]["median_ms"]
    r["paired_ratio"] = _paired(r[f"x{scale:g}"]["runs_ms"], r["x1"]["runs_ms"])
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
        f"k{k}": _paired(r[f"k{k}"]["runs_ms"], [x * k / ks[0] for x in r[f"k{ks[0]}"]["runs_ms"]]) for k in ks
    }
    return r


def dlrm_plans(
    ranks=(2, 4), plans=("table", "row", "column", "greedy"), rounds: int = 5, tmp: Path | None = None
) -> dict:
    tmp = Path(tmp or tempfile.mkdtemp())
    out: dict = {}
    for n in ranks:
        traces, info = {}, {}
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
        t = alternate(traces, rounds)
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
        r[f"tp{n}"]["paired_ratio"] = _paired(r[f"tp{n}"]["runs_ms"], r["tp1"]["runs_ms"])
    r["model"] = model
    return r


FIGURES = {
    "round_trip": round_trip,
    "mlp_batch": mlp_batch,
    "layer_repeat": layer_repeat,
    "dlrm_plans": dlrm_plans,
    "tp_linear": tp_linear,
}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--only", nargs="*", choices=sorted(FIGURES), default=None)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "compose_scaling.json"))
    args = ap.parse_args(argv)
    results: dict = {
        "rounds": args.rounds,
        "device": "cpu",
        "threads": 1,
        "time_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    with tempfile.TemporaryDirectory() as d:
        for name in args.only or list(FIGURES):
            t0 = time.perf_counter()
            kw = {"rounds": args.rounds, "tmp": Path(d)}
            if name == "dlrm_plans":
                kw["rounds"] = max(3, args.rounds - 2)
            results[name] = FIGURES[name](**kw)
            results[name]["wall_s"] = round(time.perf_counter() - t0, 1)
            _print(name, results[name])
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=2))
    print(f"wrote {args.out}")
    return 0


def _print(name: str, r: dict) -> None:
    if name == "round_trip":
        print(
            f"round trip (mlp, all ops): original {r['original']['median_ms']:.2f} ms, composed "
            f"{r['composed']['median_ms']:.2f} ms, ratio {r['ratio']:.3f} (paired {r['paired_ratio']:.3f})"
        )
    elif name == "mlp_batch":
        print(
            f"MLP batch x2: x1 {r['x1']['median_ms']:.2f} ms, x2 {r['x2']['median_ms']:.2f} ms, ratio {r['ratio']:.2f} "
            f"(paired {r['paired_ratio']:.2f})"
        )
    elif name == "layer_repeat":
        ms = ", ".join(f"{k}: {v['median_ms']:.2f} ms" for k, v in r.items() if k.startswith("k"))
        lin = ", ".join(f"{k}: {v:.3f}" for k, v in r["linearity"].items())
        pl = ", ".join(f"{k}: {v:.3f}" for k, v in r["paired_linearity"].items())
        print(f"transformer layer repeat: {ms}; time/(k*t1): {lin} (paired {pl})")
    elif name == "tp_linear":
        for k, v in r.items():
            if k.startswith("tp") and k != "tp1":
                print(
                    f"{r['model']} tensor parallel {k}: rank 0 {v['median_ms']:.2f} ms vs unsharded "
                    f"{r['tp1']['median_ms']:.2f} ms, ratio {v['ratio']:.2f} (paired {v['paired_ratio']:.2f}); "
                    f"{v['pairs']} linear pairs, {v['collectives']} all_reduce ({v['comm_bytes']:,} B)"
                )
    elif name == "dlrm_plans":
        for n, info in r.items():
            if not n.endswith("_ranks"):
                continue
            for plan, v in info.items():
                if isinstance(v, dict):
                    print(
                        f"DLRM {n} {plan:7s}: rank ms {v['rank_ms']}, slowest {v['slowest_ms']:.2f}, lookups "
                        f"{v['lookups_per_rank']} (sum {sum(v['lookups_per_rank'])} / {v['original_lookups']})"
                    )
            print(f"DLRM {n}: greedy slowest / naive slowest = {info['greedy_vs_naive']:.3f}")


if __name__ == "__main__":
    sys.exit(main())
