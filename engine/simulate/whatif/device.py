"""Device retarget: predict each GPU task's time on another GPU of the catalog (engine/simulate/
devices.py).

How, per kernel class (engine.trace.kernels):
- gemm, conv, attention (compute classes): a roofline per kernel. Where the launching op's
  recorded input dims give both the FLOPs and the bytes moved (mm/addmm/bmm/SDPA: operands and
  result), the kernel's bound on a device is max(FLOPs / peak FLOP/s for its dtype, bytes / HBM
  bandwidth), and its time scales by the ratio of the two devices' bounds: a GEMM whose arithmetic
  intensity is below both ridge points (a batched attention matmul with K = 64) scales with
  bandwidth, one above both with FLOP/s, one between them partly with each. The dtype comes from
  the kernel name (bf16, fp16, tf32, fp8), else the trace's most common GEMM dtype, else fp32.
  Without dims (no Input Dims; conv, whose Kineto inputs lack the output dims), the FLOP/s ratio.
  A curve t = a + FLOPs / rate is fitted on the trace itself: `rate / peak` is the class's
  efficiency, `a` a fixed per-kernel cost (ramp, tail, small-tile latency) that does not scale;
  only t - a scales.
- elementwise, norm, copy, embedding, other (memory-bound): the HBM bandwidth ratio, above a fixed
  cost fitted the same way on the bytes of the launching op's inputs.
- host-link copies (Memcpy HtoD / DtoH / HtoH, pageable or pinned): unchanged; they run at the
  PCIe/host link's speed, not HBM's, and the target's host side is assumed to be the source's.
- communication: unchanged (the catalog holds no interconnect figures).
A dtype the target (or source) lacks falls back to its fp32 peak; the report says which classes
fell back to what.

Assumptions: the target's host (CPU, driver, launch cost, host link) is the source's, kernels run
the same algorithms reaching the same fraction of the roofline as on the source (across vendors
their libraries often pick other kernels for a shape: benchmarks/ground_truth.py measures the
error), fixed per-kernel costs do not change; peaks are the datasheets' dense figures;
interconnect unchanged.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Annotated

import numpy as np

from engine.rules import OneOf
from engine.simulate.costmodel import fit_curve, gemm_flops, memory_bytes
from engine.simulate.whatif.launch_ops import task_dims
from engine.simulate.whatif.spec import Edit, SpecError, register
from engine.trace.devices import CATALOG, ITEMSIZE, Device, Dtype, detect, dtypes
from engine.trace.kernels import MEMORY_BOUND, KernelClass, kernel_classes

if TYPE_CHECKING:
    from engine.simulate.whatif.context import EditContext

COMPUTE = (KernelClass.GEMM, KernelClass.CONV, KernelClass.ATTENTION)
BANDWIDTH = (*MEMORY_BOUND, KernelClass.OTHER)
COMPUTE_VALUES = frozenset(c.value for c in COMPUTE)


HOST_LINK = re.compile(r"^Memcpy (HtoD|DtoH|HtoH)\b")


def gemm_bytes(name: str, ins: list, itemsize: float) -> float | None:
    """Bytes a matmul-like op moves at least once: its operands and its result (None when the
    dims don't fit; the same ops as costmodel.gemm_flops, less conv)."""
    n = name.split("::")[-1]
    try:
        if n in ("mm", "matmul") and len(ins) >= 2 and len(ins[0]) == 2 and len(ins[1]) == 2:
            (m, k), (_, nn) = ins[0], ins[1]
            return float(m * k + k * nn + m * nn) * itemsize
        if n == "addmm" and len(ins) >= 3:
            (m, k), (_, nn) = ins[1], ins[2]
            return float(m * k + k * nn + m * nn + nn) * itemsize
        if n in ("bmm", "baddbmm") and len(ins) >= 2:
            x, y = (ins[0], ins[1]) if n == "bmm" else (ins[1], ins[2])
            return float(x[0] * (x[1] * x[2] + y[1] * y[2] + x[1] * y[2])) * itemsize
        if "scaled_dot_product" in n and len(ins) >= 3 and len(ins[0]) == 4:
            bs, h, lq, e = ins[0]
            s = ins[1][2]
            return float(bs * h * (2 * lq * e + 2 * s * e)) * itemsize  # Q, O; K, V (scores stay on chip)
    except (IndexError, TypeError, ValueError):
        return None
    return None


def _peak(dev: Device, dt: Dtype) -> tuple[float, Dtype]:
    return dev.peak_or_fp32(dt)


def _work(g, events, trace, gpu: np.ndarray, cls: np.ndarray, item: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per GPU task: FLOPs (compute classes) or input bytes (the rest) of the innermost op around
    its launch whose recorded dims give them, and for compute classes the bytes that op moves
    (operands and result); NaN where none does."""
    dims = task_dims(g, events, trace)
    out = np.full(len(gpu), np.nan)
    moved = np.full(len(gpu), np.nan)
    if not dims:
        return out, moved
    parent = g.tasks["parent"].to_numpy(np.int64)
    names = g.tasks["name"].astype(str).to_numpy()
    for k, i in enumerate(gpu.tolist()):
        h = int(g.launcher[i])
        for _ in range(64):
            if h < 0:
                break
            ins = dims.get(h)
            if ins is not None:
                if cls[k] in COMPUTE_VALUES:
                    w = gemm_flops(names[h], list(ins), [])
                    b = gemm_bytes(names[h], list(ins), float(item[k])) if w else None
                else:
                    w, b = memory_bytes(names[h], list(ins), [], float(item[k])), None
                if w:
                    out[k] = w
                    if b:
                        moved[k] = b
                    break
            h = int(parent[h])
    return out, moved


@register("device")
class DeviceRetarget(Edit):
    target: Annotated[str, OneOf(CATALOG)]
    source_device: Annotated[str | None, OneOf(CATALOG)] = None  # when the trace does not tell

    def apply(self, ctx: EditContext) -> None:
        g = ctx.graph
        t = g.tasks
        gpu = np.flatnonzero(t["gpu"].to_numpy(bool))
        if not len(gpu):
            raise SpecError("target", "the trace has no GPU work to retarget")
        if self.source_device is not None:
            src_name, how = self.source_device, "given"
        else:
            found, how = detect(ctx.trace.meta.get("device_properties") or [], t["name"].iloc[gpu])
            if found is None:
                raise SpecError(
                    "source_device",
                    f"cannot tell which GPU the trace ran on ({how}); give source_device, one of {sorted(CATALOG)}",
                )
            src_name = found
        src, tgt = CATALOG[src_name], CATALOG[self.target]
        names = t["name"].astype(str).to_numpy()[gpu]
        cls = kernel_classes(t.iloc[gpu]).astype(str)  # class values
        hint = dtypes(names)
        compute = np.isin(cls, [c.value for c in COMPUTE])
        hinted = [d for d, c in zip(hint, compute) if c and d is not None]
        default = max(set(hinted), key=hinted.count) if hinted else Dtype.FP32
        dt = np.array([d if d is not None else default for d in hint], dtype=object)
        item = np.array([ITEMSIZE[d] for d in dt], np.float64)
        dur = t["dur_us"].to_numpy(np.float64)[gpu]
        work, moved = _work(g, ctx.events, ctx.trace, gpu, cls, item)
        link = np.array([bool(HOST_LINK.match(n)) for n in names])
        new = dur.copy()
        classes: dict[str, dict] = {}
        for c in KernelClass:
            m = m_all = cls == c.value
            if not m.any():
                continue
            row: dict = {"kernels": int(m.sum()), "ms_before": round(float(dur[m].sum()) / 1e3, 3)}
            if c == KernelClass.COMMUNICATION:
                row.update(model="unchanged (no interconnect in the catalog)", ratio=1.0)
            elif link[m].all():
                row.update(model="unchanged (host-link copies: the host side is assumed equal)", ratio=1.0)
            else:
                if link[m].any():  # host-link copies keep their time; the class's HBM copies scale
                    row["host_link_unchanged"] = int(link[m].sum())
                    m = m & ~link
                bound = "FLOP/s" if c in COMPUTE else "HBM bandwidth"
                if c in COMPUTE:
                    ratio = np.empty(int(m.sum()))
                    falls = set()
                    for k, d in enumerate(dt[m]):
                        (ps, ds), (pt, dtt) = _peak(src, d), _peak(tgt, d)
                        ratio[k] = ps / pt
                        if ds != d or dtt != d:
                            falls.add(f"{d.value} -> fp32 peak ({src.name if ds != d else tgt.name} has no {d.value})")
                    if falls:
                        row["fallback_dtype"] = sorted(falls)
                    peak_src = np.array([_peak(src, d)[0] for d in dt[m]])
                    row["dtypes"] = sorted({d.value for d in dt[m]})
                    # roofline: where the op's dims give FLOPs and bytes, the ratio of the two
                    # devices' bounds max(FLOPs / peak, bytes / bandwidth) (TFLOP/s and TB/s: the
                    # same 1e12 scale, so FLOPs / TFLOP/s and bytes / TB/s compare directly)
                    fl, by = work[m], moved[m]
                    ok = np.isfinite(fl) & np.isfinite(by) & (fl > 0) & (by > 0)
                    if ok.any():
                        bound = "roofline (FLOP/s or HBM bandwidth, per kernel)"
                        peak_tgt = np.array([_peak(tgt, d)[0] for d in dt[m]])
                        t_src = np.maximum(fl / peak_src, by / src.hbm_tb_s)
                        t_tgt = np.maximum(fl / peak_tgt, by / tgt.hbm_tb_s)
                        ratio = np.where(ok, t_tgt / np.where(ok, t_src, 1.0), ratio)
                        mem = ok & (by / src.hbm_tb_s > fl / peak_src)
                        row["roofline"] = {
                            "kernels": int(ok.sum()),
                            "memory_bound_on_source": int(mem.sum()),
                            "memory_bound_ms_before": round(float(dur[m][mem].sum()) / 1e3, 3),
                        }
                else:
                    ratio = np.full(int(m.sum()), src.hbm_tb_s / tgt.hbm_tb_s)
                    peak_src = np.full(int(m.sum()), src.hbm_tb_s)
                w, tt = work[m], dur[m]
                fit = fit_curve(w[np.isfinite(w)], tt[np.isfinite(w)]) if np.isfinite(w).sum() >= 3 else None
                # rate: FLOPs or bytes per us; peak_src TFLOP/s = 1e6 FLOP/us, TB/s = 1e6 B/us
                eff = float(fit[1] / (np.median(peak_src) * 1e6)) if fit is not None else None
                if eff is not None and eff > 1:  # above peak: the op's inputs are not the kernels' work
                    fit = None
                if fit is not None and eff is not None:
                    a = float(fit[0])
                    fixed = np.minimum(a, tt)
                    row.update(
                        model=f"{bound} ratio above a fixed cost fitted on the trace",
                        fixed_us=round(a, 3),
                        efficiency=round(eff, 4),
                        fitted_on=int(np.isfinite(w).sum()),
                    )
                else:
                    fixed = np.zeros(int(m.sum()))
                    why = (
                        "no Input Dims to fit a fixed cost"
                        if not np.isfinite(w).any()
                        else "the launching ops' input dims imply more than peak (not the kernels' work)"
                        if eff is not None and eff > 1
                        else "fewer than 3 sizes to fit a fixed cost"
                    )
                    row.update(model=f"{bound} ratio", fallback=f"whole time scaled: {why}")
                new[m] = fixed + (tt - fixed) * ratio
                row["ratio"] = round(float(np.median(ratio)), 4)
            row["ms_after"] = round(float(new[m_all].sum()) / 1e3, 3)
            classes[c.value] = row
        f = np.ones(g.n_tasks)
        pos = dur > 0
        f[gpu[pos]] = new[pos] / dur[pos]
        g.scale_tasks(f)
        ctx.report.setdefault("device", []).append(
            {
                "source": src.name,
                "source_from": how,
                "target": tgt.name,
                "default_dtype": default.value,
                "classes": classes,
                "host": "assumed equal to the source's (CPU, driver, launch cost, host link)",
                "citations": {src.name: src.source, tgt.name: tgt.source},
            }
        )
        ctx.warnings.append(f"device: {src.name} -> {tgt.name}; the target's host is assumed equal to the source's")
