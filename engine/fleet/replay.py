"""`mystique replay SUITE`: every member of a suite folder replayed, and the weighted fleet time.

A suite folder is what `mystique fleet suite --out` writes: `manifest.json` (kind
`mystique-suite`) listing each member's weight and benchmark folder (engine.fleet.members).
Each composed member runs through the same replay as `mystique replay DIR`: one rank in this
process (engine.replay.replay), several ranks one process each (engine.replay.distributed, with
its memory refusal). Per member: the median step time (ms; the slowest rank's for several
ranks) and its coverage (replayed / selected ops; the target is >= 99 %). The fleet time is
sum(weight x member step time) over the members that replayed; `weight_replayed` says how much
of the suite's weight that covers (a refused or unreplayable member is listed with its one-line
reason, never counted as zero).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from engine.errors import TraceError
from engine.progress import Progress, report, scaled

COVERAGE_TARGET = 0.99
MANIFEST = "manifest.json"


def is_suite(path: str | Path) -> bool:
    """Is `path` a suite folder (a manifest.json of kind mystique-suite)?"""
    from engine.fleet.suite import SUITE_KIND

    p = Path(path) / MANIFEST
    if not p.is_file():
        return False
    try:
        return json.loads(p.read_text()).get("kind") == SUITE_KIND
    except (OSError, ValueError, AttributeError):
        return False


def read_suite(path: str | Path) -> dict[str, Any]:
    """The suite's manifest; TraceError naming the file when it is not one a replay can run."""
    p = Path(path) / MANIFEST
    try:
        doc = json.loads(p.read_text())
    except (OSError, ValueError) as exc:
        raise TraceError(f"not a readable suite manifest ({type(exc).__name__})", p) from None
    members = doc.get("members") if isinstance(doc, dict) else None
    if not isinstance(members, list) or not members:
        raise TraceError("suite manifest lists no members", p)
    if not any(isinstance(m, dict) and ("benchmark" in m or "refused" in m) for m in members):
        raise TraceError(
            "suite members were not composed (written with --no-compose): run `mystique fleet suite --out` again", p
        )
    return doc


def _one(folder: Path, config, out: Path, progress: Progress | None) -> dict[str, Any]:
    """Replay one member's benchmark folder; its summary."""
    from engine.trace.layout import resolve

    inputs = resolve(folder)
    files = [str(f) for f in inputs.files]
    if inputs.multi_rank:
        from engine.replay.distributed import DistConfig, replay_distributed

        res = replay_distributed(files, config=config, dist=DistConfig(), out_dir=out, progress=progress)
    else:
        import engine.trace as T
        from engine.replay import replay

        res = replay(T.load(*files), config=config, progress=progress)
    res.write(out)
    cov = res.coverage
    selected, replayed = int(cov["selected"]), int(cov["replayed"])
    rate = replayed / selected if selected else 0.0
    return {
        "ranks": res.world_size or 1,
        "median_ms": float(res.median_step_ms),  # per recorded step (a job's step)
        "iteration_ms": [round(float(x), 4) for x in res.iteration_ms],
        "coverage": {"selected": selected, "replayed": replayed, "rate": rate, "by_reason": dict(cov["by_reason"])},
        "meets_target": rate >= COVERAGE_TARGET,
        "replay_json": str(out / "replay.json"),
        "device": res.device,
    }


def replay_suite(
    folder: str | Path,
    *,
    out: str | Path,
    device: str = "cpu",
    warmup: int = 1,
    iters: int = 5,
    profile: bool = False,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Replay every member (module doc); the suite's result (also written to out/suite_replay.json)."""
    from engine.distributed.launch import RankFailed
    from engine.outdir import atomic_write, prepare
    from engine.replay import ReplayConfig

    folder = Path(folder)
    doc = read_suite(folder)
    out = prepare(out)
    members = doc["members"]
    rows = []
    for k, m in enumerate(members):
        row: dict[str, Any] = {"job": m.get("job"), "weight": float(m.get("weight") or 0.0)}
        sub = scaled(progress, k / len(members), (k + 1) / len(members))
        report(sub, 0.0, f"member {k + 1}/{len(members)}: {m.get('job')}")
        if not m.get("benchmark"):
            row["refused"] = f"not composed: {m.get('refused') or 'no benchmark folder'}"
            rows.append(row)
            continue
        bench = folder / m["benchmark"]
        row["benchmark"] = str(bench)
        mout = out / Path(m["benchmark"]).name
        config = ReplayConfig(device=device, warmup=warmup, iters=iters, profile=profile, out_dir=mout, lazy="auto")
        try:
            row.update(_one(bench, config, mout, sub))
        except (TraceError, RankFailed) as exc:
            row["refused"] = str(exc).splitlines()[0]
        rows.append(row)
    done = [r for r in rows if "median_ms" in r]
    result = {
        "suite": str(folder),
        "members": rows,
        "weighted_step_ms": sum(r["weight"] * r["median_ms"] for r in done),
        "weight_replayed": sum(r["weight"] for r in done),
        "replayed": len(done),
        "refused": len(rows) - len(done),
        "coverage_target": COVERAGE_TARGET,
        "all_meet_target": bool(done) and all(r["meets_target"] for r in done) and len(done) == len(rows),
        "fleet_signature": doc.get("fleet_signature"),
        "l1": doc.get("l1"),
    }
    atomic_write(out / "suite_replay.json", json.dumps(result, indent=2))
    report(progress, 1.0, "suite replayed")
    return result


__all__ = ["COVERAGE_TARGET", "is_suite", "read_suite", "replay_suite"]
