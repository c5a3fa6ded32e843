"""Which jobs a set of paths holds, and their signatures through the trace store (Dask fan-out).

A job is one Kineto trace file, or the rank files of one folder (two or more files whose names
carry a rank: `*rank0*`, `*_1.json`...; engine.trace.loader.rank_from_name). Folders are walked
recursively; ETs (`*_et.json*`), capture metadata (`*_meta.json`) and `MANIFEST.json` are left
out by name, and a file the store refuses (an ET without that suffix, a file that is no trace) is
listed as skipped with the store's one-line reason, never silently.

Each job is one task of `engine.fanout.map_ranks` (serial, a LocalCluster, or a scheduler): it
builds the job's store (engine.trace.store, cached by content) and reads each rank's
`EVENT_COLUMNS` only, so a task holds one rank's few columns at a time.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.errors import TraceError
from engine.fleet.signature import EVENT_COLUMNS, device_name, job_signature, rank_signature
from engine.progress import Progress
from engine.trace.layout import rank_in_name
from engine.trace.vocab import GPU_CATS

_TRACE_SUFFIXES = (".json", ".json.gz", ".tar.gz", ".tgz")
_NOT_TRACES = ("_et.json", "_meta.json", "manifest.json")


@dataclass(frozen=True, kw_only=True, slots=True)
class Job:
    """One job: a display name and its trace files (one, or a folder's rank files)."""

    name: str
    files: tuple[str, ...]


def _is_candidate(f: Path) -> bool:
    low = f.name.lower()
    return f.is_file() and low.endswith(_TRACE_SUFFIXES) and not any(t in low for t in _NOT_TRACES)


def _name(f: Path, root: Path) -> str:
    rel = f.relative_to(root) if f != root and root in f.parents else Path(f.name)
    text = rel.as_posix()
    for suf in (".pt.trace.json.gz", ".pt.trace.json", ".json.gz", ".json", ".tar.gz", ".tgz"):
        if text.lower().endswith(suf):
            return text[: -len(suf)]
    return text


def discover(paths: list[str | os.PathLike]) -> list[Job]:
    """The jobs behind `paths` (files and folders), in a stable order; TraceError for a path that
    does not exist or a folder without any trace file."""
    jobs: list[Job] = []
    for raw in paths:
        p = Path(raw)
        if not p.exists():
            raise TraceError("no such file or folder", p)
        if p.is_file():
            jobs.append(Job(name=_name(p, p.parent), files=(os.fspath(p),)))
            continue
        found = 0
        root = p.parent
        for d, subdirs, names in os.walk(p):
            subdirs[:] = sorted(s for s in subdirs if not s.startswith("."))
            files = [Path(d) / n for n in sorted(names)]
            cand = [f for f in files if _is_candidate(f)]
            ranked = [f for f in cand if rank_in_name(os.fspath(f)) is not None]
            if len(ranked) >= 2:
                jobs.append(Job(name=Path(d).relative_to(root).as_posix(), files=tuple(os.fspath(f) for f in ranked)))
                cand = [f for f in cand if f not in ranked]
            jobs.extend(Job(name=_name(f, root), files=(os.fspath(f),)) for f in cand)
            found += len(cand) + (len(ranked) >= 2)
        if not found:
            raise TraceError("holds no trace file (.json, .json.gz, .tar.gz)", p)
    return jobs


def signature_of(job: Job) -> dict[str, Any]:
    """One job's signature row (engine.fleet.signature.job_signature), or {"job", "path",
    "skipped": reason} when the store refuses it. Module-level: it runs on Dask workers."""
    from engine.trace.store import build
    from engine.trace.store.read import manifest, rank_events, ranks

    path = job.files[0] if len(job.files) == 1 else os.path.dirname(job.files[0])
    try:
        store = build(*job.files, scheduler="serial")
    except TraceError as exc:
        return {"job": job.name, "path": path, "skipped": exc.problem}
    man = manifest(store)
    sigs = []
    kernel_names: list[str] = []
    for r in ranks(store):
        ev = rank_events(store, r, columns=EVENT_COLUMNS)
        sigs.append(rank_signature(ev))
        if not kernel_names:
            g = ev[ev["cat"].astype(str).isin(GPU_CATS)]
            kernel_names = [str(n) for n in g["name"].astype(str).unique()[:2000]]
        del ev
    props = [p for s in man["sources"] for p in (s.get("device_properties") or [])]
    worlds = [int(s["world_size"]) for s in man["sources"] if s.get("world_size")]
    return job_signature(
        sigs,
        job=job.name,
        path=path,
        device=device_name(props, kernel_names),
        world_size=max(worlds) if worlds else None,
    )


def signatures(jobs: list[Job], scheduler: str | None = None, progress: Progress | None = None) -> list[dict[str, Any]]:
    """Every job's signature row (skipped jobs keep their reason), one Dask task per job."""
    from engine.fanout import map_ranks

    return map_ranks(signature_of, jobs, scheduler=scheduler, progress=progress)
