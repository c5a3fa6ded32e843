"""FLOPs of a matmul-like op (mm, addmm, bmm, baddbmm, SDPA, conv) from its input/output shapes.

The one formula: the cost model's curves (engine.simulate.costmodel), the device retarget and the
GEMM/attention table (engine.analysis.gemm) count work with it.
"""

from __future__ import annotations

import math

Shapes = list[tuple[int, ...]]


def _prod(s: tuple[int, ...]) -> int:
    return int(math.prod(s)) if s else 1


def gemm_flops(name: str, ins: Shapes, outs: Shapes) -> float | None:
    """FLOPs of a matmul-like op from its input/output shapes (None when they don't fit)."""
    n = name.split("::")[-1]
    try:
        if n in ("mm", "matmul") and len(ins) >= 2 and len(ins[0]) == 2 and len(ins[1]) == 2:
            (m, k), (_, nn) = ins[0], ins[1]
            return 2.0 * m * k * nn
        if n == "addmm" and len(ins) >= 3:
            (m, k), (_, nn) = ins[1], ins[2]
            return 2.0 * m * k * nn
        if n in ("bmm", "baddbmm") and len(ins) >= 2:
            x, y = (ins[0], ins[1]) if n == "bmm" else (ins[1], ins[2])
            return 2.0 * x[0] * x[1] * x[2] * y[2]
        if "scaled_dot_product" in n and len(ins) >= 3 and len(ins[0]) == 4:
            bs, h, lq, e = ins[0]
            s = ins[1][2]
            mult = 8.0 if "backward" in n else 4.0
            return mult * bs * h * lq * s * e
        if "conv" in n and outs and len(ins) >= 2:
            w = ins[1] if "backward" not in n else ins[2] if len(ins) > 2 else ins[1]
            if len(w) >= 3:
                per_out = _prod(w[1:])
                out = outs[0] if "backward" not in n else ins[0]
                mult = 4.0 if "backward" in n else 2.0
                return mult * _prod(out) * per_out
    except (IndexError, TypeError, ValueError):
        return None
    return None


__all__ = ["gemm_flops"]
