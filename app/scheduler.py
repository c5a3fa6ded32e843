"""The dashboard's fan-out scheduler setting (serial / local / tcp://HOST:PORT).

Why a setting of the app: a store build or the rank summaries of a 512-rank job are fanned out
over ranks (engine.fanout), and where that runs (this machine, or a Dask cluster) is the user's
choice, like `--scheduler` on the CLI. The value is a sticky widget (saved in the workspace
catalog with the other settings); `mystique app --scheduler S` (MYSTIQUE_APP_SCHEDULER) sets it
for every new session; else it starts as MYSTIQUE_SCHEDULER or "local". A bad value is one line
of error and is not used.
"""

from __future__ import annotations

import streamlit as st

from app.markup import md_escape
from engine import envvars
from engine.errors import TraceError
from engine.settings import DashboardSettings

KEY = "dash_scheduler"
APP_ENV = "MYSTIQUE_APP_SCHEDULER"


def _initial() -> None:
    if not st.session_state.get("_scheduler_cli_applied"):
        st.session_state["_scheduler_cli_applied"] = True
        if started := envvars.get(APP_ENV):  # the server was started with --scheduler: it wins
            st.session_state[KEY] = started
    if KEY not in st.session_state:
        st.session_state[KEY] = envvars.get("MYSTIQUE_SCHEDULER") or "local"


def current() -> str:
    """The validated setting; TraceError (one line) when the value set is not a scheduler."""
    _initial()
    return DashboardSettings(scheduler=str(st.session_state[KEY])).scheduler


def widget() -> str | None:
    """The setting's text box; the validated value, or None after showing its one-line error.

    Not a keyed widget: the value is plain (sticky) state drawn back into the box on every run,
    so a page left and opened again never sends back a stale box value."""
    _initial()
    with st.container(key=f"{KEY}_box"):
        st.session_state[KEY] = st.text_input(
            "Fan-out scheduler",
            value=str(st.session_state[KEY]),
            help="Where store builds and rank summaries run: serial, local (a Dask LocalCluster on this "
            "machine) or tcp://HOST:PORT (a running dask scheduler whose workers see the same files).",
        )
    try:
        return current()
    except TraceError as exc:
        st.error(md_escape(exc))
        return None
