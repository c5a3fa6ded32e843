"""Traces page: load bundled samples, uploads or server paths; name them; show the info summary."""

from pathlib import Path

import streamlit as st

from app import session, views, widgets, workspace
from app.markup import md_escape
from engine.errors import TraceError
from engine.figures import breakdown

KIND_LABELS = {"execution_trace": "ET", "kineto": "Kineto"}

st.title("Traces")

src_sample, src_upload, src_path = st.tabs(["Bundled sample", "Upload", "Path on server"])

with src_sample:
    sets = session.sample_sets()
    if sets:
        pick = st.selectbox("Sample", list(sets), key="sample_pick")
        st.caption(" + ".join(md_escape(Path(p).name) for p in sets[pick]))
        if st.button("Load sample", key="load_sample"):
            try:
                name = (
                    session.unique_name(f"sample:{pick}") if f"sample:{pick}" in session.traces() else f"sample:{pick}"
                )
                name = session.add_trace(name, sets[pick])
                session.make_current(name)
                st.success(f"loaded {md_escape(name)}")
            except TraceError as exc:
                st.error(md_escape(exc))
    else:
        st.info("No bundled samples (run `make samples`).")

with src_upload:
    limit_mb = int(st.get_option("server.maxUploadSize"))
    files = st.file_uploader(
        "ET / Kineto traces (.json, .json.gz, .tar.gz); an ET and a Kineto of the same run "
        "are paired when loaded together",
        accept_multiple_files=True,
        key="uploads",
    )
    up_name = st.text_input("Name", value="", key="upload_name", placeholder="defaults to the first file name")
    if st.button("Load upload", key="load_upload", disabled=not files):
        try:
            saved: list[Path] = []
            for f in files:
                if f.size > limit_mb * 1024 * 1024:
                    raise TraceError(f"file is {f.size / 2**20:.0f} MB, over the {limit_mb} MB upload limit", f.name)
                saved.append(workspace.save_upload(f.name, f.getvalue()))
            name = session.unique_name(up_name.strip() or Path(files[0].name).name)
            name = session.add_trace(name, [str(p) for p in saved])
            session.make_current(name)
            st.success(f"loaded {md_escape(name)}")
        except TraceError as exc:
            # name the file as the user uploaded it, not by its server-side copy under the work dir
            msg = str(exc)
            for p in saved:
                msg = msg.replace(f"{p.parent}/", "")
            st.error(md_escape(msg))

with src_path:
    raw = st.text_area("Paths on the server (one per line; ET + Kineto of one run pair up)", key="server_paths")
    p_name = st.text_input("Name", key="path_name", placeholder="defaults to the first file name")
    if st.button("Load path(s)", key="load_path"):
        paths = [p.strip() for p in raw.splitlines() if p.strip()]
        try:
            if not paths:
                raise TraceError("no path given")
            for given in paths:
                if not Path(given).exists():
                    raise TraceError("no such file", given)
            name = session.unique_name(p_name.strip() or Path(paths[0]).name)
            name = session.add_trace(name, paths)
            session.make_current(name)
            st.success(f"loaded {md_escape(name)}")
        except TraceError as exc:
            st.error(md_escape(exc))

st.subheader("Loaded traces")
loaded = session.traces()
if not loaded:
    st.info("Nothing loaded yet.")
else:
    st.dataframe(
        [
            {
                "name": n,
                "kind": e["kind"],
                "link rate": e.get("link_rate"),
                "hash": e["hash"][:12],
                "files": ", ".join(Path(p).name for p in e["paths"]),
            }
            for n, e in loaded.items()
        ],
        hide_index=True,
        key="loaded_table",
    )
    cur = widgets.trace_picker("Show summary of", key="summary_pick")
    if cur:
        st.session_state["current"] = cur
        summary = views.summary_of(tuple(loaded[cur]["paths"]))
        c = st.columns(5)
        kind = str(summary.get("kind", ""))  # "execution_trace+kineto" is cut off at a metric's width
        c[0].metric("kind", " + ".join(KIND_LABELS.get(k, k) for k in kind.split("+")) if kind else "", help=kind)
        c[1].metric("ET nodes", f"{summary.get('nodes', 0) or 0:,}")
        c[2].metric("Kineto events", f"{summary.get('events', 0) or 0:,}")
        rate = summary.get("link_rate")
        c[3].metric("ET↔Kineto link rate", "—" if rate is None else f"{100 * float(rate):.1f}%")
        c[4].metric("ranks", f"{len(summary.get('ranks') or []) or 1:,}", help="ranks the loaded files hold")
        top = summary.get("top_ops") or []
        if any(float(r.get("dur_us") or 0.0) > 0 for r in top):  # also loads plotly.js before Explore needs it
            st.plotly_chart(breakdown.top_ops_figure(summary), key="summary_top_ops", width="stretch")
        elif top:  # an ET alone records no times: a chart of them is empty (issue 32)
            most = ", ".join(f"{r['name']} ×{r['count']:,}" for r in top[:5])
            st.container(key="summary_no_times").caption(
                md_escape(
                    "No operator times: an execution trace records none (load its Kineto trace with it). "
                    f"Most frequent: {most}."
                )
            )
        with st.expander("Full summary (mystique info)", expanded=False):
            st.json(summary)
        rename = st.text_input("Rename to", key="rename_to")
        cols = st.columns(2)
        if cols[0].button("Rename", key="rename_btn") and rename.strip() and rename.strip() not in loaded:
            session.rename_trace(cur, rename.strip())
            st.rerun()
        if cols[1].button("Remove", key="remove_btn"):
            session.remove_trace(cur)
            st.rerun()

with st.expander(f"Workspace: {md_escape(workspace.workspace_dir())}"):
    st.caption(
        "Loaded traces, specs, replay runs and settings are kept in this folder's catalog "
        "(catalog.sqlite) and restored after a reload or a restart."
    )
    ws = st.text_input("Workspace folder", str(workspace.workspace_dir()), key="workspace_input")
    if (
        st.button("Open workspace", key="workspace_open")
        and ws.strip()
        and ws.strip() != str(workspace.workspace_dir())
    ):
        st.session_state["workspace"] = ws.strip()
        for k in ("traces", "specs", "_started", "selection", "benchmark", "current", "_sticky"):
            st.session_state.pop(k, None)
        st.rerun()
    jobs = workspace.catalog().jobs()
    if jobs:
        st.dataframe(
            [
                {
                    "job": j["id"],
                    "trace": j["trace"],
                    "target": j["target"],
                    "status": j["status"].value,
                    "median_ms": j["summary"].get("median_ms"),
                    "result": j.get("result_path"),
                }
                for j in jobs
            ],
            hide_index=True,
            key="workspace_jobs",
        )
