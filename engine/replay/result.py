"""`ReplayResult`: what a replay measured, and `replay.json`, its file form.

This module is the one description of the replay.json contract (engine.compare, the CLI, the
dashboard worker and external tools read it; the README points here). `to_json()` writes it and
`from_json()` is its exact inverse, validating as it reads so a hand-edited or truncated file
fails with one clear `TraceError` instead of a KeyError deep inside compare.

replay.json (one JSON object; * = required when read):

    iteration_ms*     [float]  wall time of each timed iteration
    median_ms*        float    median of iteration_ms (derived: recomputed on read)
    steps_per_iteration int    recorded steps one iteration replays: the ET's `ProfilerStep#N`
                               nodes holding the replayed ops (an ET recorded over 3 profiler
                               steps replays 3 per iteration); 1 when it has none
    median_step_ms    float    median_ms / steps_per_iteration: what compares with the
                               original's step (derived: recomputed on read)
    per_op*           [PerOpRow]  one row per selected op, in plan order:
        op_id         int      ET node id of the trace that was replayed
        name          str      operator name
        category      str      engine.trace.categories category ("compute", "view", ...)
        phase         str      "forward" | "backward" | "optimizer" | ... (engine.trace.phases)
        dur_us        float    median time of the op over the timed iterations (µs; host time,
                               or GPU time between CUDA events when replayed on CUDA)
        status        OpStatus "replayed" | "substituted" | "skipped"
        collective    str      collective ops only: its kind ("all_reduce", ...)
    coverage*         Coverage
        selected, replayed, substituted, skipped          int
        by_reason     {reason: int}   why ops were skipped, keyed by `SkipReason` values
                                      (engine.replay.reasons), most frequent first
        by_substitution {"recorded op -> what ran instead": int}   the substituted ops by stand-in
                                      (cudnn_* on CPU, FBGEMM TBE without fbgemm_gpu), most frequent first
        by_category   {category: {selected, replayed, substituted, skipped}}
        selected_compute, replayed_compute               int (category "compute" only)
        compute_rate, rate                               float in [0, 1]
        comm_selected, comm_replayed                     int (collectives)
    device            str      "cpu" | "cuda" | "cuda:N"
    metrics           {samples: {column: [float]}, summary: {...}}  (MetricsSampler.to_dict)
    kineto_path       str | null   the replay's own Kineto trace, when profiled
    paths             {str: str}   files involved: "et" (the ET replayed; compare reads its
                                   `mystique_origin` provenance) and "et_sha256" (its bytes'
                                   hash), "kineto", "replay_json"; a distributed merge adds
                                   "et_rank<r>" and "et_sha256_rank<r>" for every rank
    skipped_ops       [SkippedOp]  {op_id, name, reason, detail}: reason is the closed-set
                                   label counted in coverage.by_reason, detail is free text
    memory            {...}        engine.replay.memory estimate (eager/lazy peaks; resident_bytes:
                                   rebuilt TBE tables, optimizer state, collective buffers) +
                                   "lazy", "planned_peak_bytes", "rss_bound_bytes"; a distributed
                                   rank adds its measured "peak_rss_bytes", the merged result the
                                   pre-launch "world_budget" (engine.replay.budget)
    config            {...}        the ReplayConfig values that shape the numbers
    warnings          [str]
    gpu_iteration_ms  [float]      CUDA-event iteration times (empty on CPU)
    breakdown         {...}        the median iteration's TimeBreakdown (ms; distributed
                                   replays): step_ms, compute_ms, communication_ms,
                                   exposed_communication_ms, idle_ms (compute + exposed + idle
                                   = step; docs/analysis.md)
    collectives       {kind: {count, bytes}}  collectives executed per iteration
    world_size        int          ranks that ran (1 for a single-process replay)
    ranks             [{...}]      distributed runs: one entry per rank {rank, recorded_rank,
                                   iteration_ms, median_ms, coverage, breakdown {step_ms, compute_ms,
                                   communication_ms, exposed_communication_ms, idle_ms} (the
                                   TimeBreakdown of engine.replay.commstats),
                                   collectives, kineto_path, replay_json, et, et_sha256,
                                   skipped_ops}
    spmd              {...} | null --mirror-rank: which recorded rank every rank replays
    source            {"traces": [{path, sha256}], "derived_from": [sha256, ...]}: content
                                   hashes of the ET(s) replayed (and, for a composed benchmark,
                                   of the traces it was composed from); compare refuses a
                                   replay whose hashes match none of the original's
                                   (engine.compare.checks)

Coverage definitions are in the `engine.replay` package docstring.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any, TypedDict

from engine.errors import TraceError
from engine.trace.vocab import COMM_PREFIXES

REPLAY_KEYS = ("iteration_ms", "median_ms", "per_op", "coverage")
"""Keys a replay.json must hold to be read at all."""


class OpStatus(str, Enum):
    """What happened to one selected op (a `str` so JSON and string comparisons keep working)."""

    REPLAYED = "replayed"
    SUBSTITUTED = "substituted"  # ran through a device-agnostic equivalent (cudnn_* on CPU)
    SKIPPED = "skipped"  # not run; the reason is in skipped_ops / coverage.by_reason

    def __str__(self) -> str:
        return self.value


class _PerOpFields(TypedDict):
    op_id: int
    name: str
    category: str
    phase: str
    dur_us: float
    status: OpStatus


class PerOpRow(_PerOpFields, total=False):
    collective: str  # the collective's kind, on collective ops only


class SkippedOp(TypedDict):
    op_id: int
    name: str
    reason: str
    detail: str


class CategoryCoverage(TypedDict):
    selected: int
    replayed: int
    substituted: int
    skipped: int


class Coverage(TypedDict, total=False):
    selected: int
    replayed: int
    substituted: int
    skipped: int
    by_reason: dict[str, int]
    by_substitution: dict[str, int]  # "recorded op -> what ran instead" -> ops
    by_category: dict[str, CategoryCoverage]
    selected_compute: int
    replayed_compute: int
    compute_rate: float
    rate: float
    comm_selected: int
    comm_replayed: int


@dataclass(kw_only=True, slots=True)
class ReplayResult:
    iteration_ms: list[float]
    per_op: list[PerOpRow]
    coverage: Coverage
    device: str
    metrics: dict = field(default_factory=lambda: {"samples": {}, "summary": {}})
    kineto_path: str | None = None
    paths: dict[str, str] = field(default_factory=dict)
    skipped_ops: list[SkippedOp] = field(default_factory=list)
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
    steps_per_iteration: int = 1  # recorded ProfilerSteps one iteration replays (module doc)

    @property
    def median_ms(self) -> float:
        return float(statistics.median(self.iteration_ms)) if self.iteration_ms else float("nan")

    @property
    def median_step_ms(self) -> float:
        """The median iteration per recorded step: the figure that compares with one original step."""
        return self.median_ms / max(1, self.steps_per_iteration)

    def to_json(self) -> dict[str, Any]:
        return {
            "iteration_ms": list(self.iteration_ms),  # unrounded: JSON floats read back exactly
            "median_ms": self.median_ms,
            "steps_per_iteration": self.steps_per_iteration,
            "median_step_ms": self.median_step_ms,
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
            "gpu_iteration_ms": list(self.gpu_iteration_ms),
            "breakdown": self.breakdown,
            "collectives": self.collectives,
            "world_size": self.world_size,
            "ranks": self.ranks,
            "spmd": self.spmd,
            "source": self.source,
        }

    @classmethod
    def from_json(cls, data: Any, path: str | Path | None = None) -> ReplayResult:
        """The result `to_json()` wrote (its inverse); TraceError naming `path` when malformed."""
        where = str(path) if path is not None else None
        if not isinstance(data, dict):
            raise TraceError("replay result must be a JSON object", where)
        missing = [k for k in REPLAY_KEYS if k not in data]
        if missing:
            raise TraceError(f"replay result lacks {', '.join(missing)}", where)
        for key, typ in (("iteration_ms", list), ("per_op", list), ("coverage", dict)):
            if not isinstance(data[key], typ):
                raise TraceError(f"replay result {key} must be a {'list' if typ is list else 'object'}", where)
        _check_rows(data, where)
        spi = data.get("steps_per_iteration", 1)
        if isinstance(spi, bool) or not isinstance(spi, int) or spi < 1:
            raise TraceError(f"replay result steps_per_iteration must be a whole number >= 1, not {spi!r}", where)
        try:
            iteration_ms = [float(x) for x in data["iteration_ms"]]
            gpu_ms = [float(x) for x in data.get("gpu_iteration_ms") or []]
            per_op = [_per_op_row(r) for r in data["per_op"]]
        except (TypeError, ValueError, KeyError) as exc:
            raise TraceError(f"replay result has a malformed per_op row or time ({exc})", where) from None
        return cls(
            iteration_ms=iteration_ms,
            per_op=per_op,
            coverage=data["coverage"],
            device=str(data.get("device") or ""),
            metrics=data.get("metrics") or {"samples": {}, "summary": {}},
            kineto_path=data.get("kineto_path"),
            paths=dict(data.get("paths") or {}),
            skipped_ops=list(data.get("skipped_ops") or []),
            memory=dict(data.get("memory") or {}),
            config=dict(data.get("config") or {}),
            warnings=[str(w) for w in data.get("warnings") or []],
            gpu_iteration_ms=gpu_ms,
            breakdown=dict(data.get("breakdown") or {}),
            collectives=dict(data.get("collectives") or {}),
            world_size=int(data.get("world_size") or 1),
            ranks=list(data.get("ranks") or []),
            spmd=data.get("spmd"),
            source=dict(data.get("source") or {}),
            steps_per_iteration=spi,
        )

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

    @classmethod
    def read(cls, path: str | Path) -> ReplayResult:
        """A replay.json file (or a folder holding one); TraceError naming the file otherwise."""
        from engine import jsonio

        p = Path(path)
        f = p / "replay.json" if p.is_dir() else p
        try:
            data = jsonio.loads(f.read_bytes())
        except (OSError, jsonio.JSONDecodeError) as exc:
            raise TraceError(f"cannot read replay result: {exc}", f) from None
        return cls.from_json(data, f)


_PER_OP_KEYS = ("op_id", "name", "dur_us")


def _kind(v: Any) -> str:
    return "null" if v is None else f"a {type(v).__name__}"


def _check_rows(data: dict, where: str | None) -> None:
    """Per-row checks with the row's index in the message (a `null` row is refused, never a crash)."""
    for i, row in enumerate(data["per_op"]):
        if not isinstance(row, dict):
            raise TraceError(f"replay result per_op[{i}] is {_kind(row)}, not an object", where)
        missing = [k for k in _PER_OP_KEYS if k not in row]
        if missing:
            raise TraceError(f"replay result per_op[{i}] lacks {', '.join(missing)}", where)
        if not isinstance(row["op_id"], int) or isinstance(row["op_id"], bool):
            raise TraceError(f"replay result per_op[{i}].op_id must be an integer, not {row['op_id']!r}", where)
        d = row["dur_us"]
        if d is not None and (isinstance(d, bool) or not isinstance(d, (int, float))):
            raise TraceError(f"replay result per_op[{i}].dur_us must be a number, not {d!r}", where)
    if any(isinstance(x, bool) or not isinstance(x, (int, float)) for x in data["iteration_ms"]):
        raise TraceError("replay result iteration_ms must hold numbers only", where)


def _per_op_row(r: dict) -> PerOpRow:
    """One per_op row with its status as an OpStatus (older files without status: replayed)."""
    if not isinstance(r, dict):
        raise TypeError(f"per_op row {r!r} is not an object")
    row = PerOpRow(
        op_id=int(r["op_id"]),
        name=str(r["name"]),
        category=str(r.get("category", "")),
        phase=str(r.get("phase", "")),
        dur_us=float("nan") if r["dur_us"] is None else float(r["dur_us"]),
        status=OpStatus(r.get("status", OpStatus.REPLAYED)),
    )
    if "collective" in r:
        row["collective"] = str(r["collective"])
    return row


def coverage_report(steps, failures: dict[int, str]) -> tuple[Coverage, list[SkippedOp]]:
    """Coverage counts over the plan's steps (see engine.replay docstring for definitions).

    `by_reason` keys are `SkipReason` values (stable); `failures` maps a step index to the
    exception text of an op that failed at run time (reason FAILED, text in `detail`)."""
    from engine.replay.reasons import SkipReason

    by_reason: dict[str, int] = {}
    by_category: dict[str, CategoryCoverage] = {}
    skipped_ops: list[SkippedOp] = []
    replayed = substituted = comm_sel = comm_rep = 0
    by_substitution: dict[str, int] = {}
    for st in steps:
        is_comm = getattr(st, "coll", None) is not None or str(st.name).startswith(COMM_PREFIXES)
        comm_sel += is_comm
        cat = by_category.setdefault(st.category, CategoryCoverage(selected=0, replayed=0, substituted=0, skipped=0))
        cat["selected"] += 1
        reason = st.reason or (SkipReason.FAILED if st.index in failures else "")
        if reason:
            key = reason.value if isinstance(reason, SkipReason) else str(reason)
            cat["skipped"] += 1
            by_reason[key] = by_reason.get(key, 0) + 1
            detail = st.detail or failures.get(st.index, "") or key
            skipped_ops.append(SkippedOp(op_id=st.op_id, name=st.name, reason=key, detail=detail))
            continue
        replayed += 1
        comm_rep += is_comm
        cat["replayed"] += 1
        sub = getattr(st, "substitution", "")
        if sub:
            substituted += 1
            cat["substituted"] += 1
            by_substitution[sub] = by_substitution.get(sub, 0) + 1
    selected = len(steps)
    comp = by_category.get("compute", CategoryCoverage(selected=0, replayed=0, substituted=0, skipped=0))
    return Coverage(
        selected=selected,
        replayed=replayed,
        substituted=substituted,
        skipped=selected - replayed,
        by_reason=dict(sorted(by_reason.items(), key=lambda kv: -kv[1])),
        by_substitution=dict(sorted(by_substitution.items(), key=lambda kv: -kv[1])),
        by_category=by_category,
        selected_compute=comp["selected"],
        replayed_compute=comp["replayed"],
        compute_rate=(comp["replayed"] / comp["selected"]) if comp["selected"] else 1.0,
        rate=(replayed / selected) if selected else 1.0,
        comm_selected=comm_sel,
        comm_replayed=comm_rep,
    ), skipped_ops
