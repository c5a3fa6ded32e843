"""Two GPUs running one program: GPU time per kernel class and per op, paired, with a direction.

Why: vendor kernels never pair by name (cuBLAS `sm90_xmma_gemm_*` against hipBLASLt `Cijk_*`), so
a trace diff by kernel name shows two disjoint lists. What both sides share is the program: the
host operators that launched the kernels, in the same order, on the same input shapes. So:

  * launching ops: every cpu_op that launched GPU work (kernels carry the `External id` of the
    innermost op around their launch), with its input shapes (Kineto `Input Dims`, when
    recorded), the GPU time of its kernels and their class (engine.trace.kernels, the class
    holding most of its time);
  * pairs: the two sides' launching ops aligned in launch order on (name, shapes)
    (difflib's longest matching blocks), so a repeated layer pairs with its counterpart;
  * per kernel class: summed GPU task time per iteration on each side and the ratio b / a, said as
    "B 1.32x slower on gemm";
  * per op type: the paired ops' GPU time per op name, the same ratio and direction.

Profiler bookkeeping (python frames, `PyTorch Profiler (N)`, instant events, flow markers) is no
work of the program: `bookkeeping` marks it so tables and timelines can leave it out.
"""

from __future__ import annotations

import difflib
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from engine.trace.kernels import kernel_classes
from engine.trace.vocab import GPU_CATS

if TYPE_CHECKING:
    from engine.trace.model import Trace

BOOKKEEPING_CATS = ("python_function", "python", "Trace", "cpu_instant_event", "ac2g", "fwdbwd", "overhead")


def bookkeeping(events: pd.DataFrame) -> np.ndarray:
    """Rows that are profiler bookkeeping, not the program's work: python frames, the profiler's
    own span ("PyTorch Profiler (0)"), instant events and flow markers."""
    cat = events["cat"].astype(str)
    name = events["name"].astype(str)
    return (
        cat.isin(BOOKKEEPING_CATS) | cat.str.startswith("python") | name.str.startswith("PyTorch Profiler")
    ).to_numpy()


def direction(label: str, ratio: float, what: str) -> str:
    """'B 1.32x slower on gemm' (ratio = b / a of times), '... faster ...', or 'as fast'."""
    if not np.isfinite(ratio) or ratio <= 0:
        return f"{what}: only on one side"
    if abs(ratio - 1.0) < 0.005:
        return f"{label} as fast on {what}"
    return f"{label} {ratio:.2f}x slower on {what}" if ratio > 1 else f"{label} {1 / ratio:.2f}x faster on {what}"


def launch_ops(trace: Trace) -> pd.DataFrame:
    """One row per cpu_op that launched GPU work, in launch order: ev, name, shapes, gpu_us,
    kernels, class."""
    ev = trace.events
    cols = ["ev", "name", "shapes", "gpu_us", "kernels", "class"]
    gpu = ev["cat"].astype(str).isin(GPU_CATS).to_numpy() & ev["external_id"].notna().to_numpy()
    ops = ev[(ev["cat"].astype(str) == "cpu_op").to_numpy() & ev["external_id"].notna().to_numpy()]
    if not gpu.any() or not len(ops):
        return pd.DataFrame(columns=cols)
    k = pd.DataFrame(
        {
            "xid": ev.loc[gpu, "external_id"].astype("int64").to_numpy(),
            "src": ev.loc[gpu, "src"].to_numpy(),
            "dur": ev.loc[gpu, "dur_us"].to_numpy(float),
            "class": kernel_classes(ev)[gpu],
        }
    )
    per = k.groupby(["src", "xid"]).agg(gpu_us=("dur", "sum"), kernels=("dur", "size")).reset_index()
    top = k.groupby(["src", "xid", "class"])["dur"].sum().reset_index().sort_values("dur", ascending=False)
    per = per.merge(top.drop_duplicates(["src", "xid"])[["src", "xid", "class"]], on=["src", "xid"])
    o = pd.DataFrame(
        {
            "ev": ops["ev"].to_numpy(),
            "src": ops["src"].to_numpy(),
            "xid": ops["external_id"].astype("int64").to_numpy(),
            "name": ops["name"].astype(str).to_numpy(),
            "ts_us": ops["ts_us"].to_numpy(float),
        }
    ).drop_duplicates(["src", "xid"])
    out = o.merge(per, on=["src", "xid"]).sort_values("ts_us", kind="stable")
    if not len(out):
        return pd.DataFrame(columns=cols)
    from engine.trace.input_dims import input_dims

    dims = input_dims(trace)
    out["shapes"] = [
        ";".join("x".join(map(str, d)) for d in dims.get((int(s), int(e)), [])) for s, e in zip(out["src"], out["ev"])
    ]
    return out[cols].reset_index(drop=True)


# Past this many cells (len a x len b of the part that differs) the k-th op of each (name, shapes)
# on one side pairs with the k-th on the other, in linear time, instead of difflib's matching.
ALIGN_CELLS = 4_000_000


def _align(ka: list, kb: list) -> tuple[list[int], list[int]]:
    """Indices of paired items: the common head and tail as they are, the middle by difflib's
    matching blocks (or by occurrence of each key when it is large)."""
    n = min(len(ka), len(kb))
    h = 0
    while h < n and ka[h] == kb[h]:
        h += 1
    t = 0
    while t < n - h and ka[len(ka) - 1 - t] == kb[len(kb) - 1 - t]:
        t += 1
    ia, ib = list(range(h)), list(range(h))
    ma, mb = ka[h : len(ka) - t], kb[h : len(kb) - t]
    if len(ma) * len(mb) <= ALIGN_CELLS:
        for blk in difflib.SequenceMatcher(a=ma, b=mb, autojunk=False).get_matching_blocks():
            ia += range(h + blk.a, h + blk.a + blk.size)
            ib += range(h + blk.b, h + blk.b + blk.size)
    else:
        seen: dict = {}
        for j, k in enumerate(mb):
            seen.setdefault(k, []).append(j)
        taken: dict = {}
        for i, k in enumerate(ma):
            js, c = seen.get(k), taken.get(k, 0)
            if js and c < len(js):
                ia.append(h + i)
                ib.append(h + js[c])
                taken[k] = c + 1
        order = sorted(range(h, len(ia)), key=lambda x: ia[x])
        ia[h:], ib[h:] = [ia[x] for x in order], [ib[x] for x in order]
    ia += range(len(ka) - t, len(ka))
    ib += range(len(kb) - t, len(kb))
    return ia, ib


def pair_ops(a: pd.DataFrame, b: pd.DataFrame) -> pd.DataFrame:
    """Launching ops of two sides aligned in order on (name, shapes): name, shapes, class, a_us,
    b_us, one row per pair."""
    ka = list(zip(a["name"], a["shapes"]))
    kb = list(zip(b["name"], b["shapes"]))
    ia, ib = _align(ka, kb)
    pa, pb = a.iloc[ia].reset_index(drop=True), b.iloc[ib].reset_index(drop=True)
    return pd.DataFrame(
        {
            "name": pa["name"],
            "shapes": pa["shapes"],
            "class": pa["class"],
            "class_b": pb["class"],
            "a_us": pa["gpu_us"].astype(float),
            "b_us": pb["gpu_us"].astype(float),
        }
    )


def _ratio_table(t: pd.DataFrame, key: str, label_b: str, per_a: int, per_b: int) -> pd.DataFrame:
    t = t.copy()
    t["a_us"] = t["a_us"] / max(per_a, 1)
    t["b_us"] = t["b_us"] / max(per_b, 1)
    t["ratio"] = np.where(t["a_us"] > 0, t["b_us"] / t["a_us"].where(t["a_us"] > 0, 1.0), np.inf)
    t["direction"] = [direction(label_b, float(r), str(k)) for r, k in zip(t["ratio"], t[key])]
    t["_m"] = t[["a_us", "b_us"]].max(axis=1)
    return t.sort_values("_m", ascending=False, kind="stable").drop(columns="_m").reset_index(drop=True)


def by_class(a: Trace, b: Trace, label_b: str, per_a: int = 1, per_b: int = 1) -> pd.DataFrame:
    """class, a_us, b_us (GPU task time, per iteration when both sides have them), ratio, direction."""
    parts = []
    for side, t in (("a_us", a), ("b_us", b)):
        cls = kernel_classes(t.events)
        g = cls != ""
        parts.append(pd.Series(t.events["dur_us"].to_numpy(float)[g]).groupby(cls[g]).sum().rename(side))
    t = pd.concat(parts, axis=1).fillna(0.0)
    t.index.name = "class"
    return _ratio_table(t.reset_index(), "class", label_b, per_a, per_b)


def by_op_type(pairs: pd.DataFrame, label_b: str, per_a: int = 1, per_b: int = 1) -> pd.DataFrame:
    """name, class, pairs, a_us, b_us (the paired ops' GPU time), ratio, direction."""
    if not len(pairs):
        return pd.DataFrame(columns=["name", "class", "pairs", "a_us", "b_us", "ratio", "direction"])
    t = pairs.groupby("name", sort=False).agg(
        **{"class": ("class", "first"), "pairs": ("a_us", "size"), "a_us": ("a_us", "sum"), "b_us": ("b_us", "sum")}
    )
    return _ratio_table(t.reset_index(), "name", label_b, per_a, per_b)


__all__ = ["BOOKKEEPING_CATS", "bookkeeping", "by_class", "by_op_type", "direction", "launch_ops", "pair_ops"]
