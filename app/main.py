"""Streamlit router: `streamlit run app/main.py` (or `mystique app`). Pages live in `pages/`.

`streamlit run` puts `app/` (not the repo root) on sys.path, so the root is added here: pages
import `app` and `engine` from a plain checkout as well as from an editable install.
"""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import streamlit as st  # noqa: E402 -- after the sys.path fix above

from app import prefetch, session, workspace  # noqa: E402 -- after the sys.path fix above
from app.markup import md_escape  # noqa: E402

st.set_page_config(page_title="mystique-studio", page_icon=":material/biotech:", layout="wide")
session.ensure_started()
workspace.catalog_notice()
if err := st.session_state.pop("_start_error", None):
    st.warning(md_escape(err))
if pending := st.session_state.pop("_pending_current", None):
    session.make_current(pending)
session.restore_settings()

# Material icons ship with Streamlit's own font, so they render where no emoji font is installed
# (headless chromium on a server showed the emoji as empty boxes).
PAGES = [
    st.Page(str(ROOT / "pages" / "traces.py"), title="Traces", icon=":material/folder_open:", default=True),
    st.Page(str(ROOT / "pages" / "explore.py"), title="Explore", icon=":material/search:"),
    st.Page(str(ROOT / "pages" / "ranks.py"), title="Ranks", icon=":material/grid_view:"),
    st.Page(str(ROOT / "pages" / "compose.py"), title="Compose", icon=":material/extension:"),
    st.Page(str(ROOT / "pages" / "replay.py"), title="Replay", icon=":material/play_arrow:"),
    st.Page(str(ROOT / "pages" / "compare.py"), title="Compare", icon=":material/compare_arrows:"),
    st.Page(str(ROOT / "pages" / "whatif.py"), title="What-if", icon=":material/online_prediction:"),
    st.Page(str(ROOT / "pages" / "fleet.py"), title="Fleet", icon=":material/hub:"),
]
try:
    st.navigation(PAGES).run()
finally:
    session.save_settings()
    prefetch.flush()
