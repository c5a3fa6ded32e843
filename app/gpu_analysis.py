"""Explore → Analysis: GPU queue length and launch delay, idle split, the tasks the GPU waited for,
and the GEMM / attention table (engine.analysis.gpu_queue and .gemm define every number; the
figure is engine.figures.gpu_queue). Every table has a CSV download."""

from __future__ import annotations

from collections.abc import Callable

import pandas as pd
import streamlit as st


def csv_button(df: pd.DataFrame, file_name: str, *, key: str) -> None:
    """A download button with the whole table as CSV."""
    st.download_button(
        f"Download {file_name}", df.to_csv(index=False).encode(), file_name=file_name, mime="text/csv", key=key
    )


def show_gpu_analysis(data: dict | None, gemm: Callable[[], tuple], *, key: str) -> None:
    """Nothing without launched GPU work; a one-line note for a trace read through its store.
    `gemm()`: the GEMM table and its header, computed when the reader turns the table on (it reads
    the trace's files again for the ops' Input Dims: seconds on a big trace)."""
    if data is None:
        st.info("GPU queue and GEMM analyses need whole tables: run `mystique info --json` on one rank's file.")
        return
    lz = data["launches"]
    if not len(lz):
        return
    from engine.figures.gpu_queue import queue_figure

    st.subheader("GPU queue length and launch delay")
    st.plotly_chart(queue_figure(lz), key=f"{key}_queue", width="stretch")
    st.dataframe(data["streams"].round(3), hide_index=True, key=f"{key}_streams")
    csv_button(data["streams"], "gpu_streams.csv", key=f"{key}_streams_csv")
    csv_button(lz, "gpu_launches.csv", key=f"{key}_launches_csv")
    st.caption(
        "Queue length at a launch: tasks on the stream launched before it and not yet finished; launch delay: "
        "task start − launch call start (the figure keeps each time bin's peak; definitions: "
        "engine/analysis/gpu_queue.py)."
    )
    i = data["idle"]
    st.subheader("GPU idle time: host wait vs kernel wait")
    c = st.columns(4)
    c[0].metric("idle ms", f"{i['idle_us'] / 1e3:,.3f}")
    c[1].metric("host wait ms", f"{i['host_wait_us'] / 1e3:,.3f}")
    c[2].metric("kernel wait ms", f"{i['kernel_wait_us'] / 1e3:,.3f}")
    c[3].metric("unlinked ms", f"{i['unlinked_us'] / 1e3:,.3f}")
    st.caption(
        "Host wait: the GPU was idle before the next task's launch call began (the host was behind); kernel wait: "
        "the next task was already launched (launch latency, a dependency or a sync)."
    )
    w = data["waited_for"]
    if len(w):
        st.markdown("**The tasks the GPU waited for** (largest host wait first)")
        st.dataframe(w.round(3), hide_index=True, key=f"{key}_waited")
        csv_button(w, "gpu_waited_for.csv", key=f"{key}_waited_csv")
    st.subheader("GEMM and attention: FLOPs and share of peak")
    if not st.toggle("Compute the GEMM / attention table (reads the ops' Input Dims)", key=f"{key}_gemm_on"):
        return
    tab, head = gemm()
    if not len(tab):
        st.info(f"No GEMM table: {head.get('why') or 'no GEMM work'}.")
        return
    st.dataframe(
        tab.round(4),
        hide_index=True,
        key=f"{key}_gemm",
        column_config={
            "peak_share": st.column_config.ProgressColumn("share of peak", min_value=0, max_value=1, format="%.3f")
        },
    )
    csv_button(tab, "gemm_attention.csv", key=f"{key}_gemm_csv")
    dev = head.get("device")
    st.caption(
        f"Device {dev} ({head.get('device_from')}); FLOPs from the launching op's Input Dims; peak: the catalog's dense "
        f"figure for the dtype (default {head.get('default_dtype')})."
        if dev
        else f"No device peak: {head.get('device_from')}."
    )
