"""Embedding sharding planners and their cost model: the plans compose builds and the what-if ranks.

Why a module of its own: the compose sharding (engine/compose/shard) builds the benchmark a
plan describes and the what-if `sharding` edit (engine/simulate/whatif/sharding.py) predicts
each plan's time; both use these planners. They lived inside the what-if edit module, so compose
imported from a what-if edit; here they sit below both, torch-free.

Embedding sharding plans over N ranks: predict each rank's embedding time, rank the plans.

Tables come from the ET (`embedding_bag` forward: weight rows x dim, lookups = index count;
its backward is matched through the index tensor) with their measured forward and backward
times. A shard (rows', dim', lookups') costs

    t = s * (a + b*L*D + c*R*D + e*L + f*B*[B > knee] + g*L*D*max(0, 1 - cache/B))

(L lookups, R rows, D dim, B = R*D*4 bytes) per direction (fwd, bwd): lookup traffic, the
table-sized dense gradient, per-lookup index work such as the backward's sort, fresh pages for
gradient buffers past the allocator's mmap threshold, and lookups that miss the caches in big
shards (costmodel.embedding_features; repeated rows are absorbed in b).
(a, b, c, e, f, g, knee, cache) come from embedding microbenchmarks on this machine (calibrate.py) when
they exist, else b = 1, c = 0 forward and c = 1 backward, the rest 0; s is fitted so the model
matches the trace's own tables (the device the trace ran on).

Plans (the PLANNERS registry; compose's embedding sharding plans name them): table (whole
tables round-robin), row (every table split row-wise in N, or
in as many as it has rows when fewer, lookups ~1/N each), column (dim/N per
rank, all lookups), greedy (longest-first onto the least-loaded rank by *predicted time*, splitting tables
row-wise while that lowers the slowest rank). A plan's embedding time is its slowest rank's;
the predicted step replaces the original embedding time with it.

Assumptions: indices uniform over rows (row shards get lookups/N); all_to_all exchange of
pooled embeddings not modelled (equal bytes for every plan at a given N); dense part unchanged.
"""

from __future__ import annotations

import heapq
import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from engine.simulate.costmodel import EMB_TERMS, cache_dir, embedding_features

if TYPE_CHECKING:
    from engine.trace.model import Trace

FWD = ("aten::embedding_bag",)
BWD = ("aten::_embedding_bag_backward",)


@dataclass(kw_only=True, slots=True)
class Table:
    index: int
    rows: int
    dim: int
    lookups: int
    fwd_us: float
    bwd_us: float


@dataclass(kw_only=True, slots=True)
class Shard:
    table: int
    rank: int
    rows: int
    dim: int
    lookups: int


def tables_from_trace(trace: Trace) -> list[Table]:
    """One table per embedding weight (its storage), with per-step figures.

    Why by weight: an ET that recorded k steps looks every table up k times, and those lookups are
    one table (a table lives on one rank), not k. `fwd_us` and `lookups` are the means over its
    lookups; `bwd_us` is the time of the backward ops that read any of its index tensors, divided
    by its number of lookups (NaN without a backward)."""
    ops, ten = trace.ops, trace.tensors
    if ops is None or len(ops) == 0:
        return []
    names = ops["name"].astype(str)
    tbe = _tables_from_tbe(trace)
    if tbe:
        return tbe
    fwd = ops[names.isin(FWD)]
    bwd = ops[names.isin(BWD)]
    tin = ten[ten["io"].astype(str) == "in"]
    seen: dict[int, list[tuple[int, int, int, int, float]]] = {}  # weight storage -> its lookups
    for oid, kdur in zip(fwd["id"], fwd["k_dur_us"]):
        t = tin[tin["op_id"] == oid].sort_values("arg")
        if len(t) < 2 or len(t["shape"].iloc[0]) != 2:
            continue
        rows, dim = (int(x) for x in t["shape"].iloc[0])
        look = (rows, dim, int(t["tensor_id"].iloc[1]), int(t["numel"].iloc[1]), float(kdur))
        seen.setdefault(int(t["storage_id"].iloc[0]), []).append(look)
    out = []
    for i, looks in enumerate(seen.values()):
        n = len(looks)
        bt = tin[tin["op_id"].isin(bwd["id"]) & (tin["arg"] == 1) & tin["tensor_id"].isin({x[2] for x in looks})]
        b_us = float(bwd.loc[bwd["id"].isin(bt["op_id"]), "k_dur_us"].sum()) / n if len(bt) else float("nan")
        out.append(
            Table(
                index=i,
                rows=looks[0][0],
                dim=looks[0][1],
                lookups=round(sum(x[3] for x in looks) / n),
                fwd_us=sum(x[4] for x in looks) / n,
                bwd_us=b_us,
            )
        )
    return out


def _tables_from_tbe(trace: Trace) -> list[Table]:
    """Tables of FBGEMM TBE lookups (engine.trace.tbe, the recogniser compose's sharding uses too),
    when the trace has no `embedding_bag`: one TBE of T tables per weight storage, each table an
    even split (rows, dim, lookups) with the lookup's kernel time split evenly too; `bwd_us` from
    the TBE backward ops that read the lookup's indices (the outermost of nested wrappers: the
    longest), NaN without one. An unreadable lookup raises TbeUnreadable (one line: op and what is
    missing)."""
    from engine.trace.tbe import read_tbe, tbe_kind, tbe_tables

    ops, ten = trace.ops, trace.tensors
    names = ops["name"].astype(str)
    rows = ops[names.map(lambda s: tbe_kind(s) is not None)]
    if names.isin(FWD).any() or rows.empty:
        return []
    bwd = ops[names.str.contains("embedding_backward", regex=False)]
    b_in = ten[(ten["io"].astype(str) == "in") & ten["op_id"].isin(bwd["id"])]
    b_dur = dict(zip(bwd["id"], bwd["k_dur_us"].astype(float)))
    groups: dict[int, list[tuple]] = {}  # weight storage -> (args, fwd µs, bwd µs) per recorded lookup
    for name, inputs, schema, kdur in zip(rows["name"], rows["inputs"], rows["schema"], rows["k_dur_us"]):
        a = read_tbe(str(name), json.loads(inputs) if isinstance(inputs, str) else inputs, str(schema or ""))
        if a is None:
            continue
        readers = b_in.loc[b_in["tensor_id"] == a.indices[0], "op_id"]
        b_us = max((b_dur[i] for i in readers), default=float("nan"))
        groups.setdefault(int(a.weight[1]), []).append((a, float(kdur), b_us))
    out: list[Table] = []
    for looks in groups.values():
        n, a = len(looks), looks[0][0]
        for t in tbe_tables(a):
            out.append(
                Table(
                    index=len(out),
                    rows=t.rows,
                    dim=t.dim,
                    lookups=round(sum(x[0].lookups for x in looks) / n / a.tables),
                    fwd_us=sum(x[1] for x in looks) / n / a.tables,
                    bwd_us=sum(x[2] for x in looks) / n / a.tables,
                )
            )
    return out


@dataclass(kw_only=True, slots=True)
class EmbeddingModel:
    coef: dict[str, np.ndarray]  # fwd/bwd -> the EMB_TERMS coefficients (a, b, c, e, f)
    scale: dict[str, float]
    source: str
    knee: dict[str, float] = field(default_factory=lambda: {"fwd": math.inf, "bwd": math.inf})
    cache: dict[str, float] = field(default_factory=lambda: {"fwd": math.inf, "bwd": math.inf})

    def unscaled_us(self, k: str, rows: int, dim: int, lookups: int) -> float:
        return float(self.coef[k] @ embedding_features(rows, dim, lookups, self.knee[k], self.cache[k]))

    def shard_us(self, rows: int, dim: int, lookups: int) -> float:
        return sum(self.scale[k] * self.unscaled_us(k, rows, dim, lookups) for k in ("fwd", "bwd"))

    @classmethod
    def fit(cls, tables: list[Table], device: str = "cpu") -> EmbeddingModel:
        coef = {"fwd": np.zeros(len(EMB_TERMS)), "bwd": np.zeros(len(EMB_TERMS))}
        coef["fwd"][1] = coef["bwd"][1] = coef["bwd"][2] = 1.0  # lookup traffic; dense gradient
        knee = {"fwd": math.inf, "bwd": math.inf}
        cache = {"fwd": math.inf, "bwd": math.inf}
        source = "default"
        p = cache_dir() / f"embedding_{device}.json"
        if p.exists():
            try:
                d = json.loads(p.read_text())
                coef = {k: np.array([d[f"embedding_{k}"].get(c, 0.0) for c in EMB_TERMS]) for k in ("fwd", "bwd")}
                knee = {k: float(d[f"embedding_{k}"].get("knee_bytes", math.inf)) for k in ("fwd", "bwd")}
                cache = {k: float(d[f"embedding_{k}"].get("cache_bytes", math.inf)) for k in ("fwd", "bwd")}
                source = "microbench"
            except (OSError, ValueError, KeyError, AttributeError):
                pass
        model = cls(coef=coef, scale={"fwd": 1.0, "bwd": 1.0}, source=source, knee=knee, cache=cache)
        scale = {}
        for k in ("fwd", "bwd"):
            m = np.array([model.unscaled_us(k, t.rows, t.dim, t.lookups) for t in tables])
            y = np.array([t.fwd_us if k == "fwd" else t.bwd_us for t in tables])
            ok = np.isfinite(y) & (m > 0) & (y > 0)
            scale[k] = float(np.sum(m[ok] / y[ok]) / np.sum((m[ok] / y[ok]) ** 2)) if ok.any() else 0.0
        model.scale = scale
        return model


def _split(n: int, k: int) -> list[int]:
    return [n // k + (1 if r < n % k else 0) for r in range(k)]


def _row_ways(t: Table, k: int) -> int:
    """How many row shards a table split `k` ways gets: never more than its rows.

    Why: a shard with no rows still served lookups (a 3-row table, as Criteo's DLRM has, split
    over 4 ranks left rank 3 a [0, dim] weight and a quarter of the lookups); no index is valid in
    an empty table, and the replayed `_embedding_bag_backward` wrote out of bounds: SIGSEGV."""
    return max(1, min(k, t.rows))


def _row(t: Table, k: int) -> list[Shard]:
    k = _row_ways(t, k)
    return [
        Shard(table=t.index, rank=j, rows=r, dim=t.dim, lookups=lk)
        for j, (r, lk) in enumerate(zip(_split(t.rows, k), _split(t.lookups, k)))
    ]


def plan_table(tables, n, model) -> list[Shard]:
    return [Shard(table=t.index, rank=t.index % n, rows=t.rows, dim=t.dim, lookups=t.lookups) for t in tables]


def plan_row(tables, n, model) -> list[Shard]:
    return [s for t in tables for s in _row(t, n)]


def plan_column(tables, n, model) -> list[Shard]:
    return [
        Shard(table=t.index, rank=j, rows=t.rows, dim=d, lookups=t.lookups)
        for t in tables
        for j, d in enumerate(_split(t.dim, n))
        if d
    ]


class _Costs:
    """`model.shard_us` memoised: the greedy planner asks for the same few shard sizes thousands
    of times (a table's row shards come in at most three sizes)."""

    def __init__(self, model: EmbeddingModel):
        self.model = model
        self.memo: dict[tuple[int, int, int], float] = {}

    def __call__(self, rows: int, dim: int, lookups: int) -> float:
        key = (rows, dim, lookups)
        us = self.memo.get(key)
        if us is None:
            us = self.memo[key] = self.model.shard_us(rows, dim, lookups)
        return us


def _lpt(shards: list[Shard], n: int, cost: _Costs) -> float:
    """Longest processing time first: each shard (largest first) onto the least-loaded rank
    (lowest index on ties); sets `rank` on each shard, returns the largest load."""
    load = [0.0] * n
    heap = [(0.0, j) for j in range(n)]  # (load, rank): the heap's minimum is the rule's choice
    for s in sorted(shards, key=lambda s: -cost(s.rows, s.dim, s.lookups)):
        ld, r = heapq.heappop(heap)
        s.rank = r
        load[r] = ld + cost(s.rows, s.dim, s.lookups)
        heapq.heappush(heap, (load[r], r))
    return max(load)


def _row_kinds(t: Table, k: int) -> list[tuple[int, int, int]]:
    """`_row(t, k)` as (rows, lookups, how many): rows and lookups each split into q+1 (the first
    n % k shards) and q, so a table's k row shards have at most three sizes."""
    k = _row_ways(t, k)
    qr, rr = divmod(t.rows, k)
    ql, rl = divmod(t.lookups, k)
    lo, hi = min(rr, rl), max(rr, rl)
    out = [(qr + 1, ql + 1, lo)] if lo else []
    if hi > lo:
        out.append((qr + 1, ql, hi - lo) if rr > rl else (qr, ql + 1, hi - lo))
    if k > hi:
        out.append((qr, ql, k - hi))
    return out


def _lpt_load(jobs: list[tuple[float, int]], n: int) -> float:
    """The largest load `_lpt` reaches for `jobs` ((cost, how many) pairs) on n ranks, without
    placing each shard.

    Why it is exact: which of several equally loaded ranks takes a shard changes no load, so the
    loads as a multiset evolve the same whichever is taken. They are kept as levels (load -> how
    many ranks): m shards of cost p > 0 move up to m ranks of the lowest level to load + p at once
    (the same float addition `_lpt` does rank by rank). The cost is a few steps per shard size,
    not one per shard: the greedy planner calls this for every split it tries (tables x ranks
    times), and the per-shard `_lpt` there made 256 ranks take 70 s and 4,096 ranks hours."""
    levels = {0.0: n}
    heap = [0.0]
    for p, m in sorted(jobs, key=lambda j: -j[0]):
        while m:
            low = heap[0]
            take = min(m, levels[low]) if p > 0 else 1  # p <= 0: the same rank stays the lowest
            levels[low] -= take
            if not levels[low]:
                del levels[low]
                heapq.heappop(heap)
            up = low + p
            if up not in levels:
                levels[up] = 0
                heapq.heappush(heap, up)
            levels[up] += take
            m -= take
    return max(levels)


def plan_greedy(tables, n, model) -> list[Shard]:
    cost = _Costs(model)
    whole = {t.index: cost(t.rows, t.dim, t.lookups) for t in tables}
    target = sum(whole.values()) / n
    k = {t.index: max(1, min(n, math.ceil(whole[t.index] / target - 1e-9))) for t in tables}

    def load_of(k: dict[int, int]) -> float:
        return _lpt_load([(cost(r, t.dim, lk), c) for t in tables for r, lk, c in _row_kinds(t, k[t.index])], n)

    best_k, best_load = dict(k), load_of(k)
    for _ in range(len(tables) * n):
        cand = [t for t in tables if k[t.index] < n]
        if not cand:
            break
        big = max(cand, key=lambda t: whole[t.index] / k[t.index])
        k[big.index] += 1
        load = load_of(k)
        if load < best_load - 1e-9:
            best_k, best_load = dict(k), load
    best = [s for t in tables for s in _row(t, best_k[t.index])]
    _lpt(best, n, cost)
    return best


PLANNERS: dict[str, Callable[[list[Table], int, EmbeddingModel], list[Shard]]] = {
    "table": plan_table,
    "row": plan_row,
    "column": plan_column,
    "greedy": plan_greedy,
}


def rank_us(shards: list[Shard], n: int, model: EmbeddingModel) -> list[float]:
    per = [0.0] * n
    for s in shards:
        per[s.rank] += model.shard_us(s.rows, s.dim, s.lookups)
    return per


__all__ = ["BWD", "FWD", "PLANNERS", "EmbeddingModel", "Shard", "Table", "rank_us", "tables_from_trace"]
