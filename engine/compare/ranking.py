"""Did the simulator pick the plan that measured fastest? The judging rules of a predicted ranking.

Why in the engine: the sharding benchmark (benchmarks/simbench/sharding.py) applies them to its
measurements, and tests check the rules themselves; rules a test checks belong where the test
can import them without the benchmark scripts. The rules:

  * Plans composing to the same per-rank shard assignment (up to rank naming) are one benchmark,
    merged before ranking (`assignment`).
  * Predicted pick: the lowest prediction; plans within PRED_TIE_REL (0.1 %) of it are a predicted
    tie, broken by fewer shards (fixed per-shard costs the model leaves out), then the lower raw
    prediction.
  * Strict hit: the pick is the measured fastest (lowest median).
  * Hit within noise: the pick is the measured fastest, or the paired per-round difference
    pick - fastest is not significantly above 0: its 95 % distribution-free CI
    (engine.compare.fidelity.median_ci) has a lower bound <= 0.
"""

from __future__ import annotations

import statistics

from engine.compare.fidelity import median_ci, paired_difference

PRED_TIE_REL = 1e-3  # predicted gaps under 0.1 % are below the embedding model's resolution


def assignment(shards: list[dict]) -> tuple:
    """What a composed plan runs, up to rank naming: per rank the set of (table, row/col range,
    lookups) it serves. Equal keys are the same benchmark (rank labels do not change any rank's work)."""
    per: dict = {}
    for x in shards:
        per.setdefault(x["rank"], []).append(
            (x["table"], x["row_offset"], x["rows"], x["col_offset"], x["dim"], x["lookups"])
        )
    return tuple(sorted(tuple(sorted(v)) for v in per.values()))


def judge(pred: dict, nshards: dict, per_round: dict) -> dict:
    """Pick, measured ranking and verdicts of one case (rules in the module docstring)."""
    meas = {p: statistics.median(v) for p, v in per_round.items()}
    best = min(pred.values())
    tied = [p for p in pred if pred[p] <= best * (1 + PRED_TIE_REL)]
    pick = min(tied, key=lambda p: (nshards[p], pred[p]))
    p_rank = [pick] + sorted((p for p in pred if p != pick), key=lambda p: pred[p])
    m_rank = sorted(pred, key=lambda p: meas[p])
    fastest = m_rank[0]
    vs = paired_difference(per_round[pick], per_round[fastest])
    lo, hi = vs["ci95_ms"]
    pairs = [(a, b) for i, a in enumerate(p_rank) for b in p_rank[i + 1 :]]
    return {
        "pick": pick,
        "fastest": fastest,
        "predicted_tie": tied if len(tied) > 1 else [],
        "predicted_ranking": p_rank,
        "measured_ranking": m_rank,
        "measured_ms": meas,
        "plan_ci95_ms": {p: list(median_ci(v)) for p, v in per_round.items()},
        "pick_minus_fastest": vs,
        "noise_band_pct": [100 * lo / meas[fastest], 100 * hi / meas[fastest]],
        "strict_hit": pick == fastest,
        "hit_within_noise": pick == fastest or lo <= 0,
        "pairwise_order_ok": sum(meas[a] <= meas[b] for a, b in pairs),
        "pairs": len(pairs),
    }


__all__ = ["PRED_TIE_REL", "assignment", "judge"]
