"""The Fleet page's helpers: sign a fleet in a worker process (job kind `fleet_ingest`), read its
signatures (cached on the file's mtime) and the suite (cached on the table and the budget);
compose the suite's members into benchmarks (job kind `fleet_suite`, as `mystique fleet suite
--out`) and replay them (job kind `fleet_suite_replay`, as `mystique replay SUITE`).

Why a worker: signing 1,000 jobs builds 1,000 trace stores, composing and replaying members takes
minutes; the server only queues the job, shows its progress and can cancel it, then reads small
files (a Parquet table, a manifest, a suite_replay.json)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import streamlit as st

from app import workspace
from engine.fleet.suite import Suite, baselines, manifest, pick, projection

KIND = "fleet_ingest"
SUITE_KIND = "fleet_suite"
REPLAY_KIND = "fleet_suite_replay"
KINDS = (KIND, SUITE_KIND, REPLAY_KIND)


def submit(paths: list[str], scheduler: str) -> int:
    return workspace.runner().submit(
        KIND, {"paths": paths, "scheduler": scheduler}, target=f"fleet of {len(paths)} path(s)"
    )


def jobs(kind: str = KIND) -> list[dict]:
    return workspace.catalog().jobs(kind=kind)


def active() -> list[dict]:
    """Unfinished jobs of the page's three kinds, oldest first."""
    return sorted((j for k in KINDS for j in jobs(k) if not j["status"].finished), key=lambda j: j["id"])


def submit_suite(folder: str, budget: int) -> int:
    """Compose the suite of `budget` picks of this fleet in a worker (engine.fleet.members)."""
    return workspace.runner().submit(
        SUITE_KIND, {"fleet": folder, "budget": int(budget)}, target=f"suite of {budget} from {Path(folder).name}"
    )


def submit_replay(suite_folder: str) -> int:
    """Replay every member of a composed suite in a worker (engine.fleet.replay)."""
    return workspace.runner().submit(
        REPLAY_KIND, {"suite": suite_folder}, target=f"replay of {Path(suite_folder).name}"
    )


def composed(folder: str, budget: int) -> dict | None:
    """The newest finished composition of this fleet and budget: {id, suite, manifest}, or None."""
    for j in reversed(jobs(SUITE_KIND)):
        s, p = j.get("summary") or {}, j["params"]
        if j["status"].value == "done" and p.get("fleet") == folder and int(p.get("budget", -1)) == int(budget):
            try:
                man = json.loads((Path(s["suite"]) / "manifest.json").read_text())
            except (OSError, ValueError, KeyError):
                continue
            return {"id": j["id"], "suite": s["suite"], "manifest": man}
    return None


def replayed(suite_folder: str) -> dict | None:
    """The newest finished replay of this suite folder (its suite_replay.json), or None."""
    for j in reversed(jobs(REPLAY_KIND)):
        if j["status"].value == "done" and j["params"].get("suite") == suite_folder:
            try:
                return json.loads(Path(j["result_path"]).read_text())
            except (OSError, ValueError, TypeError):
                continue
    return None


def fleets() -> list[dict]:
    """Finished fleets, newest first: {id, folder, jobs, paths}."""
    out = []
    for j in reversed(jobs()):
        s = j.get("summary") or {}
        if j["status"].value == "done" and s.get("fleet") and (Path(s["fleet"]) / "signatures.parquet").is_file():
            out.append(
                {"id": j["id"], "folder": s["fleet"], "jobs": s.get("jobs", 0), "paths": j["params"].get("paths", [])}
            )
    return out


def last_failure() -> str | None:
    js = sorted((j for k in KINDS for j in jobs(k)), key=lambda j: j["id"])
    if js and js[-1]["status"].value in ("failed", "cancelled"):
        return workspace.failure_line(js[-1])
    return None


@st.cache_data(max_entries=8, show_spinner=False)
def _signatures(path: str, mtime: int) -> pd.DataFrame:
    return pd.read_parquet(path)


def signatures(folder: str) -> pd.DataFrame:
    p = Path(folder) / "signatures.parquet"
    return _signatures(str(p), p.stat().st_mtime_ns)


def skipped(folder: str) -> list[dict]:
    try:
        return json.loads((Path(folder) / "fleet.json").read_text()).get("skipped", [])
    except (OSError, ValueError):
        return []


@st.cache_data(max_entries=16, show_spinner=False)
def _suite(path: str, mtime: int, budget: int) -> tuple[Suite, dict, pd.DataFrame]:
    sigs = _signatures(path, mtime)
    suite = pick(sigs, budget)
    pts = projection(sigs, budget)
    pts["pick"] = False
    pts["weight"] = 0.0
    pts["step_ms"] = sigs["step_ms"].to_numpy()
    for i, w in zip(suite.picks, suite.weights, strict=True):
        pts.loc[i, "pick"] = True
        pts.loc[i, "weight"] = w
    return suite, baselines(sigs, budget), pts


def suite(folder: str, budget: int) -> tuple[Suite, dict, pd.DataFrame]:
    """(the suite, its baselines, the jobs' map with picks marked), cached."""
    p = Path(folder) / "signatures.parquet"
    return _suite(str(p), p.stat().st_mtime_ns, budget)


def write_suite(folder: str, budget: int) -> Path:
    """The suite's manifest (members, weights, signatures, distance, baselines) in the fleet folder."""
    from engine.outdir import atomic_write

    s, base, _ = suite(folder, budget)
    doc = manifest(signatures(folder), budget, s, base)
    out = Path(folder) / f"suite_{budget}" / "manifest.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    return atomic_write(out, json.dumps(doc, indent=2))
