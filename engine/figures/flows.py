"""Launch arrows of the timeline: from a selected CPU event to the GPU work it launched.

Split from timeline.py (which lays out and draws bars) because it answers a different question,
which events a launch is linked to, through `correlation` ids.
"""

from __future__ import annotations

import pandas as pd

from engine.trace.vocab import GPU_CATS, RUNTIME_CATS

# A selected annotation that spans a step launches thousands of kernels: draw the first ones only.
FLOW_LIMIT = 200


def flow_arrows(
    events: pd.DataFrame, laid: pd.DataFrame, ev_id: int, limit: int = FLOW_LIMIT
) -> list[tuple[tuple[float, float], tuple[float, float]]]:
    """Arrows from CPU launches to the GPU work they launched, for one selected event.

    A runtime launch links to its kernels by `correlation`; a cpu_op links through the launches
    nested inside it (same pid/tid, inside its time range). Coordinates are in `laid` (the
    output of `prepare`); events outside the current view are skipped; at most `limit` arrows.
    """
    if "correlation" not in events.columns:
        return []
    sel = events[events["ev"] == ev_id]
    if sel.empty:
        return []
    row = sel.iloc[0]
    cat = str(row["cat"])
    if cat == "cpu_op" or "annotation" in cat or cat.startswith("python"):
        same = events[(events["pid"] == row["pid"]) & (events["tid"] == row["tid"]) & events["cat"].isin(RUNTIME_CATS)]
        t0, t1 = row["ts_us"], row["ts_us"] + row["dur_us"]
        launches = same[(same["ts_us"] >= t0) & (same["ts_us"] <= t1) & same["correlation"].notna()]
    elif cat in GPU_CATS:
        launches = events[(events["correlation"] == row["correlation"]) & events["cat"].isin(RUNTIME_CATS)]
    else:
        launches = sel[sel["correlation"].notna()]
    if launches.empty:
        return []
    gpu = events[events["cat"].isin(GPU_CATS) & events["correlation"].isin(launches["correlation"].dropna().tolist())]
    pos = laid.set_index("ev")[["start_us", "y"]]
    out = []
    gpu = gpu[gpu["ev"].isin(pos.index)].head(limit)
    for _, k in gpu.iterrows():
        src = launches[launches["correlation"] == k["correlation"]]
        if src.empty or k["ev"] not in pos.index or src.iloc[0]["ev"] not in pos.index:
            continue
        a, b = pos.loc[src.iloc[0]["ev"]], pos.loc[k["ev"]]
        out.append(((float(a["start_us"]), -float(a["y"])), (float(b["start_us"]), -float(b["y"]))))
    return out
