"""Before launching ranks: each rank's collective sequence, its process groups, and a check that
the ranks' sequences match (same order, kinds, groups, dtypes and sizes).

Why before launch: a mismatched set of rank files would otherwise hang every rank in a
collective until the timeout; checking the recorded sequences names the rank and the op at
once (exit 2), with nothing started.

Point-to-point ops are matched as pairs, not by position: rank a's sends to b, in order, against
b's receives from a (a `send` on one rank and its `recv` on the other are one transfer, not a
mismatch). An all_to_all whose recorded splits disagree names what each side sends and expects.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from engine.errors import TraceError
from engine.graph.replayset import SelectionMode
from engine.replay.collectives import CollectiveCall, CollKind, collective_call, is_collective

if TYPE_CHECKING:
    from engine.trace.model import Trace


def rank_collectives(trace: Trace, rank: int, mode: SelectionMode | str = SelectionMode.TOP) -> list[CollectiveCall]:
    """The collectives a distributed replay of `rank` issues, in op order."""
    from engine.graph import replay_ops
    from engine.replay.plan import param_comms_by_parent
    from engine.replay.selection import with_comm_records

    ops = trace.ops[trace.ops["rank"] == rank]
    ids = set(with_comm_records(ops, replay_ops(trace, mode, rank=rank)))
    sel = ops[ops["id"].isin(ids)].sort_values("id", kind="stable")
    sel = sel[sel["name"].astype(str).map(is_collective)]
    child = param_comms_by_parent(ops)
    out = []
    cols = [c for c in ("id", "name", "schema", "inputs", "outputs", "attrs") if c in sel.columns]
    for row in sel[cols].to_dict("records"):
        try:
            call = collective_call(row, child.get(int(row["id"])))
        except (ValueError, TypeError):
            call = None
        if call is not None:
            out.append(call)
    return out


def recorded_group_configs(trace: Trace) -> list[dict]:
    """The process-group configs the ET recorded at `## process_group:init ##` (one dict per group:
    pg_name, ranks, group_size, ...), in recorded order; malformed records are skipped."""
    ops = trace.ops
    out: list[dict] = []
    if not len(ops):
        return out
    for ins in ops.loc[ops["name"].astype(str) == "## process_group:init ##", "inputs"]:
        try:
            vals = json.loads(ins).get("values", []) if isinstance(ins, str) and ins else []
            cfg = json.loads(vals[0]) if vals and isinstance(vals[0], str) else []
        except (ValueError, AttributeError):
            continue
        out.extend(g for g in (cfg if isinstance(cfg, list) else []) if isinstance(g, dict))
    return out


def process_groups(trace: Trace) -> list[dict]:
    """Recorded process groups other than the default: [{name, ranks}] sorted by name, the same
    list on every rank (what `dist.new_group` must be called with, in order)."""
    ops = trace.ops
    groups: dict[str, list[int]] = {}
    for g in recorded_group_configs(trace):
        if str(g.get("pg_name", "0")) != "0":
            ranks = g.get("ranks") or []
            groups.setdefault(str(g["pg_name"]), [int(r) for r in ranks if isinstance(r, int)])
    comms = ops[ops["name"].astype(str) == "record_param_comms"] if "attrs" in ops.columns else ops.iloc[:0]
    for attrs in comms["attrs"] if len(comms) else []:
        try:
            a = json.loads(attrs) if isinstance(attrs, str) and attrs else {}
        except ValueError:
            continue
        name = str(a.get("pg_name") or "")
        if not name or name == "0" or name in groups:
            continue
        start, stride, size = a.get("global_rank_start"), a.get("global_rank_stride"), a.get("pg_size")
        if isinstance(start, int) and isinstance(stride, int) and isinstance(size, int) and stride > 0:
            groups[name] = [start + i * stride for i in range(size)]
        else:
            groups[name] = []
    return [
        {"name": n, "ranks": groups[n]}
        for n in sorted(groups, key=lambda s: (not s.isdigit(), int(s) if s.isdigit() else 0, s))
    ]


def check_sequences(seqs: dict[int, list[CollectiveCall]], source: str | None = None) -> None:
    """Raise TraceError naming the first rank and op whose collectives do not match the others'."""
    if len(seqs) < 2:
        return
    by_pg: dict[str, dict[int, list[CollectiveCall]]] = {}
    for r, calls in seqs.items():
        for c in calls:
            if c.kind in (CollKind.WAIT, CollKind.SEND, CollKind.RECV):
                continue
            by_pg.setdefault(c.pg, {}).setdefault(r, []).append(c)
    _check_p2p(seqs, source)
    for r in seqs:
        by_pg.setdefault("0", {}).setdefault(r, [])
    for pg, ranks in sorted(by_pg.items()):
        ref_rank = min(ranks)
        ref = ranks[ref_rank]
        for r in sorted(ranks):
            if r == ref_rank:
                continue
            mine = ranks[r]
            for i, (a, b) in enumerate(zip(ref, mine)):
                if a.signature() == b.signature() and not _splits_agree(a, b, ref_rank, r):
                    raise TraceError(
                        f"collective mismatch: all_to_all #{i + 1} in group {pg}: rank {ref_rank} (op {a.op_id}) "
                        f"sends {a.in_splits[r]} rows to rank {r}, but rank {r} (op {b.op_id}) expects "
                        f"{b.out_splits[ref_rank]} from rank {ref_rank}",
                        source,
                    )
                if a.signature() != b.signature():
                    raise TraceError(
                        f"collective mismatch: rank {r} collective #{i + 1} in group {pg} is {b.describe()}, "
                        f"rank {ref_rank} has {a.describe()}",
                        source,
                    )
            if len(mine) != len(ref):
                longer, n = (r, mine) if len(mine) > len(ref) else (ref_rank, ref)
                extra = n[min(len(mine), len(ref))]
                raise TraceError(
                    f"collective mismatch: rank {r} issues {len(mine)} collectives in group {pg}, rank {ref_rank} "
                    f"{len(ref)}; rank {longer}'s {extra.describe()} has no partner",
                    source,
                )


def _check_p2p(seqs: dict[int, list[CollectiveCall]], source: str | None) -> None:
    """Every send from a to b has, in order, a receive on b from a of the same size and dtype."""
    sends: dict[tuple[int, int], list[CollectiveCall]] = {}
    recvs: dict[tuple[int, int], list[CollectiveCall]] = {}
    for r, calls in seqs.items():
        for c in calls:
            if c.kind == CollKind.SEND:
                sends.setdefault((r, c.root), []).append(c)
            elif c.kind == CollKind.RECV:
                recvs.setdefault((c.root, r), []).append(c)
    for a, b in sorted(set(sends) | set(recvs)):
        if a not in seqs or b not in seqs:
            continue  # a peer outside the replayed ranks (checked by its own run)
        ss, rr = sends.get((a, b), []), recvs.get((a, b), [])
        for i, (s, v) in enumerate(zip(ss, rr)):
            n_s, n_r = sum(x.numel for x in s.inputs), sum(x.numel for x in (v.inputs or v.outputs))
            dt_s = s.inputs[0].dtype if s.inputs else ""
            dt_r = (v.inputs or v.outputs)[0].dtype if (v.inputs or v.outputs) else ""
            if n_s != n_r or (dt_s and dt_r and dt_s != dt_r):
                raise TraceError(
                    f"send/recv mismatch: rank {a}'s send #{i + 1} to rank {b} is {s.describe()}, "
                    f"rank {b}'s recv #{i + 1} from rank {a} is {v.describe()}",
                    source,
                )
        if len(ss) != len(rr):
            raise TraceError(
                f"send/recv mismatch: rank {a} sends {len(ss)} message(s) to rank {b}, "
                f"rank {b} receives {len(rr)} from rank {a}",
                source,
            )


def _splits_agree(a: CollectiveCall, b: CollectiveCall, ra: int, rb: int) -> bool:
    """all_to_all with recorded splits: what rank a sends to b is what b receives from a."""
    if a.kind != CollKind.ALL_TO_ALL or not (a.in_splits and b.out_splits):
        return True
    if rb >= len(a.in_splits) or ra >= len(b.out_splits):
        return True
    return a.in_splits[rb] == b.out_splits[ra]


def sequences(
    trace: Trace, ranks: list[int], mode: SelectionMode | str = SelectionMode.TOP
) -> dict[int, list[CollectiveCall]]:
    return {r: rank_collectives(trace, r, mode) for r in ranks}


__all__ = ["check_sequences", "process_groups", "rank_collectives", "sequences"]
