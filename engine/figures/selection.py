"""Map UI selection payloads back to ET node ids (pure; unit-tested, since AppTest cannot click).

Payloads handled (dicts or Streamlit's attribute dicts):
  * `st.plotly_chart(on_select=...)`: {"selection": {"points": [{"customdata": ..,
    "curve_number": .., "point_index": ..}, ...], "point_indices": [...], "box": [...],
    "lasso": [...]}}. Our figures put the key in `customdata`: an ET id or a group key
    (graph), an event row id `ev` (timeline), a name or id (breakdown bars).
  * `st.dataframe(on_select=...)`: {"selection": {"rows": [positions], "columns": [...]}}.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping
from typing import Any

import numpy as np
import pandas as pd

FIGURE_KINDS = ("graph", "timeline", "table", "bars")


def _get(obj: Any, key: str, default: Any = None) -> Any:
    if obj is None:
        return default
    if isinstance(obj, Mapping):
        return obj.get(key, default)
    return getattr(obj, key, default)


def _scalar(v: Any) -> Any:
    if isinstance(v, (list, tuple)):
        return _scalar(v[0]) if v else None
    if isinstance(v, np.generic):
        return v.item()
    if isinstance(v, float) and v.is_integer():
        return int(v)
    return v


def selected_keys(event: Any) -> list[Hashable]:
    """The distinct `customdata` keys of the selected points, in selection order."""
    sel = _get(event, "selection", event)
    out, seen = [], set()
    for p in _get(sel, "points", []) or []:
        k = _scalar(_get(p, "customdata"))
        if k is None or k in seen:
            continue
        seen.add(k)
        out.append(k)
    return out


def events_to_op_ids(events: pd.DataFrame, ops: pd.DataFrame, ev_ids: Iterable[int]) -> list[int]:
    """ET ids of the ops behind Kineto events.

    The loader's link writes `events.op_id` (the innermost ET node of every host event and of
    GPU work through its launch); that is used when present. Without it: cpu_ops by
    record-function id (else external id), GPU work through the runtime launch with the same
    correlation and the cpu_op enclosing it by external id.
    """
    ev_ids = [int(e) for e in ev_ids]
    if not ev_ids or len(ops) == 0:
        return []
    sel = events[events["ev"].isin(ev_ids)]
    if "op_id" in events.columns:
        got = sel["op_id"].dropna().astype("int64")
        return sorted({int(i) for i in got if i >= 0})
    cpu = events[events["cat"].astype(str) == "cpu_op"]
    rf: set[int] = set()
    for _, r in sel.iterrows():
        if str(r["cat"]) == "cpu_op":
            cand = [r]
        elif pd.notna(r.get("external_id")):
            cand = [c for _, c in cpu[cpu["external_id"] == r["external_id"]].iterrows()]
        else:
            cand = []
        for c in cand:
            v = c.get("rf_id")
            if pd.isna(v):
                v = c.get("external_id")
            if pd.notna(v):
                rf.add(int(v))
    if not rf:
        return []
    hit = ops[ops["rf_id"].isin(rf)]
    return sorted(int(i) for i in hit["id"].unique())


def selection_to_node_ids(
    event: Any,
    figure_kind: str,
    *,
    groups: Mapping[Hashable, list[int]] | None = None,
    events: pd.DataFrame | None = None,
    ops: pd.DataFrame | None = None,
    table_ids: list[int] | None = None,
    name_to_ids: Mapping[str, list[int]] | None = None,
) -> list[int]:
    """Sorted ET node ids named by a selection `event` on a figure/table of `figure_kind`.

    graph: keys through `groups` (int keys are ids themselves); timeline: event ids through
    `events`/`ops`; table: selected row positions into `table_ids`; bars: bar keys (op names)
    through `name_to_ids`.
    """
    if figure_kind not in FIGURE_KINDS:
        raise ValueError(f"figure_kind must be one of {FIGURE_KINDS}, not {figure_kind!r}")
    if event is None:
        return []
    if figure_kind == "table":
        sel = _get(event, "selection", event)
        rows = _get(sel, "rows", []) or []
        ids = table_ids or []
        return sorted({int(ids[r]) for r in rows if 0 <= int(r) < len(ids)})
    keys = selected_keys(event)
    out: set[int] = set()
    if figure_kind == "graph":
        groups = groups or {}
        for k in keys:
            if k in groups:
                out.update(int(i) for i in groups[k])
            elif isinstance(k, int):
                out.add(k)
    elif figure_kind == "timeline":
        if events is None or ops is None:
            raise ValueError("timeline selections need the trace's events and ops tables")
        out.update(events_to_op_ids(events, ops, [k for k in keys if isinstance(k, int)]))
    else:  # bars
        name_to_ids = name_to_ids or {}
        for k in keys:
            out.update(int(i) for i in name_to_ids.get(str(k), []))
    return sorted(out)
