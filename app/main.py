"""Streamlit router: `streamlit run app/main.py` (or `mystique app`). Pages live in `pages/`.

`streamlit run` puts `app/` (not the repo root) on sys.path, so the root is added here: pages
import `app.state` and `engine` from a plain checkout as well as from an editable install.
"""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import streamlit as st  # noqa: E402 -- after the sys.path fix above

from app import state  # noqa: E402 -- after the sys.path fix above

st.set_page_config(page_title="mystique-studio", page_icon="🧬", layout="wide")
state.ensure_started()
if err := st.session_state.pop("_start_error", None):
    st.warning(err)
if pending := st.session_state.pop("_pending_current", None):
    state.make_current(pending)
state.restore_settings()

PAGES = [
    st.Page(str(ROOT / "pages" / "traces.py"), title="Traces", icon="📂", default=True),
    st.Page(str(ROOT / "pages" / "explore.py"), title="Explore", icon="🔎"),
    st.Page(str(ROOT / "pages" / "compose.py"), title="Compose", icon="🧩"),
    st.Page(str(ROOT / "pages" / "replay.py"), title="Replay", icon="▶️"),
    st.Page(str(ROOT / "pages" / "compare.py"), title="Compare", icon="⚖️"),
    st.Page(str(ROOT / "pages" / "whatif.py"), title="What-if", icon="🔮"),
]
try:
    st.navigation(PAGES).run()
finally:
    state.save_settings()
    state.flush_prefetch()
