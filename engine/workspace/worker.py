"""Worker process of one job: `python -m engine.workspace.worker WORKSPACE JOB_ID`.

Runs the job's kind (registry `JOB_KINDS`), writes progress (throttled) and the outcome into
the job's catalog row, then starts the next queued job. Errors end as status `failed` with a
one-line message; nothing is printed to the server.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path

from engine.outdir import atomic_fill, atomic_write
from engine.workspace.catalog import Catalog, JobStatus


def run_replay(job: dict, out_dir, progress) -> dict:
    """params: paths (trace files), op_ids (or None), rank, config (ReplayConfig fields), and
    optionally distributed (DistConfig fields: world_size, mirror_rank, timeout_s)."""
    from engine.replay import ReplayConfig, replay
    from engine.trace import load

    p = job["params"]
    config = ReplayConfig(**{**p.get("config", {}), "out_dir": out_dir})
    if p.get("distributed"):  # one process per rank (engine.replay.distributed), this worker waits
        from engine.replay.distributed import DistConfig, replay_distributed

        result = replay_distributed(
            p["paths"], config=config, dist=DistConfig.from_dict(p["distributed"]), out_dir=out_dir, progress=progress
        )
        return _summary(result, result.write(out_dir))
    trace = load(*p["paths"], progress=lambda f, m: progress(0.05 * f, f"loading: {m}"))
    result = replay(
        trace,
        config=config,
        op_ids=p.get("op_ids"),
        rank=p.get("rank"),
        progress=lambda f, m: progress(0.05 + 0.95 * f, m),
    )
    return _summary(result, result.write(out_dir))


def tree_peak_rss_mb(result) -> float:
    """Peak RSS of the replay's process tree (MB): this worker's own peak plus each rank process's
    measured peak (the ranks run at the same time), or the largest finished child's when a rank
    did not report one. The worker alone under-reports a distributed replay (725 MB shown while a
    rank process peaked at 1.29 GB, issue 32)."""
    import resource

    own_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    child_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    ranks = result.ranks or []
    if len(ranks) > 1:
        ranks_kb = sum((r.get("peak_rss_bytes") or child_kb * 1024) / 1024 for r in ranks)
    else:
        ranks_kb = child_kb
    return round((own_kb + ranks_kb) / 1024, 1)


def _summary(result, path) -> dict:
    import resource

    peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {
        "result_path": str(path),
        "summary": {
            "median_ms": result.median_ms,
            "median_step_ms": result.median_step_ms,
            "steps_per_iteration": result.steps_per_iteration,
            "coverage": result.coverage,
            "kineto_path": result.kineto_path,
            "device": result.device,
            "worker_peak_rss_mb": round(peak_kb / 1024, 1),
            "peak_rss_mb": tree_peak_rss_mb(result),
            "world_size": result.world_size,
        },
    }


def run_rank_summary(job: dict, out_dir, progress) -> dict:
    """params: paths (trace files or folders, or one trace store folder), scheduler (serial,
    local or tcp://HOST:PORT). Builds the store when the paths are traces (per-rank ingestion
    fan-out), then the per-rank summaries beside it (engine.analysis.ranks); the rank overview
    reads them. Cancel kills this worker's process group, Dask's local workers included."""
    from engine.analysis import ranks
    from engine.progress import scaled
    from engine.trace.store import build
    from engine.trace.store.read import is_store

    p = job["params"]
    paths, scheduler = list(p["paths"]), p.get("scheduler")
    if len(paths) == 1 and is_store(paths[0]):
        store = paths[0]
    else:
        store = build(*paths, scheduler=scheduler, progress=scaled(progress, 0.0, 0.6))
    table = ranks.summarize(store, scheduler=scheduler, progress=scaled(progress, 0.6, 1.0))
    return {
        "result_path": str(Path(store) / ranks.SUMMARY),
        "summary": {"store": str(store), "ranks": int(table["rank"].nunique()), "rows": len(table)},
    }


def run_fleet_ingest(job: dict, out_dir, progress) -> dict:
    """params: paths (trace files and folders of jobs), scheduler. One signature per job through
    the trace store (engine.fleet), written to the run folder as signatures.parquet + fleet.json."""
    import json

    import pandas as pd

    from engine.fleet.jobs import discover, signatures

    p = job["params"]
    jobs = discover(list(p["paths"]))
    rows = signatures(jobs, scheduler=p.get("scheduler"), progress=progress)
    good = [r for r in rows if "skipped" not in r]
    skipped = [r for r in rows if "skipped" in r]
    out = Path(out_dir)
    atomic_fill(out / "signatures.parquet", lambda fh: pd.DataFrame(good).to_parquet(fh, index=False))
    atomic_write(out / "fleet.json", json.dumps({"jobs": len(good), "skipped": skipped, "paths": p["paths"]}))
    return {
        "result_path": str(out / "signatures.parquet"),
        "summary": {"fleet": str(out), "jobs": len(good), "skipped": len(skipped)},
    }


def run_fleet_suite(job: dict, out_dir, progress) -> dict:
    """params: fleet (a folder with signatures.parquet), budget, seed, max_ranks. The suite picked
    and each pick composed into a benchmark (engine.fleet.members), as `mystique fleet suite
    --out`: the run folder is the suite folder (manifest.json + members/)."""
    import json

    import pandas as pd

    from engine.fleet.members import compose_suite
    from engine.fleet.suite import baselines, manifest, pick
    from engine.progress import scaled

    p = job["params"]
    sigs = pd.read_parquet(Path(p["fleet"]) / "signatures.parquet")
    budget, seed = int(p["budget"]), int(p.get("seed", 0))
    progress(0.0, "picking the suite")
    suite = pick(sigs, budget, seed=seed)
    base = baselines(sigs, budget, seed=seed)
    out = Path(out_dir)
    members = compose_suite(
        sigs, suite.picks, suite.weights, out, max_ranks=p.get("max_ranks"), progress=scaled(progress, 0.05, 1.0)
    )
    doc = manifest(sigs, budget, suite, base, [m.to_dict() for m in members])
    doc["fleet"] = str(p["fleet"])
    atomic_write(out / "manifest.json", json.dumps(doc, indent=2))
    composed = sum(m.benchmark is not None for m in members)
    return {
        "result_path": str(out / "manifest.json"),
        "summary": {
            "suite": str(out),
            "fleet": str(p["fleet"]),
            "budget": budget,
            "composed": composed,
            "refused": len(members) - composed,
        },
    }


def run_fleet_suite_replay(job: dict, out_dir, progress) -> dict:
    """params: suite (a suite folder), warmup, iters. Every member replayed (engine.fleet.replay)."""
    from engine.fleet.replay import replay_suite

    p = job["params"]
    res = replay_suite(
        p["suite"], out=out_dir, warmup=int(p.get("warmup", 1)), iters=int(p.get("iters", 5)), progress=progress
    )
    return {
        "result_path": str(Path(out_dir) / "suite_replay.json"),
        "summary": {
            "suite": str(p["suite"]),
            "weighted_step_ms": res["weighted_step_ms"],
            "weight_replayed": res["weight_replayed"],
            "replayed": res["replayed"],
            "refused": res["refused"],
        },
    }


JOB_KINDS: dict[str, Callable[[dict, object, Callable[[float, str], None]], dict]] = {
    "replay": run_replay,
    "rank_summary": run_rank_summary,
    "fleet_ingest": run_fleet_ingest,
    "fleet_suite": run_fleet_suite,
    "fleet_suite_replay": run_fleet_suite_replay,
}


def main(root: str, job_id: int) -> int:
    """Run one job. A catalog write that fails (full disk, read-only) does not stop the run:
    the result is written to the run folder first, the failure is one line on stderr (the
    job's log) and the reaper records the job from its run folder (`JobRunner.reap`)."""
    import os

    from engine.errors import TraceError
    from engine.workspace.catalog import CatalogError
    from engine.workspace.jobs import JobRunner

    cat = Catalog(root)
    job = cat.job(job_id)
    if job is None:
        return 2
    failed: list[str] = []

    def record(**fields) -> bool:
        try:
            cat.update_job(job_id, **fields)
            return True
        except CatalogError as exc:
            if str(exc) not in failed:  # one line per distinct failure, not one per progress tick
                failed.append(str(exc))
                print(str(exc), file=sys.stderr, flush=True)
            return False

    record(pid=os.getpid(), message="starting")
    out = cat.runs_dir() / f"job_{job_id}"
    out.mkdir(parents=True, exist_ok=True)
    last = [0.0]

    def progress(fraction: float, message: str) -> None:
        now = time.monotonic()
        if now - last[0] >= 0.25 or fraction >= 1.0:
            last[0] = now
            record(fraction=float(max(0.0, min(1.0, fraction))), message=str(message)[:200])

    t0 = time.perf_counter()
    try:
        fn = JOB_KINDS.get(job["kind"])
        if fn is None:
            raise TraceError(f"unknown job kind {job['kind']!r}")
        res = fn(job, out, progress)
        summary = {**res.get("summary", {}), "wall_s": round(time.perf_counter() - t0, 2)}
        done = dict(status=JobStatus.DONE, fraction=1.0, message="done", finished=time.time(), out_dir=str(out))
        done.update(result_path=res.get("result_path"), summary=summary)
        for attempt in range(3):  # a full disk may free up; the result is on disk either way
            try:
                if (cat.job(job_id) or {}).get("status") == JobStatus.RUNNING:
                    cat.update_job(job_id, **done)
                break
            except CatalogError:
                if attempt == 2:
                    record(**done)  # prints the one line; the reaper records the run folder
                time.sleep(0.5)
    except Exception as exc:  # noqa: BLE001 - recorded as the job's one-line error
        error = str(exc) if isinstance(exc, TraceError) else f"{type(exc).__name__}: {exc}"[:500]
        if not record(status=JobStatus.FAILED, error=error, finished=time.time(), message="failed"):
            print(error.splitlines()[0], file=sys.stderr, flush=True)  # the reaper records the last line
    finally:
        try:
            JobRunner(cat).pump()
        except (CatalogError, OSError) as exc:
            if str(exc) not in failed:
                print(str(exc).splitlines()[0], file=sys.stderr, flush=True)
    return 3 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], int(sys.argv[2])))
