"""The one kernel classifier (engine.trace.kernels) on every shared GPU trace (issue 32).

Golden facts counted from the raw JSON here: hipBLASLt/Tensile `Cijk_*` kernels are GEMMs on
AMD traces, flash-attention kernels are attention (not GEMM, though CUTLASS-templated), NCCL
kernels are communication, and no trace leaves over a quarter of its GPU time unclassified.
"""

from __future__ import annotations

import pytest
from rawjson import raw_events

from engine.trace import load
from engine.trace.kernels import KernelClass, class_shares, classify_kernel


def _kernels(path) -> list[tuple[str, float]]:
    evs = raw_events(path)
    return [
        (e["name"], float(e.get("dur", 0)))
        for e in evs
        if isinstance(e, dict) and e.get("ph") == "X" and e.get("cat") in ("kernel", "Kernel")
    ]


def _gpu_traces(manifest) -> list[dict]:
    return [m for m in manifest if m["kind"] == "kineto" and m.get("kernels")]


@pytest.mark.slow
def test_vendor_gemm_attention_and_comm_kernels(shared_traces, manifest):
    seen = {"cijk": 0, "flash": 0, "nccl": 0}
    for m in _gpu_traces(manifest):
        for name, _ in _kernels(shared_traces / m["path"]):
            if name.startswith("Cijk_"):
                seen["cijk"] += 1
                assert classify_kernel(name) is KernelClass.GEMM, name
            if "flash_fwd" in name or name.startswith("fmha"):
                seen["flash"] += 1
                assert classify_kernel(name) is KernelClass.ATTENTION, name
            if name.startswith("nccl"):
                seen["nccl"] += 1
                assert classify_kernel(name) is KernelClass.COMMUNICATION, name
    assert all(seen.values()), seen


@pytest.mark.slow
def test_class_shares_on_every_shared_gpu_trace(shared_traces, manifest, cache_dir):
    for m in _gpu_traces(manifest):
        path = shared_traces / m["path"]
        raw = _kernels(path)
        tr = load(path)
        t = class_shares(tr.events)
        kern = t[t["class"] != KernelClass.COPY.value]
        # every kernel row counted once: the classifier's kernel total is the raw count (copies of
        # memcpy/memset rows aside, which the raw count leaves out)
        assert int(t["kernels"].sum()) >= len(raw) and abs(t["share"].sum() - 1.0) < 1e-9, m["path"]
        other = float(t.loc[t["class"] == "other", "share"].sum())
        assert other <= 0.25, f"{m['path']}: {other:.0%} of GPU time unclassified"
        if "mi300" in m["path"] and "resnet" not in m["path"]:
            gemm = float(t.loc[t["class"] == "gemm", "share"].sum())
            assert gemm > 0, m["path"]
        assert len(kern) or not raw


@pytest.mark.parametrize(
    ("name", "cls"),
    [
        ("void vllm::reshape_and_cache_flash_kernel<__nv_bfloat16>", KernelClass.COPY),
        ("void vllm::rotary_embedding_kernel<c10::BFloat16, true>", KernelClass.ELEMENTWISE),
        ("vllm::_typeConvert<c10::BFloat16>::exists vllm::fused_add_rms_norm_kernel", KernelClass.NORM),
        ("void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_bf16_256x128_64x3_tn_align2>", KernelClass.GEMM),
        ("igemm_fwd_gtcx3_nhwc_bf16_bx0_ex1_bt128x128x32", KernelClass.CONV),
        ("sm80_xmma_fprop_implicit_gemm_indexed_tf32f32", KernelClass.CONV),
        ("nvjet_tst_64x64_64x16_2x1_2cta_v_bz_bias_TNT", KernelClass.GEMM),
        ("attn_fwd", KernelClass.ATTENTION),
    ],
)
def test_names_that_fooled_a_substring_rule(name, cls):
    assert classify_kernel(name) is cls
