"""vLLM's custom ops as torch stand-ins when vLLM is not installed (engine/replay/standins.py, issue 35).

Golden values: each stand-in against a result computed by hand on a tiny tensor; the schemas
against the B200 vLLM server trace's recorded "Input type" (the trace is the ground truth for the
vLLM version that ran)."""

from __future__ import annotations

import gzip
import json
import math
import subprocess
import sys

import pytest
import torch

B200 = "tracelens_b200_eager/eager_trace.json.gz"


@pytest.fixture(scope="module")
def ops():
    from engine.replay.dispatch import _packet

    for name in ("_C::rms_norm", "_C_cache_ops::reshape_and_cache_flash", "vllm::all_reduce"):
        _packet(name)  # the lazy hook defines each namespace's stand-ins
    return torch.ops


def test_rms_norm_of_a_known_vector(ops):
    x = torch.tensor([[1.0, 2.0, 3.0, 4.0]])
    out = torch.empty_like(x)
    ops._C.rms_norm(out, x, torch.tensor([1.0, 1.0, 2.0, 2.0]), 0.0)
    r = math.sqrt((1 + 4 + 9 + 16) / 4)  # 2.7386
    assert out.tolist()[0] == pytest.approx([1 / r, 2 / r, 6 / r, 8 / r], rel=1e-6)


def test_fused_add_rms_norm_updates_input_and_residual_in_place(ops):
    x, res = torch.tensor([[1.0, 1.0]]), torch.tensor([[2.0, 0.0]])
    ops._C.fused_add_rms_norm(x, res, torch.ones(2), 0.0)
    assert res.tolist() == [[3.0, 1.0]]  # residual = input + residual
    assert x.tolist()[0] == pytest.approx([3 / math.sqrt(5), 1 / math.sqrt(5)], rel=1e-6)  # rms([3, 1]) = sqrt(5)


@pytest.mark.parametrize(("is_neox", "want"), [(True, [-3.0, 2.0, 1.0, 4.0]), (False, [-2.0, 1.0, 3.0, 4.0])])
def test_rotary_embedding_rotates_query_and_key_in_place(ops, is_neox, want):
    # position 1: angles (90 deg, 0 deg): cos = [0, 1], sin = [1, 0]; cache rows are [cos | sin]
    cache = torch.tensor([[1.0, 1.0, 0.0, 0.0], [0.0, 1.0, 1.0, 0.0]])
    q = torch.tensor([[1.0, 2.0, 3.0, 4.0, 9.0, 9.0, 9.0, 9.0]])[:, :4]  # a strided view, as vLLM's q of qkv
    k = torch.tensor([[1.0, 2.0, 3.0, 4.0]]).view(1, 1, 4)  # [tokens, heads, head_size]
    ops._C.rotary_embedding(torch.tensor([1]), q, k, 4, cache, is_neox)
    # NeoX pairs (x[i], x[i + 2]); GPT-J pairs (x[2i], x[2i + 1]); each rotated by its angle
    assert q.tolist()[0] == want
    assert k.flatten().tolist() == want
    q0 = torch.tensor([[1.0, 2.0, 3.0, 4.0]])
    ops._C.rotary_embedding(torch.tensor([0]), q0, None, 4, cache, is_neox)  # angle 0: unchanged, key absent
    assert q0.tolist() == [[1.0, 2.0, 3.0, 4.0]]


def test_static_scaled_fp8_quant_divides_clamps_and_casts(ops):
    out = torch.empty(4, dtype=torch.float8_e4m3fn)
    ops._C.static_scaled_fp8_quant(out, torch.tensor([1.0, 2.0, 1000.0, -3.0]), torch.tensor(0.5))
    assert out.float().tolist() == [2.0, 4.0, 448.0, -6.0]  # 2000 clamped to e4m3fn's max 448


def test_reshape_and_cache_flash_writes_each_token_at_its_slot(ops):
    kc = torch.zeros(2, 2, 1, 2)  # [blocks, block_size, kv_heads, head_size]
    vc = torch.zeros(2, 2, 1, 2)
    key = torch.tensor([[[1.0, 2.0]], [[3.0, 4.0]]])
    slots = torch.tensor([3, 0])  # block 1 offset 1; block 0 offset 0
    ops._C_cache_ops.reshape_and_cache_flash(key, -key, kc, vc, slots, "auto", torch.tensor(1.0), torch.tensor(1.0))
    assert kc[1, 1, 0].tolist() == [1.0, 2.0] and kc[0, 0, 0].tolist() == [3.0, 4.0]
    assert vc[1, 1, 0].tolist() == [-1.0, -2.0]
    assert kc.abs().sum().item() == 10.0  # nothing else written
    fp8 = torch.zeros(2, 2, 1, 2, dtype=torch.uint8)  # vLLM's fp8 KV cache: e4m3 bytes, scaled
    ops._C_cache_ops.reshape_and_cache_flash(
        key, key, fp8, fp8.clone(), slots, "fp8", torch.tensor(2.0), torch.tensor(2.0)
    )
    assert fp8[1, 1, 0].view(torch.float8_e4m3fn).float().tolist() == [0.5, 1.0]


def test_collectives_stand_in_as_single_process_copies(ops):
    t = torch.tensor([[1.0, 2.0]])
    r = ops.vllm.all_reduce(t, "tp")
    assert r.tolist() == [[1.0, 2.0]] and r.data_ptr() != t.data_ptr()
    assert ops.vllm.all_gather(t, -1, 3, "tp").tolist() == [[1.0, 2.0, 1.0, 2.0, 1.0, 2.0]]


def test_attention_stand_in_is_causal_over_the_recorded_tokens(ops):
    # a zero query weighs every visible key alike: token 0 sees v0, token 1 the mean of v0 and v1
    q = torch.zeros(2, 2, 2)  # [tokens, 2 query heads, head_size]
    k = torch.randn(2, 1, 2)  # one KV head (grouped-query attention)
    v = torch.tensor([[[1.0, 0.0]], [[3.0, 2.0]]])
    out = torch.empty(2, 2, 2)
    ops.vllm.unified_attention_with_output(q.to(torch.float8_e4m3fn), k, v, out, "model.layers.0.attn")
    assert out[:, 0].tolist() == [[1.0, 0.0], [2.0, 1.0]] and out[:, 1].tolist() == out[:, 0].tolist()


def test_replay_counts_stand_ins_as_substituted_and_moe_as_skipped(ops):
    from engine.replay.dispatch import _packet, resolve
    from engine.replay.reasons import SkipReason
    from engine.replay.resolved import DispatchError

    res = resolve("_C::fused_add_rms_norm", "", ["Tensor(c10::BFloat16)"] * 3 + ["Double"], "cpu")
    assert res.substituted.startswith("_C::fused_add_rms_norm -> torch stand-in (")
    assert resolve("aten::relu", "", ["Tensor(float)"], "cpu").substituted == ""
    with pytest.raises(DispatchError, match="needs vLLM's forward context") as exc:
        _packet("vllm::moe_forward")
    assert exc.value.reason == SkipReason.LIBRARY_NOT_LOADED


def test_a_registered_op_is_not_replaced():
    """With real vLLM's op registered, `register` leaves it alone (checked in a fresh process:
    torch's op registry cannot forget a definition)."""
    code = (
        "import torch\n"
        "lib = torch.library.Library('_C', 'FRAGMENT')\n"
        "lib.define('rms_norm(Tensor! result, Tensor input, Tensor weight, float epsilon) -> ()')\n"
        "from engine.replay import standins\n"
        "print(sorted(standins.register('_C')), repr(standins.substitution('_C::rms_norm')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "'_C::rms_norm'," not in out and out.strip().endswith("''")
    assert "'_C::fused_add_rms_norm'" in out


def _kind(recorded: str) -> str:
    if recorded == "Scalar":
        return "scalar"
    if recorded == "":
        return "none-or-str"
    return "tensor"


def test_schemas_fit_the_b200_trace(shared_traces):
    """Each stand-in's arguments against what the vLLM server recorded: as many (defaulted
    trailing arguments aside) and of a kind that binds, tensors where tensors were recorded."""
    from engine.replay import standins

    doc = json.loads(gzip.decompress((shared_traces / B200).read_bytes()))
    first: dict[str, list[str]] = {}
    for e in doc["traceEvents"]:
        if e.get("cat") == "cpu_op" and e.get("name") in standins.SCHEMAS:
            first.setdefault(e["name"], e["args"]["Input type"])
    assert set(first) == set(standins.SCHEMAS)  # every stand-in is exercised by the trace
    for name, rec in first.items():
        args = torch._C.parse_schema(f"{name.split('::')[0]}::{standins.SCHEMAS[name]}").arguments
        required = sum(1 for a in args if not a.has_default_value())
        assert required <= len(rec) <= len(args), (name, rec)
        for r, a in zip(rec, args):
            t = str(a.type)
            want = {"tensor": ("Tensor", "Optional[Tensor]"), "scalar": ("int", "float", "bool")}.get(_kind(r))
            if want is None:  # "" is a string or None: a str or an optional argument
                assert t == "str" or t.startswith("Optional["), (name, a.name, t)
            else:
                assert t in want, (name, a.name, r, t)
    assert first["_C::static_scaled_fp8_quant"][0] == "c10::Float8_e4m3fn"  # the result comes first
