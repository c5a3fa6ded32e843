"""Batch x2 of a model-parallel DLRM (sample_traces/dlrm_a2a, 2 ranks): the embedding half scales.

Each rank pools its tables over the whole job's batch (2 ranks x 256 = 512 bags) and an
all_to_all hands every rank its 256 rows. A batch scale that doubles only the dense half leaves
512 bags against 512 dense rows, and the `cat` joining them fails at replay: the composed
benchmark must double the bags, the indices, the all_to_all and the per-rank chunks, and replay
on 2 gloo ranks; an inconsistent scaling must be refused at compose time, naming op and shapes.
"""

from __future__ import annotations

import json

import pytest
from conftest import SAMPLES

import engine.trace as et
from engine.compose import compose, export, spec_from_dict
from engine.errors import TraceError

A2A = "c10d::alltoall_base_"
WORLD = 2


def _spec(rank: int, scale: float) -> dict:
    src = SAMPLES / "dlrm_a2a" / f"dlrm_a2a_rank{rank}_et.json.gz"
    return {"version": 1, "device": "cpu", "sources": [str(src)], "segments": [{"selection": {}}], "batch_scale": scale}


def _splits(path) -> list[tuple[list[int], list[int]]]:
    """(output, input) per-peer row counts of every all_to_all: the recorded split lists, or an
    even split of dim 0 where they are empty (what `all_to_all_single` without splits does)."""
    doc = json.loads(path.read_bytes()) if path.suffix == ".json" else None
    if doc is None:
        import gzip

        doc = json.loads(gzip.decompress(path.read_bytes()))
    out = []
    for n in doc["nodes"]:
        if n["name"] != A2A:
            continue
        vals, shapes = n["inputs"]["values"], n["inputs"]["shapes"]
        pair = []
        for t, j in ((0, 3), (1, 4)):
            pair.append(list(vals[j]) if vals[j] else [shapes[t][0] // WORLD] * WORLD)
        out.append((pair[0], pair[1]))
    return out


@pytest.mark.slow
def test_dlrm_a2a_batch_x2_doubles_embeddings_and_all_to_all_and_replays_on_2_ranks(tmp_path, capsys, cache_dir):
    from engine.cli.main import main

    folder = tmp_path / "x2"
    folder.mkdir()
    for r in range(WORLD):
        bench = compose(spec_from_dict(_spec(r, 2)))
        info = bench.meta["transforms"][0]
        assert info["batch"] == 256 and info["new_batch"] == 512 and info["mismatches"] == []
        path = export(bench, tmp_path / f"r{r}")["ranks"][0]
        (folder / f"dlrm_a2a_rank{r}_et.json").write_bytes(open(path, "rb").read())
        orig = SAMPLES / "dlrm_a2a" / f"dlrm_a2a_rank{r}_et.json.gz"
        before, after = _splits(orig), _splits(folder / f"dlrm_a2a_rank{r}_et.json")
        assert len(before) == len(after) == 2  # forward rows out, gradients back
        assert after == [([2 * x for x in o], [2 * x for x in i]) for o, i in before], (before, after)
        # every bag lookup: twice the bags (offsets) and twice the lookups (pooling factor kept)
        t0, t1 = et.load(orig, use_cache=False), et.load(path, use_cache=False)
        bag = {"aten::embedding_bag"}
        ids0 = t0.ops.loc[t0.ops["name"].isin(bag), "id"].tolist()
        ids1 = t1.ops.loc[t1.ops["name"].isin(bag), "id"].tolist()
        assert len(ids0) == len(ids1) > 0
        for a, b in zip(ids0, ids1):
            x = t0.tensors[(t0.tensors.op_id == a) & (t0.tensors.io == "in")].set_index("arg")["shape"]
            y = t1.tensors[(t1.tensors.op_id == b) & (t1.tensors.io == "in")].set_index("arg")["shape"]
            assert y[2][0] == 2 * x[2][0] == 1024  # offsets: 2 ranks x 512 samples
            assert y[1][0] == 2 * x[1][0]  # indices
    code = main(
        ["replay", str(folder), "--world-size", "2", "--iters", "1", "--warmup", "0", "--no-profile"]
        + ["--out", str(tmp_path / "o"), "--json"]
    )
    cap = capsys.readouterr()
    assert code == 0, cap.err
    doc = json.loads(cap.out)
    cov = doc["coverage"]
    assert cov["comm_selected"] > 0 and cov["comm_replayed"] == cov["comm_selected"]
    assert cov["replayed"] / cov["selected"] >= 0.99, cov["by_reason"]
    for r in doc["ranks"]:
        assert r["coverage"]["replayed"] / r["coverage"]["selected"] >= 0.99, r["coverage"]


def test_inconsistent_scaling_is_refused_at_compose_naming_op_and_shapes(cache_dir, monkeypatch):
    """Without the bag rule the embedding half keeps 512 rows per rank chunk while the dense
    half doubles: the meta check must refuse at the `cat` that joins them (a tensor-list input),
    not let the replay find it."""
    import engine.compose.meta_bags as bags

    monkeypatch.setattr(bags, "bag_batch_shapes", lambda *a, **k: {})
    with pytest.raises(TraceError) as e:
        compose(spec_from_dict(_spec(0, 2)))
    msg = str(e.value)
    assert "aten::cat" in msg and "[512, 1, 64], [256, 4, 64]" in msg, msg


def test_batch_x2_of_the_two_rank_folder_composes_its_first_rank(cache_dir):
    """A multi-rank folder as the source: node and storage ids repeat across ranks, and batch
    inference read them all at once (a pandas AttributeError on the old main); it reads rank 0."""
    spec = {**_spec(0, 2), "sources": [str(SAMPLES / "dlrm_a2a")]}
    info = compose(spec_from_dict(spec)).meta["transforms"][0]
    assert info["batch"] == 256 and info["new_batch"] == 512 and info["mismatches"] == []
