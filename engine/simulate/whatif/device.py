"""Device retarget: predict each GPU task's time on another GPU of the catalog (engine/simulate/
devices.py).

How, per kernel class (engine.trace.kernels):
- gemm, conv, attention (compute-bound): time scales by the ratio of the two devices' peak
  FLOP/s for the kernel's dtype (from its name: bf16, fp16, tf32, fp8, else the trace's most
  common GEMM dtype, else fp32). Where the launching op's recorded input dims give the FLOPs
  (costmodel.gemm_flops: mm/addmm/bmm/SDPA), a curve t = a + FLOPs / rate is fitted on the trace
  itself: `rate / peak` is the class's efficiency, `a` a fixed per-kernel cost (ramp, tail,
  small-tile latency) that does not scale; only t - a scales. Without FLOPs (no Input Dims; conv,
  whose Kineto inputs lack the output dims), the whole time scales by the peak ratio.
- elementwise, norm, copy, embedding, other (memory-bound): the same with HBM bandwidth, work
  = bytes of the launching op's inputs.
- communication: unchanged (the catalog holds no interconnect figures).
A dtype the target (or source) lacks falls back to its fp32 peak; the report says which classes
fell back to what.

Assumptions: the target's host (CPU, driver, launch cost) is the source's, kernels run the same
algorithms reaching the same fraction of peak as on the source (fitted per class), fixed
per-kernel costs do not change; peaks are the datasheets' dense figures; interconnect unchanged.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import numpy as np

from engine.rules import OneOf
from engine.simulate.costmodel import fit_curve, gemm_flops, memory_bytes
from engine.simulate.devices import CATALOG, ITEMSIZE, Device, Dtype, detect, dtypes
from engine.simulate.whatif.launch_ops import task_dims
from engine.simulate.whatif.spec import Edit, SpecError, register
from engine.trace.kernels import MEMORY_BOUND, KernelClass, kernel_classes

if TYPE_CHECKING:
    from engine.simulate.whatif import EditContext

COMPUTE = (KernelClass.GEMM, KernelClass.CONV, KernelClass.ATTENTION)
BANDWIDTH = (*MEMORY_BOUND, KernelClass.OTHER)
COMPUTE_VALUES = frozenset(c.value for c in COMPUTE)


def _peak(dev: Device, dt: Dtype) -> tuple[float, Dtype]:
    p = dev.peak_tflops(dt)
    return (p, dt) if p else (dev.fp32_tflops, Dtype.FP32)


def _work(g, events, trace, gpu: np.ndarray, cls: np.ndarray, item: np.ndarray) -> np.ndarray:
    """Per GPU task: FLOPs (compute classes) or input bytes (the rest) of the innermost op around
    its launch whose recorded dims give them; NaN where none does."""
    dims = task_dims(g, events, trace)
    out = np.full(len(gpu), np.nan)
    if not dims:
        return out
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
                else:
                    w = memory_bytes(names[h], list(ins), [], float(item[k]))
                if w:
                    out[k] = w
                    break
            h = int(parent[h])
    return out


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
        work = _work(g, ctx.events, ctx.trace, gpu, cls, item)
        new = dur.copy()
        classes: dict[str, dict] = {}
        for c in KernelClass:
            m = cls == c.value
            if not m.any():
                continue
            row: dict = {"kernels": int(m.sum()), "ms_before": round(float(dur[m].sum()) / 1e3, 3)}
            if c == KernelClass.COMMUNICATION:
                row.update(model="unchanged (no interconnect in the catalog)", ratio=1.0)
            else:
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
            row["ms_after"] = round(float(new[m].sum()) / 1e3, 3)
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
                "host": "assumed equal to the source's (CPU, driver, launch cost)",
                "citations": {src.name: src.source, tgt.name: tgt.source},
            }
        )
        ctx.warnings.append(f"device: {src.name} -> {tgt.name}; the target's host is assumed equal to the source's")
