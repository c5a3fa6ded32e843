"""Merge the per-rank results of a distributed replay into one `ReplayResult`.

iteration time = the slowest rank in each iteration (a synchronous job steps at its slowest
rank's pace); every rank's own times, coverage, compute/communication/exposed/idle breakdown,
collective counts and bytes, and Kineto trace are kept under `ranks`. Coverage sums the ranks'
counts (replayed / selected over all ranks, collectives included).
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import cast

from engine.replay.result import Coverage, ReplayResult, SkippedOp

_SUM_KEYS = ("selected", "replayed", "substituted", "skipped", "selected_compute", "replayed_compute")


def merge_coverage(covs: list[dict]) -> dict:
    out: dict = {k: sum(int(c.get(k, 0)) for c in covs) for k in _SUM_KEYS}
    by_reason: dict[str, int] = {}
    by_category: dict[str, dict[str, int]] = {}
    for c in covs:
        for k, v in (c.get("by_reason") or {}).items():
            by_reason[k] = by_reason.get(k, 0) + int(v)
        for cat, d in (c.get("by_category") or {}).items():
            tgt = by_category.setdefault(cat, {})
            for k, v in d.items():
                tgt[k] = tgt.get(k, 0) + int(v)
    out["by_reason"] = dict(sorted(by_reason.items(), key=lambda kv: -kv[1]))
    by_sub: dict[str, int] = {}
    for c in covs:
        for k, v in (c.get("by_substitution") or {}).items():
            by_sub[k] = by_sub.get(k, 0) + int(v)
    out["by_substitution"] = dict(sorted(by_sub.items(), key=lambda kv: -kv[1]))
    out["by_category"] = by_category
    out["rate"] = out["replayed"] / out["selected"] if out["selected"] else 1.0
    out["compute_rate"] = out["replayed_compute"] / out["selected_compute"] if out["selected_compute"] else 1.0
    comm = by_category.get("communication") or {}
    out["comm_selected"] = sum(int(c.get("comm_selected", 0)) for c in covs)
    out["comm_replayed"] = sum(int(c.get("comm_replayed", 0)) for c in covs)
    if not out["comm_selected"] and comm:
        out["comm_selected"], out["comm_replayed"] = comm.get("selected", 0), comm.get("replayed", 0)
    return out


def merge_collectives(per_rank: list[dict]) -> dict:
    out: dict[str, dict[str, int]] = {}
    for d in per_rank:
        for k, v in (d or {}).items():
            e = out.setdefault(k, {"count": 0, "bytes": 0})
            e["count"] += int(v.get("count", 0))
            e["bytes"] += int(v.get("bytes", 0))
    return dict(sorted(out.items()))


def merge(
    rank_docs: list[dict], *, world_size: int, mirror_rank: int | None, out_dir: str | Path | None
) -> ReplayResult:
    """`rank_docs`: each rank's `ReplayResult.to_json()` (with config.rank = recorded rank), in rank order."""
    n = min(len(d.get("iteration_ms") or []) for d in rank_docs) if rank_docs else 0
    iters = [max(d["iteration_ms"][i] for d in rank_docs) for i in range(n)]
    ranks: list[dict] = []
    for r, d in enumerate(rank_docs):
        it = d.get("iteration_ms") or []
        ranks.append(
            {
                "rank": r,
                "recorded_rank": (d.get("config") or {}).get("rank"),
                "iteration_ms": it,
                "median_ms": round(statistics.median(it), 4) if it else None,
                "coverage": d.get("coverage") or {},
                "breakdown": d.get("breakdown") or {},
                "collectives": d.get("collectives") or {},
                "kineto_path": d.get("kineto_path"),
                "replay_json": (d.get("paths") or {}).get("replay_json"),
                "et": (d.get("paths") or {}).get("et"),
                "et_sha256": (d.get("paths") or {}).get("et_sha256"),
                "skipped_ops": (d.get("skipped_ops") or [])[:50],
                "peak_rss_bytes": (d.get("memory") or {}).get("peak_rss_bytes"),
            }
        )
    medians = [float(r["median_ms"] or 0.0) for r in ranks]
    slowest = max(range(len(medians)), key=medians.__getitem__) if medians else 0
    first = rank_docs[0] if rank_docs else {}
    paths: dict[str, str] = {f"kineto_rank{r['rank']}": str(r["kineto_path"]) for r in ranks if r["kineto_path"]}
    # each rank's replayed ET and its sha256: compare maps every rank's ids through its own
    # provenance (engine.compare.provenance.rank_sides); "et" stays rank 0's for older readers
    for e in ranks:
        if e["et"]:
            paths[f"et_rank{e['rank']}"] = str(e["et"])
            if e["et_sha256"]:
                paths[f"et_sha256_rank{e['rank']}"] = str(e["et_sha256"])
    if ranks and ranks[0]["et"]:
        paths["et"] = str(ranks[0]["et"])
        if ranks[0]["et_sha256"]:
            paths["et_sha256"] = str(ranks[0]["et_sha256"])
    if out_dir is not None:
        paths["out_dir"] = str(out_dir)
    spmd = (
        {
            "mirror_rank": mirror_rank,
            "assumption": f"SPMD: every rank replays recorded rank {mirror_rank}'s trace (symmetric ranks assumed)",
        }
        if mirror_rank is not None
        else None
    )
    return ReplayResult(
        iteration_ms=iters,
        per_op=(rank_docs[slowest].get("per_op") or []) if rank_docs else [],
        coverage=cast(Coverage, merge_coverage([d.get("coverage") or {} for d in rank_docs])),
        device=first.get("device", "cpu"),
        kineto_path=first.get("kineto_path"),
        paths=paths,
        skipped_ops=cast(
            list[SkippedOp],
            [dict(s, rank=r) for r, d in enumerate(rank_docs) for s in (d.get("skipped_ops") or [])][:200],
        ),
        config={**(first.get("config") or {}), "rank": None, "world_size": world_size, "slowest_rank": slowest},
        warnings=sorted({w for d in rank_docs for w in (d.get("warnings") or [])}),
        collectives=merge_collectives([d.get("collectives") or {} for d in rank_docs]),
        breakdown=(rank_docs[slowest].get("breakdown") or {}) if rank_docs else {},
        world_size=world_size,
        ranks=ranks,
        spmd=spmd,
        source=merge_sources([d.get("source") or {} for d in rank_docs]),
        # the ranks of one job record the same steps; the slowest rank's count stands for the job
        steps_per_iteration=int((rank_docs[slowest].get("steps_per_iteration") or 1) if rank_docs else 1),
    )


def merge_sources(sources: list[dict]) -> dict:
    """Every rank's replayed ET hashes (not only rank 0's), so compare's source check and a
    reader see each file the run replayed."""
    traces: list[dict] = []
    derived: set[str] = set()
    for s in sources:
        for t in s.get("traces") or []:
            if t not in traces:
                traces.append(t)
        derived.update(s.get("derived_from") or [])
    out: dict = {"traces": traces}
    if derived:
        out["derived_from"] = sorted(derived)
    return out
