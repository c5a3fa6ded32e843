"""Batch x2 over a KeyedJaggedTensor (issue 31 item 20, TorchRec DLRM): refused at compose time.

A KJT carries the batch inside T x B (lengths [T, B], values sum(lengths)), never as a dim 0 of
B, so no seed reaches it: the dense half doubles, the KJT keeps batch B, and a real TorchRec DLRM
failed at export validation ("fbgemm::permute_2D_sparse_data: output 1 recorded [1536], meta
[768]") or at replay (the interaction `bmm`). The module below does TorchRec's input-dist pattern
with plain torch and FBGEMM's permute (no torchrec): until a KJT rule exists, compose refuses in
one line naming the op and what has no rule.
"""

from __future__ import annotations

import pytest

from engine.errors import TraceError

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


def _et(res):
    return res.et_path


def test_kjt_batch_x2_is_refused_at_compose_naming_the_permute(kjt_trace):
    from engine.compose import compose, spec_from_dict

    spec = {"version": 1, "device": "cpu", "sources": [str(_et(kjt_trace))], "segments": [{"selection": {}}]}
    bench = compose(spec_from_dict(dict(spec)))  # unscaled: composes
    assert bench.meta["transforms"] == []
    with pytest.raises(TraceError) as e:
        compose(spec_from_dict({**spec, "batch_scale": 2}))
    msg = str(e.value)
    assert "\n" not in msg
    # lengths [T, B] = [4, 8], values T x B x L = 96 (hand count of the module's inputs)
    assert "fbgemm::permute_2D_sparse_data" in msg and "[[4], [4, 8], [96]]" in msg, msg
    assert "KeyedJaggedTensor" in msg and "batch scale 2" in msg, msg


def test_kjt_batch_x2_cli_exits_2_in_one_line(kjt_trace, tmp_path, capsys):
    import json

    from engine.cli.main import main

    spec = tmp_path / "s.json"
    spec.write_text(
        json.dumps(
            {"version": 1, "device": "cpu", "sources": [str(_et(kjt_trace))], "segments": [{"selection": {}}]}
            | {"batch_scale": 2}
        )
    )
    assert main(["compose", str(spec), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "permute_2D_sparse_data" in err and "Traceback" not in err, err
    # refused before export: before the rule, the written ET failed validation ("output 1 recorded
    # [192], meta [96]": the bag rule doubled the permuted values, the permute's lengths kept B)
    assert "KeyedJaggedTensor" in err and str(spec) in err, err
    assert not (tmp_path / "o" / "rank_0.et.json").exists()
