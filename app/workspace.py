"""The workspace behind the session: its catalog, job runner and the UI's files.

Nothing is lost (issue 13): every loaded trace, spec, replay job and sticky setting is written
to the workspace's SQLite catalog (`engine.workspace`, default `.mystique/` in the working
directory, `MYSTIQUE_WORKSPACE`); a new session (browser reload, server restart) restores them
(app/session.py). A catalog that refuses a save is shown once per session (`catalog_error`).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import streamlit as st

from app.markup import md_escape
from engine import envvars
from engine.errors import TraceError
from engine.outdir import atomic_write

ROOT = Path(__file__).resolve().parents[1]


def work_dir() -> Path:
    """Where uploads and replay results go (MYSTIQUE_UI_DIR; default .mystique_cache/ui in a
    checkout, the user cache folder when installed, since an install prefix may be read-only)."""
    from engine import resources

    default = ROOT / ".mystique_cache" / "ui" if resources.is_checkout() else resources.user_cache_dir() / "ui"
    return Path(envvars.get("MYSTIQUE_UI_DIR") or default)


def workspace_dir() -> Path:
    """The session's workspace folder: chosen on the Traces page, else MYSTIQUE_WORKSPACE, else
    `<MYSTIQUE_UI_DIR>/workspace` when that is set (tests), else `.mystique/` in the cwd."""
    chosen = st.session_state.get("workspace")
    if chosen:
        return Path(chosen)
    if ws := envvars.get("MYSTIQUE_WORKSPACE"):
        return Path(ws)
    if ui := envvars.get("MYSTIQUE_UI_DIR"):
        return Path(ui) / "workspace"
    return Path.cwd() / ".mystique"


@st.cache_resource(show_spinner=False)
def _catalog(root: str):
    from engine.workspace import Catalog

    return Catalog(root)


def catalog():
    return _catalog(str(workspace_dir().resolve()))


def catalog_error(exc: TraceError | str) -> None:
    """Show a catalog failure once per session, where it happened: a read-only catalog refuses
    every save with the same line, which must not repeat on every rerun; nothing is swallowed."""
    shown = st.session_state.setdefault("_catalog_shown", [])
    msg = str(exc).splitlines()[0]
    if msg not in shown:
        shown.append(msg)
        st.error(md_escape(msg))


def catalog_notice() -> None:
    """Once per session: what opening the workspace took (a damaged file moved aside and
    rebuilt, a read-only or newer catalog), as a warning; later refusals say the same line."""
    try:
        notice = catalog().notice
    except TraceError as exc:
        return catalog_error(exc)
    shown = st.session_state.setdefault("_catalog_shown", [])
    if notice and notice not in shown:
        shown.append(notice)
        st.warning(md_escape(notice))


def runner():
    from engine.workspace import JobRunner

    return JobRunner(catalog())


def failure_line(job: dict) -> str:
    """One plain line for a failed or cancelled job: "job 3 failed: <reason>", or "job 3
    cancelled" where no reason was recorded (a Cancel), never a colon with nothing after it."""
    head = f"job {job['id']} {job['status'].value}"
    why = (job.get("error") or "").strip()
    return f"{head}: {why}" if why else head


def replay_runs() -> list[dict]:
    """Finished replay jobs of the workspace, oldest first (what Compare offers)."""
    out: list[dict] = []
    try:
        jobs = catalog().jobs(kind="replay")
    except TraceError as exc:
        catalog_error(exc)
        return out
    for j in jobs:
        if j["status"].value != "done" or not j.get("result_path") or not Path(j["result_path"]).exists():
            continue
        s = j["summary"]
        out.append(
            {
                "job": j["id"],
                "trace": j["trace"],
                "path": j["result_path"],
                "kineto_path": s.get("kineto_path"),
                "device": s.get("device") or j["params"].get("config", {}).get("device", "cpu"),
                "target": j["target"],
                "median_ms": s.get("median_ms"),
                "wall_s": s.get("wall_s"),
                "worker_peak_rss_mb": s.get("worker_peak_rss_mb"),
                "peak_rss_mb": s.get("peak_rss_mb"),
            }
        )
    return out


def save_spec(trace_name: str, spec: dict) -> None:
    try:
        catalog().put_spec(trace_name, spec)
    except TraceError as exc:  # the spec stays in the session; the user is told once
        catalog_error(exc)


def save_upload(name: str, data: bytes) -> Path:
    """Write an uploaded file under the UI work dir, named by content (same bytes, same path)."""
    digest = hashlib.sha256(data).hexdigest()[:16]
    d = work_dir() / "uploads" / digest
    d.mkdir(parents=True, exist_ok=True)
    p = d / Path(name).name
    if not p.exists():
        atomic_write(p, data)  # a second session reading the same upload never sees half of it
    return p


def results_dir() -> Path:
    d = work_dir() / "results"
    d.mkdir(parents=True, exist_ok=True)
    return d
