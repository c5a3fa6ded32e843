"""Issue 13 problem 1: Compare of a composed benchmark must match ops through provenance.

A composed ET renumbers nodes (root = 1, segment by segment), so its ids are ids of *other* ops
in the original. Matching by raw id paired a composed `aten::embedding_bag` with the original's
`aten::linear`. On main at 4eb7f39 these tests fail (no `mystique_origin`, rows pair different
names); with provenance every matched pair names the same operator.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import engine.trace as et
from engine.compare import compare
from engine.compose import compose, export, spec_from_dict
from engine.replay import ReplayResult

ROOT = Path(__file__).resolve().parents[1]
DLRM = ROOT / "sample_traces" / "dlrm"


@pytest.fixture()
def composed_replay(tmp_path, cache_dir):
    et_path = DLRM / "dlrm_et.json.gz"
    if not et_path.exists():
        pytest.skip("bundled dlrm sample missing (make samples)")
    from engine.replay import ReplayConfig, replay

    original = et.load(et_path, DLRM / "dlrm_kineto.json.gz")
    ops = original.ops
    bags = ops[ops["name"].astype(str) == "aten::embedding_bag"]["id"].astype(int).tolist()
    assert bags, "the dlrm sample has embedding_bag ops"
    spec = {"sources": [str(et_path)], "segments": [{"selection": {"ids": bags[:2]}, "repeat": 2}], "name": "bags"}
    bench = compose(spec_from_dict(spec))
    res = export(bench, tmp_path / "bags")
    rank0 = Path(res["ranks"][0])
    result = replay(
        et.load(rank0, use_cache=False), config=ReplayConfig(warmup=0, iters=1, metrics=False, num_threads=1)
    )
    return original, result, rank0, bags[:2]


def test_exported_nodes_carry_provenance(composed_replay):
    from engine.compare.provenance import read_provenance

    original, _, rank0, bags = composed_replay
    prov = read_provenance(rank0)
    assert prov, "exported nodes carry mystique_origin"
    names = dict(zip(original.ops["id"].astype(int), original.ops["name"].astype(str)))
    for nid, o in prov.items():
        assert names[o["id"]] == o["name"], (nid, o)  # the provenance names the same op
    assert {o["repeat"] for o in prov.values()} == {0, 1} and {o["segment"] for o in prov.values()} == {0}
    assert {o["id"] for o in prov.values() if o["name"] == "aten::embedding_bag"} == set(bags)


def test_compare_pairs_only_same_named_ops(composed_replay):
    original, report, _, bags = composed_replay
    cmp = compare(original, report)
    per = cmp.per_op
    for col in ("original_id", "original_name", "replay_id", "replay_name"):
        assert col in per.columns
    matched = per[per["original_us"].notna()]
    assert len(matched) > 0
    assert (matched["original_name"] == matched["replay_name"]).all()
    bag_rows = per[per["replay_name"] == "aten::embedding_bag"]
    assert set(bag_rows["original_id"].astype(int)) == set(bags)
    assert cmp.matching["by"] == "provenance"
    # the JSON form (what `compare --json` prints) carries both sides on every row
    row = cmp.to_json()["per_op"][0]
    assert {"original_id", "original_name", "replay_id", "replay_name"} <= set(row)


def test_plain_id_match_refuses_different_names(cache_dir):
    """Without provenance, an id whose original op has another name is left unmatched."""
    original = et.load(DLRM / "dlrm_et.json.gz", DLRM / "dlrm_kineto.json.gz")
    linked = original.ops[original.ops["k_dur_us"].notna()].iloc[0]
    rep = {
        "iteration_ms": [1.0],
        "median_ms": 1.0,
        "per_op": [
            {"op_id": int(linked["id"]), "name": "aten::not_this_op", "category": "x", "phase": "x", "dur_us": 3.0}
        ],
        "coverage": {"selected": 1, "replayed": 1, "substituted": 0, "skipped": 0, "by_reason": {}},
    }
    cmp = compare(original, ReplayResult.from_json(rep))
    assert cmp.matching["matched"] == 0 and cmp.matching["name_mismatch"] == 1


@pytest.mark.slow
def test_distributed_tp2_replay_records_each_rank_et_and_compare_matches_every_rank(tmp_path, cache_dir):
    """Issue 21 item 5: a distributed replay of a composed TP-2 benchmark names each rank's ET and
    its sha256 (merged and per-rank replay.json), and compare maps every rank through its own
    provenance. Before: no `paths.et` in the merged result (0 of 118 ops matched; rank 1's
    replay.json named rank 0's ET)."""
    import json

    from engine.compare.inputs import load_original, load_replay_json
    from engine.replay import ReplayConfig
    from engine.replay.distributed import DistConfig, rank_inputs, replay_distributed
    from engine.trace.layout import file_sha256

    src = ROOT / "sample_traces" / "mlp"
    if not (src / "mlp_et.json.gz").exists():
        pytest.skip("bundled mlp sample missing (make samples)")
    spec = {
        "sources": [str(src / "mlp_et.json.gz")],
        "segments": [{"selection": {}}],
        "sharding": {"kind": "tp", "degree": 2},
    }
    export(compose(spec_from_dict(spec)), tmp_path / "bench")
    cfg = ReplayConfig(warmup=0, iters=1, metrics=False, num_threads=1, profile=False)
    paths = rank_inputs([], [], str(tmp_path / "bench"))["paths"]
    replay_distributed(paths, config=cfg, dist=DistConfig(), out_dir=tmp_path / "o")
    merged = json.loads((tmp_path / "o" / "replay.json").read_text())
    for r in (0, 1):
        et_file = tmp_path / "bench" / f"rank_{r}.et.json"
        sha = file_sha256(et_file)
        assert Path(merged["paths"][f"et_rank{r}"]) == et_file and merged["paths"][f"et_sha256_rank{r}"] == sha
        assert merged["ranks"][r]["et"] == str(et_file) and merged["ranks"][r]["et_sha256"] == sha
        own = json.loads((tmp_path / "o" / f"rank{r}" / "replay.json").read_text())
        assert Path(own["paths"]["et"]) == et_file and own["paths"]["et_sha256"] == sha
    assert {t["sha256"] for t in merged["source"]["traces"]} == {file_sha256(f) for f in paths}

    original, meta = load_original(src)
    cmp = compare(original, load_replay_json(tmp_path / "o"), original_meta=meta)
    m = cmp.matching
    assert m["by"] == "provenance" and m["match_rate"] >= 0.95, m
    assert [b["rank"] for b in m["by_rank"]] == [0, 1]
    for b in m["by_rank"]:  # every rank matched through its own ET (only TP's all-reduces have no original)
        assert b["matched"] >= 0.95 * (b["replay_ops"] - b["inserted"]) and b["inserted"] == 3, b
    matched = cmp.per_op[cmp.per_op["original_us"].notna()]
    assert (matched["original_name"] == matched["replay_name"]).all()
