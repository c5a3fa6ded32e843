"""The critical-path block both Explore's Analysis and the What-if page show (one home).

Why here: the figure, the per-kind table and the top-ops table are the same on both pages; only
the metrics above them differ (Explore names the collectives, What-if the predicted step).
"""

from __future__ import annotations

import streamlit as st

from engine.figures import critical as critfig


def show_critical_path(cp: dict, segments, top_ops, *, title: str, key: str) -> None:
    """The path across ranks, its time by kind (ms per step) and the ops that hold it."""
    st.plotly_chart(critfig.critical_path_figure(segments, title=title), key=f"{key}_fig", width="stretch")
    st.dataframe(
        [{"kind": critfig.KIND_LABELS[k], "ms per step": round(v, 3)} for k, v in cp["by_kind"].items()],
        hide_index=True,
        key=f"{key}_by",
    )
    st.dataframe(critfig.path_table(top_ops), hide_index=True, key=key, width="stretch")
