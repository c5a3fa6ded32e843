"""The sharding benchmark's judging rules (engine/compare/ranking.py, applied by
benchmarks/simbench/sharding.py): identical plans merge, picks are judged strictly and against a
distribution-free CI (engine/compare/fidelity.py). Plans composed from the DLRM sample by
engine/compose."""

from __future__ import annotations

import random

import pytest

from engine.compare import fidelity, ranking
from tests.conftest import ROOT, SAMPLES


def _shards(plan: str, n: int) -> list[dict]:
    from engine.compose import compose, spec_from_dict

    spec = {
        "sources": [str(SAMPLES / "dlrm" / "dlrm_et.json.gz")],
        "segments": [{"selection": {}}],
        "sharding": {"kind": "embedding", "plan": plan, "ranks": n},
    }
    return compose(spec_from_dict(spec, base_dir=ROOT)).meta["sharding"]["shards"]


def test_one_rank_plans_are_one_benchmark():
    keys = {p: ranking.assignment(_shards(p, 1)) for p in ("table", "row", "column", "greedy")}
    assert len(set(keys.values())) == 1


def test_equal_sizes_different_rows_stay_apart_and_rank_labels_do_not_matter():
    row, greedy = _shards("row", 2), _shards("greedy", 2)
    per_rank_rows = [
        sorted((x["table"], x["rows"]) for x in s if x["rank"] == r) for s in (row, greedy) for r in (0, 1)
    ]
    assert per_rank_rows[0] == per_rank_rows[2] and per_rank_rows[1] == per_rank_rows[3]  # same sizes per rank
    assert ranking.assignment(row) != ranking.assignment(greedy)  # but other row ranges: two benchmarks
    swapped = [dict(x, rank=1 - x["rank"]) for x in row]
    assert ranking.assignment(swapped) == ranking.assignment(row)


def test_median_ci_order_statistics_and_noise_verdict():
    assert fidelity.median_ci([float(i) for i in range(1, 22)]) == (6.0, 16.0)  # n=21: 6th and 16th
    rng = random.Random(0)
    a = [10 + rng.gauss(0, 0.5) for _ in range(41)]
    assert fidelity.paired_difference(a, [x + rng.gauss(0, 0.5) for x in a])["within_noise"]
    far = fidelity.paired_difference(a, [x - 1.0 + rng.gauss(0, 0.1) for x in a])
    assert not far["within_noise"] and far["median_ms"] == pytest.approx(1.0, abs=0.1)


def test_judge_strict_and_within_noise():
    """Strict: the pick is the measured fastest. Within noise: the paired CI of pick - fastest
    reaches 0. A pick consistently slower in every round is a miss under both rules."""
    rng = random.Random(1)
    base = [10 + rng.gauss(0, 0.3) for _ in range(31)]
    close = {"a": base, "b": [x + rng.gauss(0.05, 0.3) for x in base]}
    j = ranking.judge({"a": 1.1, "b": 1.0}, {"a": 4, "b": 4}, {"a": close["a"], "b": close["b"]})
    assert j["pick"] == "b" and j["fastest"] == "a" and not j["strict_hit"] and j["hit_within_noise"]
    apart = {"a": base, "b": [x + 1.0 for x in base]}
    j = ranking.judge({"a": 1.1, "b": 1.0}, {"a": 4, "b": 4}, apart)
    assert not j["strict_hit"] and not j["hit_within_noise"] and j["pick_minus_fastest"]["ci95_ms"][0] > 0.9
    j = ranking.judge({"a": 1.0, "b": 1.0005}, {"a": 8, "b": 4}, apart)  # predicted tie: fewer shards wins
    assert j["predicted_tie"] == ["a", "b"] and j["pick"] == "b" and not j["hit_within_noise"]


def test_embedding_model_terms_recover_a_known_cost():
    """fit_embedding recovers the knee (glibc mmap-style step), the cache size and the terms of a
    cost generated from them, and the step/miss features switch where they should."""
    import numpy as np

    from engine.simulate.costmodel import EMB_TERMS, embedding_features, fit_embedding

    knee, cache = 32.0 * 2**20, 4.0 * 2**20
    x = embedding_features([100_000, 200_000], 64, 20_000, knee, cache)
    assert x.shape == (2, len(EMB_TERMS))
    assert x[0, 4] == 0 and x[1, 4] == 200_000 * 64 * 4  # 25.6 MB below the knee, 51 MB above
    assert 0 < x[0, 5] < x[1, 5] < 20_000 * 64  # the missed share grows with the table
    true = np.array([50.0, 1e-4, 8e-4, 0.15, 3e-4, 6e-4])
    shapes = [
        (r, d, lk)
        for r in (2_000, 10_000, 50_000, 100_000, 200_000, 400_000)
        for d in (16, 64)
        for lk in (5_000, 40_000)
    ]
    rows = [
        {"rows": r, "dim": d, "lookups": lk, "t_us": float(embedding_features(r, d, lk, knee, cache) @ true)}
        for r, d, lk in shapes
    ]
    fit = fit_embedding(rows)
    assert fit["knee_bytes"] == knee and fit["cache_bytes"] == cache
    assert fit["heldout_err_pct"] < 1.0
    assert np.allclose([fit[k] for k in EMB_TERMS], true, rtol=1e-3)
