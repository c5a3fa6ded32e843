"""The sharding benchmark's judging rules (benchmarks/simulate.py): identical plans merge, ties are
judged against a distribution-free CI. Plans composed from the DLRM sample by engine/compose."""

from __future__ import annotations

import importlib.util
import random

import pytest

from tests.conftest import ROOT, SAMPLES

_spec = importlib.util.spec_from_file_location("bench_simulate", ROOT / "benchmarks" / "simulate.py")
assert _spec and _spec.loader
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)


def _shards(plan: str, n: int) -> list[dict]:
    from engine.compose import compose, spec_from_dict

    spec = {
        "sources": [str(SAMPLES / "dlrm" / "dlrm_et.json.gz")],
        "segments": [{"selection": {}}],
        "sharding": {"kind": "embedding", "plan": plan, "ranks": n},
    }
    return compose(spec_from_dict(spec, base_dir=ROOT)).meta["sharding"]["shards"]


def test_one_rank_plans_are_one_benchmark():
    keys = {p: bench._assignment(_shards(p, 1)) for p in ("table", "row", "column", "greedy")}
    assert len(set(keys.values())) == 1


def test_equal_sizes_different_rows_stay_apart_and_rank_labels_do_not_matter():
    row, greedy = _shards("row", 2), _shards("greedy", 2)
    per_rank_rows = [
        sorted((x["table"], x["rows"]) for x in s if x["rank"] == r) for s in (row, greedy) for r in (0, 1)
    ]
    assert per_rank_rows[0] == per_rank_rows[2] and per_rank_rows[1] == per_rank_rows[3]  # same sizes per rank
    assert bench._assignment(row) != bench._assignment(greedy)  # but other row ranges: two benchmarks
    swapped = [dict(x, rank=1 - x["rank"]) for x in row]
    assert bench._assignment(swapped) == bench._assignment(row)


def test_median_ci_order_statistics_and_noise_verdict():
    assert bench._median_ci([float(i) for i in range(1, 22)]) == (6.0, 16.0)  # n=21: 6th and 16th
    rng = random.Random(0)
    a = [10 + rng.gauss(0, 0.5) for _ in range(41)]
    assert bench._paired(a, [x + rng.gauss(0, 0.5) for x in a])["within_noise"]
    far = bench._paired(a, [x - 1.0 + rng.gauss(0, 0.1) for x in a])
    assert not far["within_noise"] and far["median_ms"] == pytest.approx(1.0, abs=0.1)
