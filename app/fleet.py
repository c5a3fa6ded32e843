"""The Fleet page's helpers: sign a fleet in a worker process (job kind `fleet_ingest`), read its
signatures (cached on the file's mtime) and the suite (cached on the table and the budget).

Why a worker: signing 1,000 jobs builds 1,000 trace stores; the server only queues the job, shows
its progress and can cancel it, then reads one small Parquet table."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import streamlit as st

from app import state
from engine.fleet.suite import Suite, baselines, manifest, pick, projection

KIND = "fleet_ingest"


def submit(paths: list[str], scheduler: str) -> int:
    return state.runner().submit(
        KIND, {"paths": paths, "scheduler": scheduler}, target=f"fleet of {len(paths)} path(s)"
    )


def jobs() -> list[dict]:
    return state.catalog().jobs(kind=KIND)


def active() -> list[dict]:
    return [j for j in jobs() if not j["status"].finished]


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
    js = jobs()
    if js and js[-1]["status"].value in ("failed", "cancelled"):
        return f"job {js[-1]['id']} {js[-1]['status'].value}: {js[-1].get('error') or ''}".strip()
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
