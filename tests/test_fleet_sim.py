"""Issue 22's fleet: generated rank stores (engine.testing.fleet.make_fleet_store) and the fleet
simulator (engine.simulate.fleet) against the whole-table simulator on the same ranks."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from engine.testing.fleet import make_fleet_store
from engine.trace.store.sql import connect

ROOT = Path(__file__).resolve().parents[1]
DDP0 = ROOT / "sample_traces" / "ddp" / "ddp_rank0_kineto.json.gz"


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("MYSTIQUE_CACHE_DIR", str(tmp_path / "cache"))


def _events(store: Path, sql: str = "SELECT * FROM events ORDER BY ev"):
    con = connect(store)
    try:
        return con.execute(sql).df()
    finally:
        con.close()


def test_fleet_store_copies_each_rank_with_its_own_durations(tmp_path):
    import engine.trace as et

    src = et.load(DDP0).events
    store = make_fleet_store(DDP0, 3, tmp_path / "fleet", seed=7)
    ev = _events(store)
    assert sorted(ev["rank"].unique()) == [0, 1, 2]
    assert ev["ev"].tolist() == list(range(3 * len(src)))  # ev offsets: one row id per event
    per = [ev[ev["rank"] == r].reset_index(drop=True) for r in range(3)]
    for e in per:
        assert len(e) == len(src)
        assert e["name"].tolist() == src["name"].astype(str).tolist()
        pos = src["dur_us"].to_numpy() > 0
        ratio = e["dur_us"].to_numpy()[pos] / src["dur_us"].to_numpy()[pos]
        assert ratio.min() >= 0.95 and ratio.max() <= 1.05
        # the backend's collective op keeps its end (members end together), others their start
        comm = e["name"].str.startswith("gloo:").to_numpy()
        end = (src["ts_us"] + src["dur_us"]).to_numpy()
        assert np.allclose((e["ts_us"] + e["dur_us"]).to_numpy()[comm], end[comm], rtol=0, atol=1e-6)
        assert np.array_equal(e["ts_us"].to_numpy()[~comm], src["ts_us"].to_numpy()[~comm])
    assert not np.array_equal(per[0]["dur_us"], per[1]["dur_us"])
    assert not np.array_equal(per[1]["dur_us"], per[2]["dur_us"])
    # the same seed writes the same fleet
    again = _events(make_fleet_store(DDP0, 3, tmp_path / "again", seed=7))
    assert np.array_equal(again["dur_us"].to_numpy(), ev["dur_us"].to_numpy())


def test_fleet_store_tiles_steps_in_time(tmp_path):
    import engine.trace as et

    src = et.load(DDP0).events
    store = make_fleet_store(DDP0, 2, tmp_path / "fleet", seed=0, tiles=3)
    ev = _events(store, "SELECT * FROM events WHERE rank = 1 ORDER BY ev")
    assert len(ev) == 3 * len(src)
    steps = ev[ev["name"].str.startswith("ProfilerStep#")]
    src_steps = src[src["name"].astype(str).str.startswith("ProfilerStep#")]
    assert len(src_steps) == 1 and len(steps) == 3
    assert steps["name"].nunique() == len(steps)  # renumbered per tile
    assert steps["ts_us"].is_monotonic_increasing
    ext = src["external_id"].dropna()
    assert len(ext) > 0 and ev["external_id"].dropna().nunique() == 3 * ext.nunique()  # ids unique per tile
