"""Per-op-family cost model (Lin et al.-style), torch-free: work from shapes, time from a fitted curve.

Families (a registry; the first whose name pattern matches an op wins):
    gemm       mm/addmm/bmm/baddbmm/conv/SDPA: work = FLOPs from the shapes
    embedding  embedding(_bag) lookups and their backward: work = lookups x dim, plus the
               table-sized gradient buffer the dense backward writes (the reuse term: rows that
               are looked up again cost nothing extra, the full-table write does)
    memory     everything else that computes (element-wise, norms, reductions, copies, fills):
               work = bytes read + written (roofline: memory-bound at these sizes)

Time curve per family: t(w) = a + w / r, a = fixed per-call cost (dispatch, launch, tile
set-up), r = sustained throughput. Why this shape: it is a roofline with latency, so efficiency
w / (r t) rises with size and saturates (the "efficiency curve"), and two parameters fit from a
handful of points. Parameters come from (1) the trace itself: its own ops of the family,
self time against work, when at least 3 distinct sizes exist (the device the trace ran on),
else (2) microbenchmarks run on this machine by calibrate.py (cached JSON), else (3) a = 0
(time proportional to work). A what-if changes an op's time by t(w_new) / t(w_old), so a
curve's absolute error largely cancels.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from engine import envvars
from engine.trace.flops import gemm_flops

Shapes = list[tuple[int, ...]]


def _prod(s: tuple[int, ...]) -> int:
    return int(math.prod(s)) if s else 1


def embedding_work(name: str, ins: Shapes, outs: Shapes) -> float | None:
    """lookups x dim (+ table-sized gradient written by the dense backward)."""
    n = name.split("::")[-1]
    if n in ("embedding_bag", "_embedding_bag", "embedding", "_embedding_bag_forward_only") and len(ins) >= 2:
        weight, idx = ins[0], ins[1]
        if len(weight) == 2:
            return float(_prod(idx) * weight[1])
    if "backward" in n and ins and outs:
        grad, idx = ins[0], ins[1] if len(ins) > 1 else ()
        dim = grad[-1] if grad else 1
        table = _prod(outs[0]) if outs and outs[0] else 0
        return float(_prod(idx) * dim + table)
    return None


def memory_bytes(name: str, ins: Shapes, outs: Shapes, itemsize: float = 4.0) -> float | None:
    total = sum(_prod(s) for s in ins) + sum(_prod(s) for s in outs)
    return float(total * itemsize) if total else None


@dataclass(kw_only=True, frozen=True, slots=True)
class Family:
    name: str
    pattern: re.Pattern
    work: Callable[[str, Shapes, Shapes], float | None]
    unit: str


FAMILIES: dict[str, Family] = {}


def register_family(f: Family) -> Family:
    FAMILIES[f.name] = f
    return f


register_family(
    Family(
        name="gemm",
        pattern=re.compile(r"::(mm|addmm|bmm|baddbmm|matmul|.*scaled_dot_product.*|.*convolution.*|conv\d?d)$"),
        work=gemm_flops,
        unit="flop",
    )
)
register_family(
    Family(name="embedding", pattern=re.compile(r"::_?embedding(_bag)?(_.*)?$"), work=embedding_work, unit="elem")
)
register_family(Family(name="memory", pattern=re.compile(r"^aten::|^prims::"), work=memory_bytes, unit="byte"))


def family_of(name: str) -> Family | None:
    for f in FAMILIES.values():
        if f.pattern.search(name):
            return f
    return None


@dataclass(kw_only=True, slots=True)
class Curve:
    """t_us(w) = a_us + w / rate; `source` says where the parameters came from."""

    a_us: float
    rate: float
    source: str
    n: int = 0
    heldout_err_pct: float | None = None

    def __call__(self, w: np.ndarray | float) -> np.ndarray | float:
        return self.a_us + np.asarray(w, np.float64) / self.rate

    def to_json(self) -> dict:
        out = asdict(self)
        out["rate_per_us"] = out.pop("rate")  # the JSON key says the unit
        return out


def fit_curve(w: np.ndarray, t: np.ndarray) -> tuple[float, float] | None:
    """Least squares of relative error for t = a + w/r (a >= 0, r > 0); None if degenerate."""
    w = np.asarray(w, np.float64)
    t = np.asarray(t, np.float64)
    ok = (w > 0) & (t > 0) & np.isfinite(w) & np.isfinite(t)
    w, t = w[ok], t[ok]
    if len(np.unique(np.round(np.log(w), 3))) < 3:
        return None
    A = np.stack([np.ones_like(w), w], 1) / t[:, None]
    y = np.ones_like(t)
    coef, *_ = np.linalg.lstsq(A, y, rcond=None)
    a, b = float(coef[0]), float(coef[1])
    # non-negative: drop the offending term and refit the other (a 2-variable NNLS)
    if b <= 0:
        return None  # time does not grow with work here: no usable curve
    if a < 0:
        b = float(np.sum(A[:, 1]) / np.sum(A[:, 1] ** 2))
        a = 0.0
    return a, 1.0 / b


def heldout_error(w: np.ndarray, t: np.ndarray, folds: int = 5) -> float | None:
    """Mean |relative error| (%) on held-out *shapes*: sizes split into folds, fit on the rest."""
    w = np.asarray(w, np.float64)
    t = np.asarray(t, np.float64)
    sizes = np.unique(w)
    if len(sizes) < 4:
        return None
    fold = {s: i % folds for i, s in enumerate(sizes)}
    k = np.array([fold[x] for x in w])
    errs = []
    for f in range(folds):
        tr, te = k != f, k == f
        if not te.any():
            continue
        p = fit_curve(w[tr], t[tr])
        if p is None:
            continue
        pred = p[0] + w[te] / p[1]
        errs.extend(np.abs(pred / t[te] - 1).tolist())
    return 100 * float(np.mean(errs)) if errs else None


def cache_dir() -> Path:
    """Where calibrate.py keeps its measurements and fitted curves: `$MYSTIQUE_COSTMODEL_DIR`, else
    `$MYSTIQUE_CACHE_DIR/costmodel`, else `.mystique_cache/costmodel` under the current folder.

    Why an override of its own: fitted curves change what the simulator predicts, so the tests
    point it at an empty folder (a developer's calibration must not answer for a fresh machine).
    """
    env = envvars.get("MYSTIQUE_COSTMODEL_DIR")
    if env:
        return Path(env)
    return Path(envvars.get("MYSTIQUE_CACHE_DIR") or ".mystique_cache") / "costmodel"


def microbench_curves(device: str = "cpu") -> dict[str, Curve]:
    """Curves fitted by calibrate.py on this machine (empty when it never ran)."""
    p = cache_dir() / f"curves_{re.sub(r'[^A-Za-z0-9_]', '_', device)}.json"
    if not p.exists():
        return {}
    try:
        data = json.loads(p.read_text())
        return {
            k: Curve(
                a_us=v["a_us"],
                rate=v["rate_per_us"],
                source="microbench",
                n=v.get("n", 0),
                heldout_err_pct=v.get("heldout_err_pct"),
            )
            for k, v in data.items()
        }
    except (OSError, ValueError, KeyError):
        return {}


def curves_from_samples(samples: pd.DataFrame, device: str = "cpu") -> dict[str, Curve]:
    """Per family: in-trace fit (columns family, work, t_us), else microbenchmark, else proportional."""
    micro = microbench_curves(device)
    out: dict[str, Curve] = {}
    for fam in FAMILIES:
        s = samples[samples["family"] == fam] if len(samples) else samples
        p = fit_curve(s["work"].to_numpy(), s["t_us"].to_numpy()) if len(s) else None
        if p is not None:
            out[fam] = Curve(
                a_us=p[0],
                rate=p[1],
                source="trace",
                n=len(s),
                heldout_err_pct=heldout_error(s["work"].to_numpy(), s["t_us"].to_numpy()),
            )
        elif fam in micro:
            out[fam] = micro[fam]
        else:
            out[fam] = Curve(a_us=0.0, rate=1.0, source="proportional", n=len(s))
    return out


# ---- embedding lookups ----
EMB_TERMS = (
    "a_us",
    "b_us_per_elem",
    "c_us_per_row_elem",
    "e_us_per_lookup",
    "f_us_per_byte_above_knee",
    "g_us_per_missed_elem",
)
EMB_ITEMSIZE = 4  # float32 tables (the samples'); the knee term is in bytes


def embedding_features(rows, dim, lookups, knee_bytes: float, cache_bytes: float = math.inf) -> np.ndarray:
    """Terms of the embedding model, B = R*D*4 bytes (the table, and the backward's dense gradient):

        t = a + b*L*D + c*R*D + e*L + f*B*[B > knee] + g*L*D*max(0, 1 - cache/B)

    Why the last term: a lookup gathers (and its gradient scatters) one row at a random place;
    the share of the table beyond `cache` bytes misses the caches, so the per-lookup cost grows
    with the table (measured forward, 20k lookups x 64: 0.27 ms at 2k rows, 0.8 ms at 50k).
    Without it the model charges a small row shard's lookups like a whole table's and prefers
    plans with fewer, bigger shards than the measured fastest.

    Why the step: the backward's dense gradient is a fresh rows x dim buffer every step. glibc
    serves buffers above its mmap threshold (at most 32 MiB) with fresh pages, so every byte of
    such a buffer also pays a page fault and zeroing: the per-element cost roughly doubles past
    the threshold (measured on this machine: 0.9-1.1 ns per row x dim element at 100k-120k x 64
    rows, 2.2-2.3 ns at 128k-800k x 64). A single linear row term fitted on small tables
    under-predicts big ones 2-3x; the knee is fitted (calibrate.py) since allocators differ."""
    r = np.asarray(rows, np.float64)
    d = np.asarray(dim, np.float64)
    lk = np.asarray(lookups, np.float64)
    b = r * d * EMB_ITEMSIZE
    above = np.where(b > knee_bytes, b, 0.0)
    missed = lk * d * np.maximum(0.0, 1.0 - cache_bytes / np.maximum(b, 1.0))
    return np.stack(np.broadcast_arrays(np.ones_like(b * lk), lk * d, r * d, lk, above, missed), -1)


EMB_KNEES = tuple(float(2**e) * 2**20 for e in range(3, 9))  # candidate knees: 8 .. 256 MiB
EMB_CACHES = tuple(float(2**e) * 2**20 for e in range(-2, 5))  # candidate cache sizes: 0.25 .. 16 MiB


def fit_embedding(
    rows: list[dict], knees: tuple[float, ...] = EMB_KNEES, caches: tuple[float, ...] = EMB_CACHES
) -> dict:
    """Embedding model per direction from microbenchmarks {rows, dim, lookups, t_us}: the (knee,
    cache) pair of the grids with the lowest training error, non-negative terms by least squares
    of relative error; `heldout_err_pct` on every third shape, fitted without them."""
    R = np.array([r["rows"] for r in rows], np.float64)
    D = np.array([r["dim"] for r in rows], np.float64)
    L = np.array([r["lookups"] for r in rows], np.float64)
    t = np.array([r["t_us"] for r in rows], np.float64)
    every = np.arange(len(t)) % 3 == 2

    def fit(kc: tuple[float, float], mask: np.ndarray) -> np.ndarray:
        X = embedding_features(R[mask], D[mask], L[mask], *kc) / t[mask, None]
        coef = np.zeros(X.shape[1])
        use = np.ones(X.shape[1], bool)
        for _ in range(X.shape[1]):  # drop negative terms one at a time (a small NNLS)
            c, *_ = np.linalg.lstsq(X[:, use], np.ones(mask.sum()), rcond=None)
            if (c >= 0).all():
                coef[use] = c
                break
            use[np.flatnonzero(use)[np.argmin(c)]] = False
        return coef

    def err(coef: np.ndarray, kc: tuple[float, float], mask: np.ndarray) -> float:
        pred = embedding_features(R[mask], D[mask], L[mask], *kc) @ coef
        return float(np.mean(np.abs(pred / t[mask] - 1)) * 100)

    every_shape = np.ones(len(t), bool)
    grid = [(k, c) for k in knees for c in caches]
    best = min(grid, key=lambda kc: err(fit(kc, every_shape), kc, every_shape))
    held = err(fit(best, ~every), best, every) if every.any() else None
    coef = fit(best, every_shape)
    return {
        **dict(zip(EMB_TERMS, (float(c) for c in coef))),
        "knee_bytes": best[0],
        "cache_bytes": best[1],
        "heldout_err_pct": held,
    }
