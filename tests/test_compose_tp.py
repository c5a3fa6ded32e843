"""Tensor-parallel splitting of linear layers (Megatron column/row pairs) on the real samples."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import engine.trace as et
from engine.cli.main import main as cli
from engine.compose import compose, export, measure, spec_from_dict, validate_et
from engine.errors import TraceError

ROOT = Path(__file__).resolve().parents[1]


def _src(model: str) -> Path:
    p = ROOT / "sample_traces" / model / f"{model}_et.json.gz"
    if not p.exists():
        pytest.skip(f"sample trace {p} missing (regenerate with `mystique capture --all-samples`)")
    return p


def _tp(model: str, n: int):
    return compose(
        spec_from_dict(
            {"sources": [str(_src(model))], "segments": [{"selection": {}}], "sharding": {"kind": "tp", "degree": n}}
        )
    )


def _linear_weights(path: Path) -> list[tuple]:
    t = et.load(path, use_cache=False)
    ids = t.ops.loc[t.ops["name"].astype(str) == "aten::linear", "id"]
    w = t.tensors[t.tensors["op_id"].isin(ids) & (t.tensors["io"].astype(str) == "in") & (t.tensors["arg"] == 1)]
    return [tuple(s) for s in w.sort_values("op_id")["shape"]]


def test_mlp_pairs_split_weights_and_insert_allreduces(tmp_path, cache_dir):
    bench = _tp("mlp", 2)
    sh = bench.meta["sharding"]
    # 512 -> 1024 -> relu -> 1024 | 1024 -> relu -> 1024 -> 512: two column/row pairs
    assert [(p["column"]["weight"], p["row"]["weight"]) for p in sh["pairs"]] == [
        ([1024, 512], [1024, 1024]),
        ([1024, 1024], [512, 1024]),
    ]
    # forward: after each row-parallel linear; backward: after the input-gradient matmul of the
    # second column layer (the first layer's input needs no gradient)
    assert [(c["phase"], c["shape"]) for c in sh["collectives"]] == [
        ("forward", [256, 1024]),
        ("forward", [256, 512]),
        ("backward", [256, 1024]),
    ]
    assert sh["meta_check"]["unchecked"] == 0 and not sh["meta_check"]["mismatches"]
    res = export(bench, tmp_path / "tp2")
    assert sorted(int(r) for r in res["ranks"]) == [0, 1]
    for _r, p in res["ranks"].items():
        assert validate_et(p)["problems"] == []
        assert _linear_weights(Path(p)) == [(512, 512), (1024, 512), (512, 1024), (512, 512)]
        t = et.load(p, use_cache=False)
        ar = t.ops[t.ops["name"].astype(str) == "c10d::allreduce_"]
        assert len(ar) == 3
    assert _linear_weights(_src("mlp")) == [(1024, 512), (1024, 1024), (1024, 1024), (512, 1024)]


def test_transformer_splits_mlp_pairs_and_attention_by_heads(cache_dir):
    bench = _tp("transformer", 2)
    sh = bench.meta["sharding"]
    assert len(sh["pairs"]) == 2  # fc1 -> gelu -> fc2 in each block
    assert all(p["column"]["weight"] == [1024, 256] and p["row"]["weight"] == [256, 1024] for p in sh["pairs"])
    # fused in_proj [768, 256] -> view [B, T, 3, heads, d] -> SDPA -> out_proj [256, 256], per block
    assert [(a["qkv"][0]["weight"], a["out_proj"]["weight"]) for a in sh["attention"]] == [([768, 256], [256, 256])] * 2
    assert all(a["heads_ops"] == ["aten::scaled_dot_product_attention"] for a in sh["attention"])
    assert [c["phase"] for c in sh["collectives"]].count("backward") == 4
    nodes = bench.ranks[0]
    qkv = [n for n in nodes if n["name"] == "aten::linear" and n["inputs"]["shapes"][1] == [384, 256]]
    assert len(qkv) == 2  # each rank holds half the heads' q, k and v rows
    assert not [n for n in nodes if n["name"] == "aten::linear" and n["inputs"]["shapes"][1] == [768, 256]]


def test_degree_must_divide_and_models_without_pairs_are_refused(tmp_path, capsys, cache_dir):
    with pytest.raises(TraceError, match="does not divide"):
        _tp("mlp", 3)
    with pytest.raises(TraceError, match="no pair of consecutive linear layers"):
        _tp("cnn", 2)
    spec = tmp_path / "cnn_tp.json"
    spec.write_text(
        json.dumps(
            {
                "version": 1,
                "sources": [str(_src("cnn"))],
                "segments": [{"selection": {}}],
                "sharding": {"kind": "tp", "degree": 2},
            }
        )
    )
    assert cli(["compose", str(spec), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no pair of consecutive linear layers" in err[0]


@pytest.mark.perf
def test_rank_compute_scales_with_the_degree(tmp_path, cache_dir):
    """Replayed rank-0 compute of the split MLP: about 1/N of the whole (linears dominate)."""
    r = measure.tp_linear("mlp", degrees=(2,), rounds=5, tmp=tmp_path)
    assert r["tp2"]["skipped"] == 3  # the three all_reduce: collectives in a single-process replay
    assert 0.35 <= r["tp2"]["paired_ratio"] <= 0.75, r


def test_gpt2_attention_blocks_are_found_and_every_block_says_what_was_split(cache_dir):
    """GPT-2 (HF Conv1D, fused QKV [256, 768], 4 heads): the walk back from each out-projection
    reaches its fused QKV through split/view/matmul/softmax; benchmark.json's `blocks` names
    every MLP pair, every linear left whole with why, and the replicated norms/embeddings."""
    from engine.compose.shard.tp import _linears
    from engine.compose.shard.tp_attention import attention_blocks, producers_with_lists

    bench = compose(spec_from_dict({"sources": [str(_src("gpt2_hf"))], "segments": [{"selection": {}}]}))
    nodes, replay = bench.ranks[0], set(bench.replay_ids[0])
    params = set(bench.meta.get("param_storages", ()))
    lin = _linears(nodes, replay, params, bench.context.phase_of)
    blocks, _ = attention_blocks(lin, producers_with_lists(nodes, replay), set(), 2)
    assert [([c.shape for c in cols], row.shape) for cols, row, _ in blocks][:2] == [
        ([(768, 256)], (256, 256)),
        ([(768, 256)], (256, 256)),
    ]
    assert all("aten::matmul" in w.core and w.blocked is None for _, _, w in blocks)
    sh = _tp("gpt2_hf", 2)
    kinds = [b["block"] for b in sh.meta["sharding"]["blocks"]]
    assert kinds.count("mlp") == 2 and "aten::layer_norm" in kinds and "aten::embedding" in kinds
    assert all(b["split"] or b["why"] for b in sh.meta["sharding"]["blocks"])


@pytest.mark.slow
def test_gpt2_tp2_no_rank_holds_a_full_qkv_or_all_heads_and_it_replays_on_2_ranks(tmp_path, capsys, cache_dir):
    """GPT-2 (HF Conv1D addmm, fused QKV [256, 768], 4 heads of 64): each rank's ET has QKV
    weights [256, 384], attention scores over 2 heads, out-projection weights [128, 256], and the
    composed benchmark replays on 2 gloo ranks with every op run."""
    res = export(_tp("gpt2_hf", 2), tmp_path / "tp2")
    for p in res["ranks"].values():
        t = et.load(p, use_cache=False)
        ops, ten = t.ops, t.tensors
        fwd = set(ops.loc[ops["phase"].astype(str) == "forward", "id"])
        addmm = set(ops.loc[ops["name"].astype(str) == "aten::addmm", "id"]) & fwd
        w = ten[ten["op_id"].isin(addmm) & (ten["io"].astype(str) == "in") & (ten["arg"] == 2)]
        widths = sorted(tuple(s) for s in w["shape"])
        assert (256, 768) not in widths and widths.count((256, 384)) == 2, widths
        assert widths.count((128, 256)) == 2  # out-projection: input rows split
        mm = set(ops.loc[ops["name"].astype(str).isin(["aten::matmul", "aten::bmm", "aten::_softmax"]), "id"]) & fwd
        four_d = [tuple(s) for s in ten.loc[ten["op_id"].isin(mm), "shape"] if len(s) == 4]
        assert four_d and all(s[1] == 2 for s in four_d), four_d  # [B, heads/2, S, *]: never all 4 heads
    code = cli(
        ["replay", str(tmp_path / "tp2"), "--iters", "1", "--warmup", "0", "--out", str(tmp_path / "r"), "--json"]
    )
    doc = json.loads(capsys.readouterr().out)
    assert code == 0 and doc["world_size"] == 2
    assert doc["coverage"]["replayed"] == doc["coverage"]["selected"] > 0 and not doc["coverage"]["by_reason"]


def test_layout_rule_keeps_minus_one_and_splits_heads_of_a_fused_view():
    """Size lists from the samples: GPT-2's `view(-1, 256)` of its [1, 256, 256] attention output
    and the transformer's `view(B, T, 3, heads, d)` of a fused QKV. A -1 stays a -1 (it infers
    the scaled dim); a split that does not divide the outer piece (3 of q/k/v) lands on heads."""
    from engine.compose.meta_sizes import layout_candidate

    assert layout_candidate([2, 256, 256], [1, 256, 256], [-1, 256], 2.0) == [-1, 256]  # batch x2
    assert layout_candidate([1, 256, 128], [1, 256, 256], [-1, 256], 0.5) == [-1, 128]  # tp 2
    assert layout_candidate([3, 128, 384], [3, 128, 768], [3, 128, 3, 4, 64], 0.5) == [3, 128, 3, 2, 64]
    assert layout_candidate([6, 128, 768], [3, 128, 768], [3, 128, 3, 4, 64], 2.0) == [6, 128, 3, 4, 64]
