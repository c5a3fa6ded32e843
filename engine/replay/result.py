"""`ReplayResult`: what a replay measured, and its JSON form (consumed by `engine.compare`).

The JSON keys are a contract with engine.compare and the UI: `iteration_ms`, `median_ms`,
`per_op` [{op_id, name, category, phase, dur_us}], `coverage` {selected, replayed, substituted,
skipped, by_reason, ...}, `metrics` {samples, summary}, `kineto_path`, `device`, plus `paths`
and `source` {"traces": [{path, sha256}], "derived_from": [sha256, ...]}: the content hashes of
the ET(s) replayed (and, for a composed benchmark, of the traces it was composed from), which
`compare` checks against the original so a replay of another trace is refused.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass(kw_only=True, slots=True)
class ReplayResult:
    iteration_ms: list[float]
    per_op: list[dict]
    coverage: dict
    device: str
    metrics: dict = field(default_factory=lambda: {"samples": {}, "summary": {}})
    kineto_path: str | None = None
    paths: dict[str, str] = field(default_factory=dict)
    skipped_ops: list[dict] = field(default_factory=list)
    memory: dict = field(default_factory=dict)
    config: dict = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    gpu_iteration_ms: list[float] = field(default_factory=list)  # CUDA events, start to end
    # per-iteration medians (ms): compute, communication, exposed communication, idle
    breakdown: dict = field(default_factory=dict)
    collectives: dict = field(default_factory=dict)  # {kind: {count, bytes}} executed per iteration
    world_size: int = 1
    ranks: list[dict] = field(default_factory=list)  # distributed runs: one entry per rank
    spmd: dict | None = None  # --mirror-rank: which recorded rank every rank replays
    source: dict = field(default_factory=dict)  # content hashes of the replayed trace (module doc)

    @property
    def median_ms(self) -> float:
        return float(statistics.median(self.iteration_ms)) if self.iteration_ms else float("nan")

    def to_json(self) -> dict[str, Any]:
        return {
            "iteration_ms": [round(x, 4) for x in self.iteration_ms],
            "median_ms": round(self.median_ms, 4),
            "per_op": self.per_op,
            "coverage": self.coverage,
            "metrics": self.metrics,
            "kineto_path": self.kineto_path,
            "device": self.device,
            "paths": self.paths,
            "skipped_ops": self.skipped_ops,
            "memory": self.memory,
            "config": self.config,
            "warnings": self.warnings,
            "gpu_iteration_ms": [round(x, 4) for x in self.gpu_iteration_ms],
            "breakdown": self.breakdown,
            "collectives": self.collectives,
            "world_size": self.world_size,
            "ranks": self.ranks,
            "spmd": self.spmd,
            "source": self.source,
        }

    def write(self, out_dir: str | Path, name: str = "replay.json") -> Path:
        """Write atomically (temp file + rename: a failed write keeps the previous result) under
        the folder's writer lock (engine.outdir); errors are one-line TraceErrors."""
        from engine import jsonio
        from engine.outdir import OutputLock, atomic_write

        out = Path(out_dir)
        path = out / name
        with OutputLock(out, "replay result"):
            self.paths.setdefault("replay_json", str(path))
            atomic_write(
                path,
                jsonio.dumps(
                    self.to_json(),
                    option=jsonio.OPT_INDENT_2 | jsonio.OPT_SERIALIZE_NUMPY | jsonio.OPT_NON_STR_KEYS,
                    default=str,
                ),
            )
        return path


def coverage_report(steps, failures: dict[int, str]) -> tuple[dict, list[dict]]:
    """Coverage counts over the plan's steps (see engine.replay docstring for definitions).

    `by_reason` keys are `SkipReason` values (stable); `failures` maps a step index to the
    exception text of an op that failed at run time (reason FAILED, text in `detail`)."""
    from engine.replay.reasons import SkipReason

    by_reason: dict[str, int] = {}
    by_category: dict[str, dict[str, int]] = {}
    skipped_ops: list[dict] = []
    replayed = substituted = comm_sel = comm_rep = 0
    for st in steps:
        is_comm = getattr(st, "coll", None) is not None or str(st.name).startswith(("c10d::", "record_param_comms"))
        comm_sel += is_comm
        cat = by_category.setdefault(st.category, {"selected": 0, "replayed": 0, "substituted": 0, "skipped": 0})
        cat["selected"] += 1
        reason = st.reason or (SkipReason.FAILED if st.index in failures else "")
        if reason:
            key = reason.value if isinstance(reason, SkipReason) else str(reason)
            cat["skipped"] += 1
            by_reason[key] = by_reason.get(key, 0) + 1
            detail = st.detail or failures.get(st.index, "") or key
            skipped_ops.append({"op_id": st.op_id, "name": st.name, "reason": key, "detail": detail})
            continue
        replayed += 1
        comm_rep += is_comm
        cat["replayed"] += 1
        if st.resolved is not None and st.resolved.substituted:
            substituted += 1
            cat["substituted"] += 1
    selected = len(steps)
    comp = by_category.get("compute", {"selected": 0, "replayed": 0})
    return {
        "selected": selected,
        "replayed": replayed,
        "substituted": substituted,
        "skipped": selected - replayed,
        "by_reason": dict(sorted(by_reason.items(), key=lambda kv: -kv[1])),
        "by_category": by_category,
        "selected_compute": comp["selected"],
        "replayed_compute": comp["replayed"],
        "compute_rate": (comp["replayed"] / comp["selected"]) if comp["selected"] else 1.0,
        "rate": (replayed / selected) if selected else 1.0,
        "comm_selected": comm_sel,
        "comm_replayed": comm_rep,
    }, skipped_ops
