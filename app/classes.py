"""The kernel-class table (engine.trace.kernels) that Explore's Analysis and Breakdown show.

Why one home: the class -> kernels, time, share table is the same on every page that breaks GPU
time down, and `mystique info --json` prints the same numbers (`kernel_classes`).
"""

from __future__ import annotations

import pandas as pd
import streamlit as st


def class_table(shares: pd.DataFrame) -> pd.DataFrame:
    """class, kernels, ms, share % from `engine.trace.kernels.class_shares`."""
    return pd.DataFrame(
        {
            "class": shares["class"].astype(str),
            "kernels": shares["kernels"].astype(int),
            "ms": (shares["dur_us"].astype(float) / 1e3).round(3),
            "share_pct": (100 * shares["share"].astype(float)).round(1),
        }
    )


def show_kernel_classes(shares: pd.DataFrame, *, key: str) -> None:
    """Subheader, table and a caption; nothing when the trace has no GPU work."""
    if not len(shares):
        return
    st.subheader("GPU time by kernel class")
    st.dataframe(
        class_table(shares),
        hide_index=True,
        key=key,
        column_config={
            "share_pct": st.column_config.ProgressColumn("share %", min_value=0, max_value=100, format="%.1f")
        },
    )
    st.caption(
        "One classifier across vendors (engine/trace/kernels.py): GEMM is cuBLAS, CUTLASS, hipBLASLt `Cijk_`, "
        "rocBLAS and Triton matmul; attention (flash, FMHA, CK, SDPA) is apart from GEMM. Share of summed GPU "
        "task time (overlapping streams count twice); `mystique info --json` prints the same table."
    )
