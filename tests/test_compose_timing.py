"""Timing properties of composed benchmarks, measured with engine.compose.measure (benchmarks/compose_scaling.py prints the same figures).

Variants run alternately in one process (one iteration each per round) and are compared by the
median of per-round ratios, which cancels most of the load drift of a shared 2-core machine.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.compose import measure

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.perf  # every test here bounds a measured time ratio


def _need(*names):
    for n in names:
        p = ROOT / "sample_traces" / n / f"{n}_et.json.gz"
        if not p.exists():
            pytest.skip(f"sample trace {p} missing (regenerate with `mystique capture --all-samples`)")


def test_round_trip_within_3_percent(tmp_path, cache_dir):
    _need("mlp")
    # Two identical workloads, so the 3 % bound is tight against this shared VM's load bursts:
    # a measurement the machine disturbed is taken again once (with new rounds), never averaged.
    for attempt in range(2):
        r = measure.round_trip("mlp", rounds=16, tmp=tmp_path / f"try{attempt}")
        assert r["composed"]["skipped"] == r["original"]["skipped"] == 0
        assert r["composed"]["replayed"] == r["original"]["replayed"]
        if abs(r["paired_ratio"] - 1) <= 0.03:
            break
    assert abs(r["paired_ratio"] - 1) <= 0.03, r


def test_mlp_batch_x2_time(tmp_path, cache_dir):
    _need("mlp")
    r = measure.mlp_batch(2.0, rounds=7, tmp=tmp_path)
    assert r["x2"]["skipped"] == 0
    ratio = r["paired_ratio"]
    assert ratio >= 1.6 and ratio <= 2.4, r


def test_transformer_layer_repeat_is_linear(tmp_path, cache_dir):
    _need("transformer")
    # As in the round trip: a measurement a load burst disturbed (a fresh-clone CI run saw k4 at
    # 1.109 once, its first rounds 25 % slower than the rest) is taken again once, never averaged.
    for attempt in range(2):
        r = measure.layer_repeat((1, 2, 4), rounds=9, tmp=tmp_path / f"try{attempt}")
        if all(abs(r["paired_linearity"][k] - 1) <= 0.10 for k in ("k2", "k4")):
            break
    for k in ("k2", "k4"):
        assert abs(r["paired_linearity"][k] - 1) <= 0.10, r
    assert r["k4"]["replayed"] == 4 * r["k1"]["replayed"]
