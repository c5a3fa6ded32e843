"""GPU catalog for the device retarget (whatif/device.py): peak dense throughput per dtype, HBM
bandwidth, SM/CU count, a typical kernel-launch cost, each row citing its datasheet.

Peaks are dense (no 2:4 sparsity), in TFLOP/s, for the SXM/OAM part named. `fp32` is the peak an
fp32 GEMM reaches by default: NVIDIA's CUDA-core FP32 (cuBLAS runs fp32 matmuls without TF32
unless asked), AMD's FP32 matrix-core peak (hipBLASLt/rocBLAS use MFMA for fp32). A dtype a part
lacks (bf16 on V100, fp8 before Hopper/MI300) is None. `launch_us` is an order of magnitude of
the host cost of one kernel launch, not a datasheet figure; the retarget does not use it (the
target's host is assumed to be the source's) and the catalog keeps it for the report.

How the trace's own device is found (`detect`): Kineto's `deviceProperties` name, else the
kernel names (`sm90_` Hopper, `volta_` V100, hipBLASLt `Cijk_` an AMD part...), else None.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum

import numpy as np
import pandas as pd


class Vendor(str, Enum):
    NVIDIA = "nvidia"
    AMD = "amd"


class Dtype(str, Enum):
    FP32 = "fp32"
    TF32 = "tf32"
    BF16 = "bf16"
    FP16 = "fp16"
    FP8 = "fp8"


ITEMSIZE = {Dtype.FP32: 4, Dtype.TF32: 4, Dtype.BF16: 2, Dtype.FP16: 2, Dtype.FP8: 1}


@dataclass(frozen=True, slots=True, kw_only=True)
class Device:
    name: str
    vendor: Vendor
    fp32_tflops: float
    tf32_tflops: float | None
    bf16_tflops: float | None
    fp16_tflops: float | None
    fp8_tflops: float | None
    hbm_tb_s: float
    units: int  # SMs (NVIDIA) or CUs (AMD)
    launch_us: float
    source: str  # datasheet: document name and URL
    props_rx: str  # matches Kineto deviceProperties "name"

    def peak_tflops(self, dtype: Dtype) -> float | None:
        return getattr(self, f"{dtype.value}_tflops")

    def peak_or_fp32(self, dtype: Dtype) -> tuple[float, Dtype]:
        """(dense peak TFLOP/s, the dtype it is for): `dtype`'s, else the fp32 peak when the device
        has no figure for `dtype`."""
        p = self.peak_tflops(dtype)
        return (p, dtype) if p else (self.fp32_tflops, Dtype.FP32)


_NV_LAUNCH = 4.0
_AMD_LAUNCH = 5.0
CATALOG: dict[str, Device] = {
    d.name: d
    for d in (
        Device(
            name="V100", vendor=Vendor.NVIDIA, fp32_tflops=15.7, tf32_tflops=None, bf16_tflops=None,
            fp16_tflops=125.0, fp8_tflops=None, hbm_tb_s=0.9, units=80, launch_us=5.0,
            source="NVIDIA Tesla V100 GPU datasheet (SXM2), https://images.nvidia.com/content/technologies/volta/pdf/"
            "tesla-volta-v100-datasheet-letter-fnl-web.pdf; 80 SMs: NVIDIA Tesla V100 GPU Architecture whitepaper",
            props_rx=r"V100",
        ),
        Device(
            name="A100", vendor=Vendor.NVIDIA, fp32_tflops=19.5, tf32_tflops=156.0, bf16_tflops=312.0,
            fp16_tflops=312.0, fp8_tflops=None, hbm_tb_s=2.039, units=108, launch_us=_NV_LAUNCH,
            source="NVIDIA A100 Tensor Core GPU datasheet (SXM4 80GB), https://www.nvidia.com/content/dam/en-zz/"
            "Solutions/Data-Center/a100/pdf/nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf",
            props_rx=r"A100",
        ),
        Device(
            name="H100", vendor=Vendor.NVIDIA, fp32_tflops=67.0, tf32_tflops=494.7, bf16_tflops=989.4,
            fp16_tflops=989.4, fp8_tflops=1978.9, hbm_tb_s=3.35, units=132, launch_us=_NV_LAUNCH,
            source="NVIDIA H100 Tensor Core GPU datasheet (SXM5; sparse figures halved), "
            "https://resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet",
            props_rx=r"H100",
        ),
        Device(
            name="H200", vendor=Vendor.NVIDIA, fp32_tflops=67.0, tf32_tflops=494.7, bf16_tflops=989.4,
            fp16_tflops=989.4, fp8_tflops=1978.9, hbm_tb_s=4.8, units=132, launch_us=_NV_LAUNCH,
            source="NVIDIA H200 Tensor Core GPU datasheet (SXM; sparse figures halved), "
            "https://www.nvidia.com/en-us/data-center/h200/",
            props_rx=r"H200",
        ),
        Device(
            name="B200", vendor=Vendor.NVIDIA, fp32_tflops=75.0, tf32_tflops=1125.0, bf16_tflops=2250.0,
            fp16_tflops=2250.0, fp8_tflops=4500.0, hbm_tb_s=8.0, units=148, launch_us=_NV_LAUNCH,
            source="NVIDIA HGX B200 specifications (per GPU = platform / 8, sparse halved), "
            "https://www.nvidia.com/en-us/data-center/hgx/",
            props_rx=r"B200",
        ),
        Device(
            name="B300", vendor=Vendor.NVIDIA, fp32_tflops=75.0, tf32_tflops=1125.0, bf16_tflops=2250.0,
            fp16_tflops=2250.0, fp8_tflops=4500.0, hbm_tb_s=8.0, units=160, launch_us=_NV_LAUNCH,
            source="NVIDIA HGX B300 specifications (per GPU = platform / 8, sparse halved), "
            "https://www.nvidia.com/en-us/data-center/hgx/; 160 SMs: NVIDIA technical blog 'Inside NVIDIA "
            "Blackwell Ultra: The Chip Powering the AI Factory Era' (2025)",
            props_rx=r"B300",
        ),
        Device(
            name="MI250X", vendor=Vendor.AMD, fp32_tflops=47.85, tf32_tflops=None, bf16_tflops=191.5,
            fp16_tflops=191.5, fp8_tflops=None, hbm_tb_s=1.6384, units=110, launch_us=_AMD_LAUNCH,
            source="AMD Instinct MI250X accelerator datasheet (OAM figures halved: one GCD, which is what one "
            "PyTorch device is), https://www.amd.com/system/files/documents/amd-instinct-mi200-datasheet.pdf",
            props_rx=r"MI250",
        ),
        Device(
            name="MI300X", vendor=Vendor.AMD, fp32_tflops=163.4, tf32_tflops=653.7, bf16_tflops=1307.4,
            fp16_tflops=1307.4, fp8_tflops=2614.9, hbm_tb_s=5.3, units=304, launch_us=_AMD_LAUNCH,
            source="AMD Instinct MI300X accelerator datasheet (OAM), https://www.amd.com/content/dam/amd/en/documents/"
            "instinct-tech-docs/data-sheets/amd-instinct-mi300x-data-sheet.pdf",
            props_rx=r"MI300",
        ),
        Device(
            name="MI355X", vendor=Vendor.AMD, fp32_tflops=157.3, tf32_tflops=None, bf16_tflops=2516.6,
            fp16_tflops=2516.6, fp8_tflops=5033.2, hbm_tb_s=8.0, units=256, launch_us=_AMD_LAUNCH,
            source="AMD Instinct MI355X GPU specifications (OAM), "
            "https://www.amd.com/en/products/accelerators/instinct/mi350/mi355x.html; 256 CUs (8 XCDs x 32): AMD "
            "CDNA 4 architecture whitepaper",
            props_rx=r"MI35\dX",
        ),
    )
}  # fmt: skip

# kernel-name hints of the device (first match wins): architecture-specific library kernels
_NAME_HINTS: tuple[tuple[str, str], ...] = (
    (r"sm100_|sm_100|tcgen05", "B200"),
    (r"sm90_|nvjet|sm_90", "H100"),
    (r"sm80_|ampere_|sm_80", "A100"),
    (r"volta_|sm70_|sm_70", "V100"),
    (r"gfx950", "MI355X"),
    (r"gfx90a", "MI250X"),
    (r"gfx942|Cijk_", "MI300X"),  # hipBLASLt/Tensile without an ISA tag: the MI300X (a guess)
)


# (vendor, computeMajor, computeMinor) -> catalog name, when deviceProperties' name does not say
_CC: dict[tuple[Vendor, int, int], str] = {
    (Vendor.NVIDIA, 7, 0): "V100",
    (Vendor.NVIDIA, 8, 0): "A100",
    (Vendor.NVIDIA, 9, 0): "H100",  # H200 too: told apart by memory below
    (Vendor.NVIDIA, 10, 0): "B200",
    (Vendor.NVIDIA, 10, 3): "B300",
    (Vendor.AMD, 9, 0): "MI250X",  # gfx90a (gfx908, the MI100, reports 9.0 as well)
    (Vendor.AMD, 9, 4): "MI300X",  # gfx942
    (Vendor.AMD, 9, 5): "MI355X",  # gfx950
}


def from_props(props: list) -> tuple[str | None, str, str]:
    """(catalog name or None, how, the device's own name) from Kineto `deviceProperties`' first
    device: its name, else (AMD parts often report a generic name such as 'AMD Radeon Graphics') its
    compute capability."""
    for p in props or []:
        if not isinstance(p, dict):
            continue
        name = str(p.get("name", ""))
        for d in CATALOG.values():
            if re.search(d.props_rx, name, re.IGNORECASE):
                return d.name, "deviceProperties name", name
        vendor = Vendor.AMD if p.get("warpSize") == 64 or "amd" in name.lower() else Vendor.NVIDIA
        if vendor == Vendor.NVIDIA and name:  # NVIDIA names the product: one the catalog lacks is not guessed
            return None, "deviceProperties name", name
        cc = (vendor, int(p.get("computeMajor", -1)), int(p.get("computeMinor", -1)))
        dev = _CC.get(cc)
        if dev == "H100" and float(p.get("totalGlobalMem", 0)) > 100e9:
            dev = "H200"
        how = f"deviceProperties compute capability {cc[1]}.{cc[2]}"
        return dev, how, name
    return None, "", ""


def from_kernel_names(names: pd.Series) -> str | None:
    """Catalog name guessed from the GPU kernel names (None when no name tells)."""
    uniq = pd.unique(names.astype(str))
    for rx, dev in _NAME_HINTS:
        pat = re.compile(rx)
        if any(pat.search(n) for n in uniq):
            return dev
    return None


def detect(props: list, kernel_names: pd.Series) -> tuple[str | None, str]:
    """(catalog name or None, how it was found, or why not) for a trace: deviceProperties first;
    the kernel names only when the trace has no deviceProperties."""
    dev, how, seen = from_props(props)
    if dev is not None:
        return dev, how
    if seen:
        return None, f"deviceProperties names {seen!r}, which the catalog does not hold"
    dev = from_kernel_names(kernel_names)
    if dev is not None:
        return dev, "kernel names"
    return None, "no deviceProperties and no kernel name that tells the GPU"


# dtype hints in kernel names (first match wins)
_DTYPE_HINTS: tuple[tuple[Dtype, re.Pattern], ...] = tuple(
    (dt, re.compile(rx, re.IGNORECASE))
    for dt, rx in (
        (Dtype.FP8, r"fp8|e4m3|e5m2|f8f6f4|_F8"),
        (Dtype.BF16, r"bf16|bfloat16|Cijk_\w*?_B_BS_|_BBS_|_BSS_"),
        (Dtype.FP16, r"fp16|f16|half|hgemm|h884|h1688|h16816|Cijk_\w*?_H_HS_|_HHS_|_HSS_"),
        (Dtype.TF32, r"tf32|xf32|tensorop_s\d*gemm|nvjet_tst"),  # Ampere+ float GEMMs on tensor cores run TF32
        (Dtype.FP32, r"sgemm|scudnn|Cijk_\w*?_S_S|_SB_|f32f32_f32"),
    )
)


def kernel_dtype(name: str) -> Dtype | None:
    for dt, rx in _DTYPE_HINTS:
        if rx.search(name):
            return dt
    return None


def dtypes(names: np.ndarray) -> np.ndarray:
    """Dtype hint (or None) per kernel name, one regex pass per distinct name."""
    memo: dict[str, Dtype | None] = {}
    return np.array([memo.setdefault(n, kernel_dtype(n)) if n not in memo else memo[n] for n in names], dtype=object)


__all__ = ["CATALOG", "ITEMSIZE", "Device", "Dtype", "Vendor", "detect", "dtypes", "kernel_dtype"]
