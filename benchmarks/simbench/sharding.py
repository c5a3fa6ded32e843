"""Sharding: the simulator's predicted ranking of embedding sharding plans vs replay of each plan.

Cases: DLRM configurations with different table sizes and pooling skew (the bundled sample plus
fresh captures of variants on this machine), each over 2 and 4 ranks, plans table / row / column /
greedy composed by engine/compose (the benchmark that would run). Per plan the prediction is the
simulator's embedding model (engine/simulate/whatif/sharding.py, fitted on that capture's own
tables) summed over each rank's composed shards, the plan's time = its slowest rank.

Measurement: every rank ET of every plan of a case replays in one process, interleaved (ABBA
order, `rounds` rounds); a plan's time in a round = its slowest rank's replay (thread CPU ms, one
intra-op thread); its figure = the median over rounds.

Rules (also in the README):
  * Plans composing to the same per-rank shard assignment (up to rank naming) are one benchmark,
    merged before ranking ("row≡greedy").
  * Predicted pick: the lowest prediction; plans within PRED_TIE_REL (0.1 %) of it are a predicted
    tie, broken by fewer shards (fixed per-shard costs the model leaves out), then the lower raw
    prediction.
  * Strict hit: the pick is the measured fastest (lowest median).
  * Hit within noise: the pick is the measured fastest, or the paired per-round difference
    pick - fastest is not significantly above 0: its 95 % distribution-free CI (sign-test order
    statistics of the median, engine.compare.fidelity.median_ci) has a lower bound <= 0. That CI is the noise band,
    reported in ms and in % of the fastest plan's median.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from benchmarks.simbench.common import ROOT, SAMPLES, capture_step, load, load1, pair
from engine.compare.ranking import assignment, judge

# name: (table rows, pooling per table); None = the bundled sample (sample_traces/dlrm:
# rows 100k/40k/10k/2k, pooling 20 on every table)
CONFIGS: dict[str, tuple[tuple[int, ...], tuple[int, ...]] | None] = {
    "sample": None,
    "row_skew": ((400_000, 20_000, 5_000, 1_000), (20, 20, 20, 20)),
    "pooling_skew": ((50_000, 50_000, 50_000, 50_000), (80, 20, 5, 2)),
    "big_light_small_heavy": ((200_000, 150_000, 3_000, 2_000), (2, 4, 60, 40)),
    "six_tables": ((120_000, 60_000, 30_000, 15_000, 8_000, 4_000), (10, 30, 10, 30, 10, 30)),
}


def _dlrm_step(rows: tuple[int, ...], pooling: tuple[int, ...], batch: int = 1024):
    """The DLRM sample with per-table pooling (bag sizes uniform in 1 .. 2*pooling-1)."""
    import torch

    from engine.capture.models import build

    step, cfg = build("dlrm", "cpu", table_rows=tuple(rows), batch=batch)
    g = torch.Generator().manual_seed(1)
    idx, off = [], []
    for r, p in zip(rows, pooling):
        lengths = torch.randint(1, 2 * p, (batch,), generator=g)
        off.append(torch.cat([torch.zeros(1, dtype=torch.long), lengths.cumsum(0)[:-1]]))
        idx.append(torch.randint(0, r, (int(lengths.sum()),), generator=g))
    step.inputs = (step.inputs[0], tuple(idx), tuple(off))
    return step, dict(cfg, pooling=list(pooling))


def _capture(name: str, tmp: Path) -> Path:
    cfg = CONFIGS[name]
    if cfg is None:
        return SAMPLES / "dlrm"
    out = tmp / f"dlrm_{name}"
    step, meta = _dlrm_step(*cfg)
    return capture_step(step, meta, "dlrm", out, steps=1, warmup=3)  # like the bundled sample


def _replay_cpu_ms(traces: dict, rounds: int) -> dict:
    """Thread-CPU ms per iteration of each trace's replay, every round, run alternately (ABBA)."""
    from engine.compose.measure import alternate

    return {k: r["runs_ms"] for k, r in alternate(traces, rounds, warmup=1, clock=time.thread_time).items()}


def sharding(ranks=(2, 4), plans=("table", "row", "column", "greedy"), rounds: int = 31, configs=None) -> dict:
    from engine.compose import compose, export, spec_from_dict
    from engine.simulate.calibrate import calibrate
    from engine.simulate.planners import EmbeddingModel, Shard, rank_us, tables_from_trace

    calibrate("cpu", 1)  # the embedding model's microbenchmarks (cached by shape; a first run takes ~1 min)
    tmp = Path(tempfile.mkdtemp(prefix="simshard_"))
    out: dict = {"rounds": rounds, "rules": __doc__.split("Rules (also in the README):", 1)[1].strip(), "cases": {}}
    for cname in configs or CONFIGS:
        t_case = time.perf_counter()
        folder = _capture(cname, tmp)
        trace = pair(folder, "dlrm")
        tables = tables_from_trace(trace)
        model = EmbeddingModel.fit(tables)
        out.setdefault("models", {})[cname] = {"source": model.source, "scale": model.scale}
        for n in ranks:
            pred, traces, nshards, groups = {}, {}, {}, {}
            for plan in plans:
                spec = {
                    "sources": [str(folder / "dlrm_et.json.gz")],
                    "segments": [{"selection": {}}],
                    "sharding": {"kind": "embedding", "plan": plan, "ranks": n},
                }
                bench = compose(spec_from_dict(spec, base_dir=ROOT))
                key = assignment(bench.meta["sharding"]["shards"])
                if key in groups:  # same benchmark as an earlier plan: measured and ranked once
                    groups[key].append(plan)
                    continue
                groups[key] = [plan]
                res = export(bench, tmp / f"{cname}_{plan}_{n}")
                shards = [
                    Shard(table=x["table"], rank=x["rank"], rows=x["rows"], dim=x["dim"], lookups=x["lookups"])
                    for x in bench.meta["sharding"]["shards"]
                ]
                pred[plan] = max(rank_us(shards, n, model)) / 1000
                nshards[plan] = len(shards)
                for r, p in res["ranks"].items():
                    traces[f"{plan}/{r}"] = load(p)
            names = {g[0]: "≡".join(g) for g in groups.values()}
            t = _replay_cpu_ms(traces, rounds)
            per_round = {p: [max(t[f"{p}/{r}"][i] for r in range(n)) for i in range(rounds)] for p in pred}
            j = judge(pred, nshards, per_round)
            rn = {
                k: (names[v] if isinstance(v, str) else [names[x] for x in v])
                for k, v in j.items()
                if k in ("pick", "fastest", "predicted_tie", "predicted_ranking", "measured_ranking")
            }
            case = {
                "config": {"table_rows": [t_.rows for t_ in tables], "lookups": [t_.lookups for t_ in tables]},
                "shards": {names[p]: nshards[p] for p in pred},
                "predicted_ms": {names[p]: pred[p] for p in pred},
                "measured_cpu_ms": {names[p]: j["measured_ms"][p] for p in pred},
                "plan_ci95_ms": {names[p]: j["plan_ci95_ms"][p] for p in pred},
                **rn,
                **{
                    k: j[k]
                    for k in (
                        "pick_minus_fastest",
                        "noise_band_pct",
                        "strict_hit",
                        "hit_within_noise",
                        "pairwise_order_ok",
                        "pairs",
                    )
                },
                "loadavg_1m": load1(),
            }
            out["cases"][f"{cname}/{n}"] = case
            lo, hi = j["pick_minus_fastest"]["ci95_ms"]
            verdict = "hit" if case["strict_hit"] else ("hit within noise" if case["hit_within_noise"] else "MISS")
            print(
                f"  {cname}, {n} ranks: predicted {rn['predicted_ranking']} measured {rn['measured_ranking']} -> "
                f"{verdict}; pick-fastest {j['pick_minus_fastest']['median_ms']:+.3f} ms, 95 % CI [{lo:+.3f}, {hi:+.3f}]",
                flush=True,
            )
            print(
                "    "
                + ", ".join(
                    f"{names[p]} {j['measured_ms'][p]:.2f} ms (pred {pred[p]:.2f}, CI {j['plan_ci95_ms'][p][0]:.2f}-"
                    f"{j['plan_ci95_ms'][p][1]:.2f})"
                    for p in j["measured_ranking"]
                ),
                flush=True,
            )
        out["cases_wall_s"] = out.get("cases_wall_s", {}) | {cname: round(time.perf_counter() - t_case, 1)}
    cases = list(out["cases"].values())
    out["n_cases"] = len(cases)
    out["strict_hit_pct"] = 100 * sum(c["strict_hit"] for c in cases) / len(cases)
    out["hit_within_noise_pct"] = 100 * sum(c["hit_within_noise"] for c in cases) / len(cases)
    out["pairwise_order_pct"] = 100 * sum(c["pairwise_order_ok"] for c in cases) / sum(c["pairs"] for c in cases)
    print(
        f"  fastest picked: {out['hit_within_noise_pct']:.0f} % within noise, {out['strict_hit_pct']:.0f} % strict "
        f"({len(cases)} cases); pairwise order {out['pairwise_order_pct']:.0f} %",
        flush=True,
    )
    return out
