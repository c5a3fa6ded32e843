"""Embedding-table sharding of DLRM-style traces across N ranks (model-parallel tables).

Why per-shard rewrites of the recorded ops: a rank's embedding work is its shards' lookups
(`embedding_bag` forward and `_embedding_bag_backward`), so each shard is the table's ops with
the weight cut to the shard's rows/columns and the indices cut to its share of the lookups.
Plans are the simulator's (engine/simulate/whatif/sharding.py, one home for both), so the plan
the what-if ranks is the plan composed here:
  table   whole tables, round-robin by table index (the naive plan)
  row     every table split row-wise in N: rank r holds rows/N and serves ~1/N of the lookups
          (a table of fewer rows than ranks is split in as many shards as it has rows)
  column  every table split column-wise in N: dim/N per rank, all lookups
  greedy  tables split row-wise and placed longest-first on the least-loaded rank, by the
          simulator's embedding cost model: the curves calibrate.py fitted for the benchmark's
          device when they exist (lookup traffic, dense gradient, per-shard and per-lookup costs,
          gradient buffers past the allocator's mmap threshold, cache misses of big tables), else
          lookup traffic + dense gradient. An ET has no kernel times, so the model is not scaled
          to the trace: only relative costs matter to a plan.
Each rank's ET holds its lookups, a forward all_to_all of pooled embeddings and a backward
all_to_all of their gradients (`c10d::alltoall_base_` nodes with byte counts and split sizes;
single-process replay skips them). The dense part (MLPs, interaction) is left out of the
per-rank ETs: this benchmarks the sharded embedding stage.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from engine.compose.nodes import (
    ROOT_ID,
    attr,
    is_defined,
    label_node,
    make_attrs,
    root_node,
    set_attr,
    set_slot,
    tensors_of,
)
from engine.compose.shard.tbe import rank_tbe_nodes
from engine.errors import TraceError
from engine.simulate.planners import PLANNERS, EmbeddingModel
from engine.simulate.planners import Shard as TableShard
from engine.simulate.planners import Table as CostTable

if TYPE_CHECKING:
    from engine.compose.benchmark import Benchmark
    from engine.compose.shard.kinds import EmbeddingSharding

FWD = ("aten::embedding_bag", "aten::_embedding_bag", "aten::_embedding_bag_forward_only")
BWD = ("aten::_embedding_bag_backward", "aten::_embedding_bag_dense_backward")
A2A_SCHEMA = (
    "c10d::alltoall_base_(Tensor output, Tensor input, __torch__.torch.classes.c10d.ProcessGroup "
    "process_group, int[] output_split_sizes, int[] input_split_sizes, int timeout) -> "
    "__torch__.torch.classes.c10d.Work"
)


@dataclass(kw_only=True, slots=True)
class Table:
    index: int
    fwd: dict
    bwd: dict | None
    rows: int
    dim: int
    itemsize: int
    lookups: int
    batch: int


@dataclass(kw_only=True, slots=True)
class Shard(TableShard):
    """A shard as the sharding what-if predicts it (table, rank, rows, dim, lookups), placed in
    its table (first row and column) and with the cost the planner gave it."""

    row0: int = 0
    col0: int = 0
    cost: float = 0.0

    def to_dict(self) -> dict:
        return {
            "table": self.table,
            "rank": self.rank,
            "rows": self.rows,
            "dim": self.dim,
            "lookups": self.lookups,
            "row_offset": self.row0,
            "col_offset": self.col0,
            "cost": round(self.cost, 1),
        }


def once_per_weight(lookups: list[dict], weight_of: Callable[[dict], Any]) -> list[dict]:
    """The first lookup of each embedding weight (by the storage id of its tensor record).

    Why: an ET that recorded k steps holds k lookups of every table; they are one table to shard
    (a table lives on one rank), and the sharded benchmark holds one step of it."""
    seen: set = set()
    out = []
    for n in lookups:
        w = weight_of(n)
        key = w[1] if isinstance(w, list) and len(w) > 1 else id(n)
        if key not in seen:
            seen.add(key)
            out.append(n)
    return out


def find_tables(nodes: list[dict], replay_ids, tbe_info: list | None = None) -> list[Table]:
    """Tables of `aten::embedding_bag` lookups, else of FBGEMM TBE lookups (engine.compose.shard.tbe;
    `tbe_info` collects what was recovered from each TBE op)."""
    want = set(replay_ids)
    fwds = once_per_weight(
        [n for n in nodes if n["id"] in want and n["name"] in FWD], lambda n: n["inputs"]["values"][0]
    )
    if not fwds:
        from engine.compose.shard.tbe import tables_from_tbe, tbe_ops, tbe_weight

        tbes = once_per_weight(tbe_ops(nodes, want), tbe_weight)
        if tbes:
            top = max((max(v[0], v[1]) for n in nodes for _, _, _, _, v in tensors_of(n) if is_defined(v)), default=0)
            fresh = _Fresh(top + 1)
            out: list[Table] = []
            for n in tbes:
                for fwd, bwd, info in tables_from_tbe(n, fresh, len(out)):
                    a = fwd["inputs"]
                    out.append(
                        Table(
                            index=len(out),
                            fwd=fwd,
                            bwd=bwd,
                            rows=a["shapes"][0][0],
                            dim=a["shapes"][0][1],
                            itemsize=int(a["values"][0][4]),
                            lookups=a["shapes"][1][0],
                            batch=a["shapes"][2][0],
                        )
                    )
                    if tbe_info is not None:
                        tbe_info.append(info)
            return out
    bwds = [n for n in nodes if n["id"] in want and n["name"] in BWD]
    tables = []
    for i, f in enumerate(fwds):
        ins = f["inputs"]
        w, idx = ins["values"][0], ins["values"][1]
        rows, dim = ins["shapes"][0]
        include_last = len(ins["values"]) > 7 and ins["values"][7] is True
        batch = ins["shapes"][2][0] - (1 if include_last else 0)
        b = next((x for x in bwds if x["inputs"]["values"][1][:2] == idx[:2]), None)
        tables.append(
            Table(
                index=i,
                fwd=f,
                bwd=b,
                rows=int(rows),
                dim=int(dim),
                itemsize=int(w[4]),
                lookups=int(idx[3]),
                batch=int(batch),
            )
        )
    return tables


def _no_tables(nodes: list[dict], replay) -> str:
    """The refusal when no table was found: which embedding-like ops were seen and why each was not
    taken (engine.trace.tbe.why_not), so a user sees what the recogniser made of their trace."""
    from engine.trace.tbe import why_not

    want = set(replay)
    seen = why_not([(n["name"], n.get("inputs") or {}, attr(n, "op_schema")) for n in nodes if n["id"] not in want])
    inside = why_not([(n["name"], n.get("inputs") or {}, attr(n, "op_schema")) for n in nodes if n["id"] in want])
    parts = [f"replayed: {inside}" if inside else "", f"not replayed: {seen}" if seen else ""]
    found = "; ".join(p for p in parts if p) or "no embedding-like op at all"
    return (
        "no embedding tables to shard (looked for aten::embedding_bag and FBGEMM TBE lookups "
        f"[fbgemm::]split_embedding_codegen_lookup_<optimizer>_function[_pt2|_cpu] / dense_embedding_codegen_lookup_function); seen: {found}"
    )


def _split(n: int, k: int) -> list[int]:
    return [n // k + (1 if r < n % k else 0) for r in range(k)]


def cost_tables(tables: list[Table]) -> list[CostTable]:
    """The tables as the simulator's planners take them (an ET records no kernel times)."""
    return [
        CostTable(index=t.index, rows=t.rows, dim=t.dim, lookups=t.lookups, fwd_us=math.nan, bwd_us=math.nan)
        for t in tables
    ]


def cost_model(tables: list[Table], device: str = "cpu") -> EmbeddingModel:
    """The simulator's embedding model for these tables on `device` (module docstring), unscaled."""
    model = EmbeddingModel.fit(cost_tables(tables), device)
    model.scale = {"fwd": 1.0, "bwd": 1.0 if any(t.bwd is not None for t in tables) else 0.0}
    return model


def plan_shards(tables: list[Table], plan: str, n_ranks: int, model: EmbeddingModel | None = None) -> list[Shard]:
    """The shards of `plan` over `n_ranks` (the simulator's planner), each placed in its table
    (row/column offset, in split order) with its modelled cost in µs."""
    model = model or cost_model(tables)
    by_index = {t.index: t for t in tables}
    row0 = dict.fromkeys(by_index, 0)
    col0 = dict.fromkeys(by_index, 0)
    out = []
    for s in PLANNERS[plan](cost_tables(tables), n_ranks, model):
        t = by_index[s.table]
        column = s.dim < t.dim  # a column shard holds every row of some columns
        out.append(
            Shard(
                table=s.table,
                rank=s.rank,
                rows=s.rows,
                dim=s.dim,
                lookups=s.lookups,
                row0=0 if column else row0[s.table],
                col0=col0[s.table] if column else 0,
                cost=model.shard_us(s.rows, s.dim, s.lookups),
            )
        )
        if column:
            col0[s.table] += s.dim
        else:
            row0[s.table] += s.rows
    return out


class _Fresh:
    def __init__(self, start: int):
        self.n = start

    def __call__(self) -> int:
        self.n += 1
        return self.n


def _scale_bags(f: dict, b: dict | None, bags: tuple[int, int], lookups: tuple[int, int], shard_lookups: int) -> None:
    """Rewrite dim 0 of the bag-indexed tensors (offsets, pooled rows, bag sizes, their gradient)
    from the recorded bag count to the scaled one (`bags` = (recorded, new)), and offset2bag
    (one entry per lookup) to the shard's lookups. Weights and indices are set by the caller."""
    old_b, new_b = bags
    dim0 = {old_b: new_b, old_b + 1: new_b + 1}  # include_last_offset adds one
    for node, kind in ((f, "fwd"), (b, "bwd")):
        if node is None:
            continue
        skip = {("in", 0), ("in", 1)} if kind == "fwd" else {("in", 1), ("out", 0)}
        o2b = ("out", 1) if kind == "fwd" else ("in", 3)
        for io_name, io, arg, sub, v in tensors_of(node):
            if sub is not None or not is_defined(v) or (io_name, arg) in skip:
                continue
            shp = list(io["shapes"][arg])
            if not shp:
                continue
            if (io_name, arg) == o2b:
                if shp[0] == lookups[0] and lookups[0] > 0:
                    shp[0] = shard_lookups
            elif shp[0] in dim0:
                shp[0] = dim0[shp[0]]
            else:
                continue
            io["shapes"][arg] = shp
            io["values"][arg] = [*v[:3], int(math.prod(shp)), *v[4:]]
            if io.get("strides"):
                io["strides"][arg] = [shp[1], 1] if len(shp) == 2 else [1]


def _shard_nodes(
    t: Table, s: Shard, fresh: _Fresh, recorded: tuple[int, int] | None = None
) -> tuple[dict, dict | None]:
    """Copies of the table's forward/backward nodes rewritten for one shard (fresh tensor ids).
    `recorded`: the table's recorded (bags, lookups) when a batch scale changed them."""
    f = copy.deepcopy(t.fwd)
    b = copy.deepcopy(t.bwd) if t.bwd is not None else None
    remap: dict = {}
    for n in (f, b):
        if n is None:
            continue
        for _, io, arg, sub, v in tensors_of(n):
            if not is_defined(v):
                continue
            key = (v[0], v[1])
            if key not in remap:
                remap[key] = (fresh(), fresh())
            set_slot(io, "values", arg, sub, [*remap[key], *v[2:]])

    def put(io, arg, shape):
        v = io["values"][arg]
        io["values"][arg] = [v[0], v[1], 0, int(math.prod(shape)), v[4], v[5] if len(v) > 5 else "cpu"]
        io["shapes"][arg] = list(shape)
        if io.get("strides"):
            io["strides"][arg] = [shape[1], 1] if len(shape) == 2 else [1]

    put(f["inputs"], 0, [s.rows, s.dim])
    put(f["inputs"], 1, [s.lookups])
    put(f["outputs"], 0, [f["outputs"]["shapes"][0][0], s.dim])
    if b is not None:
        put(b["inputs"], 0, [b["inputs"]["shapes"][0][0], s.dim])
        # the gradient arrives from the backward all_to_all: a fresh, unaliased tensor
        b["inputs"]["values"][0][:2] = [fresh(), fresh()]
        put(b["inputs"], 1, [s.lookups])
        b["inputs"]["values"][6] = s.rows
        put(b["outputs"], 0, [s.rows, s.dim])
    if recorded is not None:
        _scale_bags(f, b, (recorded[0], t.batch), (recorded[1], t.lookups), s.lookups)
    return f, b


def _a2a(
    node_id: int,
    parent: int,
    send: list[int],
    recv: list[int],
    itemsize: int,
    fresh: _Fresh,
    n_ranks: int,
    what: str,
    ts: str = "Tensor(float)",
) -> dict:
    out_t = [fresh(), fresh(), 0, int(sum(recv)), itemsize, "cpu"]
    in_t = [fresh(), fresh(), 0, int(sum(send)), itemsize, "cpu"]
    ins = {
        "values": [out_t, in_t, "default_pg", list(recv), list(send), 1800000],
        "shapes": [[sum(recv)], [sum(send)], [], [[] for _ in recv], [[] for _ in send], []],
        "types": [
            ts,
            ts,
            "String",
            "GenericList[" + ",".join(["Int"] * len(recv)) + "]",
            "GenericList[" + ",".join(["Int"] * len(send)) + "]",
            "Int",
        ],
        "strides": [[1], [1], [], [[] for _ in recv], [[] for _ in send], []],
    }
    outs = {"values": [out_t], "shapes": [[sum(recv)]], "types": [ts], "strides": [[1]]}
    node: dict[str, Any] = {
        "id": node_id,
        "name": "c10d::alltoall_base_",
        "ctrl_deps": parent,
        "inputs": ins,
        "outputs": outs,
        "attrs": make_attrs(op_schema=A2A_SCHEMA),
    }
    set_attr(node, "comm_type", "all_to_all", "string")
    set_attr(node, "comm_phase", what, "string")
    set_attr(node, "pg_size", n_ranks, "int64")
    set_attr(node, "comm_bytes", int(max(sum(send), sum(recv)) * itemsize), "int64")
    set_attr(node, "in_split_elems", list(send), "string")
    node["attrs"][-1]["value"] = ",".join(str(x) for x in send)
    return node


def _scale_tables(tables: list[Table], scale: float) -> dict[int, tuple[int, int]]:
    """Batch scale of an embedding-sharded benchmark: every table serves `scale` x the bags and
    lookups (the pooling factor stays). Returns table -> its recorded (bags, lookups)."""
    if scale == 1.0:
        return {}
    out = {}
    for t in tables:
        new_b = t.batch * scale
        if abs(new_b - round(new_b)) > 1e-9 or round(new_b) < 1:
            raise TraceError(f"batch scale {scale:g} gives a non-integer batch: {t.batch} x {scale:g} = {new_b:g}")
        out[t.index] = (t.batch, t.lookups)
        t.batch, t.lookups = round(new_b), max(1, round(t.lookups * scale))
    return out


def shard_embeddings(bench: Benchmark, path, sh: EmbeddingSharding) -> dict:
    n_ranks, plan = int(sh.ranks), sh.plan
    nodes, replay = bench.ranks[0], bench.replay_ids[0]
    tbe_info: list = []
    try:
        tables = find_tables(nodes, replay, tbe_info)
    except TraceError as e:  # an unreadable TBE lookup: name the ET, not the spec
        if e.path is not None:
            raise
        raise TraceError(str(e), path) from None
    if not tables:
        raise TraceError(_no_tables(nodes, replay), path)
    recorded = _scale_tables(tables, float(bench.spec.batch_scale))
    if recorded:
        bench.meta["transforms"].append(
            {
                "kind": "batch_scale",
                "scale": float(bench.spec.batch_scale),
                "batch": next(iter(recorded.values()))[0],
                "new_batch": tables[0].batch,
                "detail": "applied to the sharded tables' bags and lookups",
            }
        )
    model = cost_model(tables, str(bench.spec.device))
    shards = plan_shards(tables, plan, n_ranks, model)
    tbe_src = {x["table"]: x["tbe_node"] for x in tbe_info}  # table -> its source TBE lookup node
    build = _RankBuild(
        nodes=nodes,
        tables=tables,
        recorded=recorded,
        tbe_src=tbe_src,
        by_id={n["id"]: n for n in nodes} if tbe_src else {},
        want=set(replay),
        bsplit=_split(tables[0].batch, n_ranks),
        per_rank_dim=[sum(s.dim for s in shards if s.rank == r) for r in range(n_ranks)],
        wtype=tables[0].fwd["outputs"]["types"][0],
        fresh=_Fresh(
            max((v[0] for n in nodes for _, _, _, _, v in tensors_of(n)), default=0)
            + max((v[1] for n in nodes for _, _, _, _, v in tensors_of(n)), default=0)
            + 1
        ),
    )
    ranks: dict = {}
    rids: dict = {}
    per_rank: dict[int, dict[str, Any]] = {}
    for r in range(n_ranks):
        ranks[r], rids[r], per_rank[r] = _rank_et(build, r, [s for s in shards if s.rank == r])
    bench.ranks, bench.replay_ids = ranks, rids
    info = {
        "kind": "embedding",
        "plan": plan,
        "ranks": n_ranks,
        "batch": tables[0].batch,
        "tables": [
            {
                "index": t.index,
                "rows": t.rows,
                "dim": t.dim,
                "lookups": t.lookups,
                "cost": round(model.shard_us(t.rows, t.dim, t.lookups), 1),
            }
            for t in tables
        ],
        "batch_scale": float(bench.spec.batch_scale),
        "original_lookups": sum(recorded.get(t.index, (0, t.lookups))[1] for t in tables),
        "lookups": sum(t.lookups for t in tables),
        "shards": [s.to_dict() for s in shards],
        "per_rank": per_rank,
        "max_cost": max(p["cost"] for p in per_rank.values()),
        "cost_model": model.source,  # "microbench" (calibrated curves of the device) or "default"
        "note": "per-rank ETs hold the sharded embedding stage; dense layers are not included",
    }
    if tbe_info:
        info["tbe"] = {
            "ops": sorted({x["tbe_node"] for x in tbe_info}),
            "tables": tbe_info,
            "note": "tables recovered from FBGEMM TBE lookups; each rank runs its shards as one TBE per "
            "source lookup (bounds check, lookup, backward as recorded, cut to the shards): rebuilt with "
            "FBGEMM at replay, or substituted by torch ops (counted as substituted) where it is not "
            "installed (engine.compose.shard.tbe, engine.replay.custom)",
        }
        if not all(x["exact_dims"] for x in tbe_info):
            bench.meta["warnings"].append(
                "TBE tables of different dims: per-table dims/rows are approximated as equal (the ET "
                "does not record D_offsets)"
            )
    bench.meta["sharding"] = info
    return info


@dataclass(kw_only=True, slots=True)
class _RankBuild:
    """What every rank's ET is built from: the source rank's nodes and tables, and the layout the
    planner chose."""

    nodes: list[dict]
    tables: list[Table]
    recorded: dict  # table -> (batch, lookups) as recorded, where the batch was scaled
    tbe_src: dict[int, int]  # table -> its source TBE lookup node (FBGEMM tables only)
    by_id: dict[int, dict]
    want: set[int]  # the source's replayed node ids
    bsplit: list[int]  # each rank's part of the batch
    per_rank_dim: list[int]  # each rank's summed embedding dims (what its all-to-all carries)
    wtype: str  # the pooled embeddings' dtype (after any dtype change)
    fresh: _Fresh


def _rank_et(b: _RankBuild, r: int, mine: list[Shard]) -> tuple[list[dict], list[int], dict[str, Any]]:
    """Rank `r`'s ET nodes, replay ids and summary: its shards' lookups under the forward label
    and the pooled embeddings' all-to-all, then the backward all-to-all and the lookups'
    backward."""
    n_ranks, itemsize = len(b.bsplit), b.tables[0].itemsize
    out = [root_node()]
    nid = [ROOT_ID]

    def nxt() -> int:
        nid[0] += 1
        return nid[0]

    fw_label = label_node(nxt(), ROOT_ID, "## forward ##")
    out.append(fw_label)
    ids = []
    pairs: list[tuple[dict | None, dict | None]]
    if b.tbe_src:  # TBE tables: one TBE per source lookup over this rank's shards of it
        pairs = []
        groups: dict[int, list[Shard]] = {}
        for s in mine:
            groups.setdefault(b.tbe_src[s.table], []).append(s)
        for src_id, group in groups.items():
            fw_nodes, bw_nodes = rank_tbe_nodes(b.nodes, b.by_id[src_id], group, b.tables[0].batch, b.fresh, b.want)
            names = ",".join(str(t) for t in sorted({s.table for s in group}))
            lab = label_node(nxt(), fw_label["id"], f"nn.Module: tables.{names}")
            out.append(lab)
            for f in fw_nodes:
                f["id"], f["ctrl_deps"] = nxt(), lab["id"]
                out.append(f)
                ids.append(f["id"])
            pairs += [(None, bw) for bw in bw_nodes]
    else:
        shard_pairs = [_shard_nodes(b.tables[s.table], s, b.fresh, b.recorded.get(s.table)) for s in mine]
        for (f, _), s in zip(shard_pairs, mine):
            lab = label_node(nxt(), fw_label["id"], f"nn.Module: tables.{s.table}")
            f["id"], f["ctrl_deps"] = nxt(), lab["id"]
            out += [lab, f]
            ids.append(f["id"])
        pairs = list(shard_pairs)
    send = [b.bsplit[j] * b.per_rank_dim[r] for j in range(n_ranks)]
    recv = [b.bsplit[r] * b.per_rank_dim[i] for i in range(n_ranks)]
    a = _a2a(nxt(), fw_label["id"], send, recv, itemsize, b.fresh, n_ranks, "forward", b.wtype)
    out.append(a)
    ids.append(a["id"])
    bw_label = label_node(nxt(), ROOT_ID, "## backward ##")
    out.append(bw_label)
    a = _a2a(nxt(), bw_label["id"], recv, send, itemsize, b.fresh, n_ranks, "backward", b.wtype)
    out.append(a)
    ids.append(a["id"])
    for _, bw in pairs:
        if bw is not None:
            bw["id"], bw["ctrl_deps"] = nxt(), bw_label["id"]
            out.append(bw)
            ids.append(bw["id"])
    summary = {
        "tables": sorted({s.table for s in mine}),
        "shards": len(mine),
        "lookups": sum(s.lookups for s in mine),
        "cost": round(sum(s.cost for s in mine), 1),
        "weight_bytes": sum(s.rows * s.dim * itemsize for s in mine),
        "all_to_all_bytes": int(max(sum(send), sum(recv)) * itemsize),
    }
    return out, ids, summary


__all__ = ["Shard", "Table", "find_tables", "plan_shards", "shard_embeddings"]
