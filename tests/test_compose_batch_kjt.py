"""Batch x2 over a KeyedJaggedTensor (issue 31 item 20, TorchRec DLRM).

A KJT carries the batch inside T x B (lengths [T, B], values sum(lengths)), never as a dim 0 of
B, so no seed reaches it: the dense half doubles, the KJT keeps batch B, and a real TorchRec DLRM
failed at export validation ("fbgemm::permute_2D_sparse_data: output 1 recorded [1536], meta
[768]": the bag/TBE rules doubled the permuted values, the lengths kept B) or at replay (the
interaction `bmm`). The module below does TorchRec's input-dist pattern with plain torch and
FBGEMM's permute (no torchrec); the KJT rule (engine/compose/transforms/kjt.py) scales its
lengths, values and permute together, and a KJT op with no rule is refused at compose time.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

T, B, L, D = 4, 8, 3, 16  # tables, batch, lookups per bag, embedding dim


@pytest.fixture(scope="module")
def kjt_trace(tmp_path_factory):
    pytest.importorskip("fbgemm_gpu")
    import torch

    from engine.capture.api import capture

    torch.manual_seed(0)

    class Kjt(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.dense = torch.nn.Linear(13, D)
            self.emb = torch.nn.EmbeddingBag(100, D, mode="sum")

        def forward(self, dense, lengths, values):
            perm = torch.tensor([1, 0, 3, 2], dtype=torch.int32)
            pl, pv, _ = torch.ops.fbgemm.permute_2D_sparse_data(perm, lengths.view(T, -1), values, None, values.numel())
            offsets = torch.ops.fbgemm.asynchronous_complete_cumsum(pl.view(-1))
            pooled = self.emb(pv, offsets[:-1])  # [T * B, D], table-major
            x = torch.cat([self.dense(dense).unsqueeze(1), pooled.view(T, -1, D).transpose(0, 1)], 1)
            return torch.bmm(x, x.transpose(1, 2)).sum()

    model = Kjt()
    dense, lengths = torch.rand(B, 13), torch.full((T * B,), L, dtype=torch.long)
    values = torch.randint(0, 100, (T * B * L,))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def step():
        opt.zero_grad()
        model(dense, lengths, values).backward()
        opt.step()

    out = tmp_path_factory.mktemp("kjt")
    return capture(step, module=model, out_dir=out, name="kjt", warmup=0, timing_steps=1, threads=1)


def _spec(res, **kw) -> dict:
    return {"version": 1, "device": "cpu", "sources": [str(res.et_path)], "segments": [{"selection": {}}], **kw}


def _ops(path, name: str) -> list[dict]:
    return [n for n in json.loads(path.read_text())["nodes"] if n["name"] == name]


def test_kjt_batch_x2_scales_lengths_values_and_the_permute(kjt_trace, tmp_path):
    from engine.compose import compose, export, spec_from_dict, validate_et

    bench = compose(spec_from_dict(_spec(kjt_trace, batch_scale=2)))
    info = bench.meta["transforms"][0]
    assert (info["batch"], info["new_batch"], info["mismatches"]) == (B, 2 * B, [])
    path = Path(export(bench, tmp_path / "x2")["ranks"][0])
    # what `mystique compose` checks: every op re-run on meta tensors agrees with the written shapes
    # (before the rule: "permute_2D_sparse_data: output 1 recorded [192], meta [96]")
    assert validate_et(path)["problems"] == []
    # hand counts at batch 2B = 16: lengths [T, 2B] = [4, 16], values T x 2B x L = 192
    (perm,) = _ops(path, "fbgemm::permute_2D_sparse_data")
    assert perm["inputs"]["shapes"][:3] == [[T], [T, 2 * B], [T * 2 * B * L]]
    assert perm["inputs"]["values"][4] == T * 2 * B * L  # permuted_lengths_sum
    assert perm["outputs"]["shapes"][:2] == [[T, 2 * B], [T * 2 * B * L]]
    (cum,) = _ops(path, "fbgemm::asynchronous_complete_cumsum")
    assert cum["outputs"]["shapes"] == [[T * 2 * B + 1]]  # offsets T x B + 1
    (bag,) = _ops(path, "aten::embedding_bag")
    assert bag["inputs"]["shapes"][1:3] == [[T * 2 * B * L], [T * 2 * B]]
    assert bag["outputs"]["shapes"][0] == [T * 2 * B, D]
    # the sparse half meets the dense half at the interaction: [2B, 1 + T, D]
    assert _ops(path, "aten::bmm")[0]["inputs"]["shapes"][0] == [2 * B, 1 + T, D]


def test_kjt_op_without_a_rule_is_refused_at_compose_in_one_line(kjt_trace, tmp_path, capsys):
    from engine.cli.main import main

    doc = json.loads(gzip.decompress(kjt_trace.et_path.read_bytes()))
    for n in doc["nodes"]:  # the same inputs under a KJT op whose layout has no rule (row-wise bucketing)
        if n["name"] == "fbgemm::permute_2D_sparse_data":
            n["name"] = "fbgemm::block_bucketize_sparse_features"
    et = tmp_path / "bucket_et.json"
    et.write_text(json.dumps(doc))
    spec = tmp_path / "s.json"
    spec.write_text(json.dumps({**_spec(kjt_trace, batch_scale=2), "sources": [str(et)]}))
    assert main(["compose", str(spec), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err and str(spec) in err, err
    assert "block_bucketize_sparse_features" in err and "KeyedJaggedTensor" in err and "[[4], [4, 8], [96]]" in err
    assert not (tmp_path / "o" / "rank_0.et.json").exists()


def test_a_permute_recorded_as_an_allocation_fails_in_one_line_not_sigsegv(kjt_trace, tmp_path):
    """The permutation is `torch.tensor([...])`: the ET holds an `aten::empty` and a host copy the
    profiler does not capture, so at replay the tensor holds leftover memory (seen:
    [0, 3946, 0, 111935488]) and FBGEMM read lengths rows that far out: the replay process died
    with SIGSEGV (rc 139). The guard (engine/replay/guards.py) records the op as failed with its
    reason; the replay finishes."""
    from clirun import cli

    out = tmp_path / "run"
    r = cli("replay", kjt_trace.et_path, "--iters", "2", "--out", out, "--json", cache=None, timeout=300)
    assert r.returncode == 0, (r.returncode, r.stderr[-500:])  # before the guard: -11 (SIGSEGV)
    skipped = json.loads((out / "replay.json").read_text())["skipped_ops"]
    perms = [s for s in skipped if s["name"] == "fbgemm::permute_2D_sparse_data"]
    guard_lines = ("permute holds values outside", "permute repeats an index", "permuted lengths")
    assert all(any(g in s["detail"] for g in guard_lines) for s in perms), perms
    # the failed permute's outputs are zeros (valid lengths and indices), not leftover memory: the
    # embedding bag and its backward after it run (on main they failed, or crashed, on garbage)
    assert {s["name"] for s in skipped} == {"fbgemm::permute_2D_sparse_data"}, skipped
