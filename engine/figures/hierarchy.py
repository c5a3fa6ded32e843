"""The operator graph as a hierarchy you drill into: labelled groups, aggregated edges.

Why: 14k-node ETs drawn flat are a tangle (issue 13 problem 4). Each view shows the children of
one *focus* in the call tree (a module annotation, a ProfilerStep, an autograd node...), each
child standing for its whole subtree; when a focus has more children than the node budget,
consecutive children are grouped into ranges (ids are execution order, so a range is a
contiguous stretch of the program). Data-dependency edges of the executable ops are summed
between the groups holding their ends. Ops outside the focus are one "outside" node, so the
inputs a group reads from elsewhere stay visible. A focus with a single child descends into it
by itself. Keys: `tree:<id>` (a call-tree node), `range:<parent>:<lo>:<hi>`, an int (one op),
`outside`. Everything is vectorised over the ops table: a view of the 14k-node ResNet ET is
built in well under a second.
"""

from __future__ import annotations

import math
from collections.abc import Hashable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from engine.figures.graph import GraphModel, edge_segments, grid_layout
from engine.figures.style import (
    ALERT,
    BLUE,
    CATEGORY_COLORS,
    GOLD,
    HIER_EDGE,
    OUTLINE,
    PHASE_COLORS,
    TEAL,
    TRANSPARENT,
    UNKNOWN,
)

if TYPE_CHECKING:
    import networkx as nx
    import plotly.graph_objects as go

# One node budget for every operator graph (Explore and Compose): what a browser draws with
# labels in about a second.
NODE_BUDGET = 400
# Nodes per column of one data-dependency layer before it wraps into the next column.
GRID_ROWS = 16
# Plot width the node labels are cut to (one label per grid column, ~6 px a character).
LABEL_PX = 1100.0


def _group_name(members: pd.DataFrame, fallback: str) -> str:
    """A range's name: the module its ops share (innermost common), else its first op's name."""
    if "module" in members.columns:
        mods = members["module"].astype(str)
        mods = mods[(mods != "") & (mods != "None") & (mods != "nan")]
        if len(mods) and mods.nunique() == 1:
            return str(mods.iloc[0]).removeprefix("nn.Module: ")
    return fallback


@dataclass(frozen=True, slots=True)
class Focus:
    """Children of `parent` (None: the call-tree roots) with ids in [lo, hi]."""

    parent: int | None = None
    lo: int | None = None
    hi: int | None = None

    @classmethod
    def from_key(cls, key: Hashable) -> Focus | None:
        """The focus a group key opens (None for single ops and `outside`)."""
        if isinstance(key, str) and key.startswith("tree:"):
            return cls(parent=int(key[5:]))
        if isinstance(key, str) and key.startswith("range:"):
            p, lo, hi = key[6:].split(":")
            return cls(parent=None if p == "root" else int(p), lo=int(lo), hi=int(hi))
        return None


# Wrappers whose meaning is in their tail: "autograd::engine::evaluate_function: AddmmBackward0"
# cut to 28 characters made 121 backward groups all read "autograd::engine::evaluate_f".
_PREFIXES = ("autograd::engine::evaluate_function: ", "torch::autograd::", "nn.Module: ")


def _clean(name: str, tid: object = None) -> str:
    n = name.strip()
    if n.startswith("## ") and n.endswith(" ##"):
        n = n[3:-3]
    for pre in _PREFIXES[:2]:
        if n.startswith(pre):
            n = n[len(pre) :]
    if n.startswith("[pytorch|profiler|execution_trace|"):
        kind = n.rsplit("|", 1)[-1].rstrip("]")
        n = f"{kind} {tid}" if kind == "thread" and tid is not None else kind
    return n


def _tree_depth(ids: np.ndarray, parent: np.ndarray) -> np.ndarray:
    """Number of call-tree ancestors of each row (the ops table's `depth` skips the profiler's
    wrapper nodes, which are ancestors here)."""
    ppos = pd.Index(ids).get_indexer(parent)
    ppos[ppos == np.arange(len(ids))] = -1
    d = np.zeros(len(ids), np.int64)
    cur = ppos.copy()
    for _ in range(256):
        live = cur >= 0
        if not live.any():
            break
        d[live] += 1
        cur[live] = ppos[cur[live]]
    return d


def _ancestor_at(ids: np.ndarray, parent: np.ndarray, depth: np.ndarray, target: int) -> np.ndarray:
    """Row position of each row's ancestor (or itself) at call-tree depth `target` (-1: none)."""
    ppos = pd.Index(ids).get_indexer(parent)  # row of each row's parent (-1: none)
    ppos[ppos == np.arange(len(ids))] = -1
    cur = np.arange(len(ids))
    for _ in range(int(depth.max(initial=0)) + 1):
        live = cur >= 0
        deeper = live & (depth[np.maximum(cur, 0)] > target)
        if not deeper.any():
            break
        cur[deeper] = ppos[cur[deeper]]
    ok = cur >= 0
    cur[ok & (depth[np.maximum(cur, 0)] != target)] = -1
    return cur


def build_hierarchy_model(
    ops: pd.DataFrame, dag: nx.DiGraph, focus: Focus | None = None, max_nodes: int = NODE_BUDGET
) -> GraphModel:
    """The collapsed, laid-out graph of `dag` (ET ids of one rank) at `focus` (see module doc)."""
    import networkx as nx

    focus = focus or Focus()
    ops = ops.drop_duplicates("id")
    ids = ops["id"].to_numpy(np.int64)
    parent = ops["parent"].to_numpy(np.int64)
    depth = _tree_depth(ids, parent)
    names = ops["name"].astype(str).to_numpy()
    tids = ops["tid"].to_numpy() if "tid" in ops.columns else np.full(len(ops), None)
    pos_of = pd.Index(ids)
    crumbs: list[tuple[str, Focus]] = [("all", Focus())]
    while True:
        if focus.parent is None:
            child_mask = ~np.isin(parent, ids) | (parent == ids)
            level = 0
        else:
            p = pos_of.get_indexer([focus.parent])[0]
            if p < 0:
                focus, child_mask, level = Focus(), ~np.isin(parent, ids) | (parent == ids), 0
            else:
                child_mask = (parent == focus.parent) & (ids != focus.parent)
                level = int(depth[p]) + 1
        if focus.lo is not None:
            child_mask &= (ids >= focus.lo) & (ids <= int(focus.hi if focus.hi is not None else focus.lo))
        children = np.sort(ids[child_mask])
        dag_ids = np.fromiter((int(n) for n in dag.nodes), dtype=np.int64, count=dag.number_of_nodes())
        rows = pos_of.get_indexer(dag_ids)
        anc_rows = _ancestor_at(ids, parent, depth, level)
        anc = np.where(rows >= 0, ids[np.where(rows >= 0, anc_rows[np.maximum(rows, 0)], 0)], -1)
        anc = np.where((rows >= 0) & (anc_rows[np.maximum(rows, 0)] >= 0), anc, -1)
        inside = np.isin(anc, children)
        used = np.unique(anc[inside])
        if len(used) == 1 and not (dag_ids[inside] == used[0]).all():
            # a single container child: descend by itself (ProfilerStep -> its ops)
            focus = Focus(parent=int(used[0]))
            continue
        break
    if focus.parent is not None:
        chain: list = []
        row = pos_of.get_loc(focus.parent)
        ppos = pos_of.get_indexer(parent)
        while row >= 0 and len(chain) < 64:
            chain.append(int(ids[row]))
            nxt = int(ppos[row])
            row = -1 if nxt == row else nxt
        for a in reversed(chain):
            crumbs.append((_clean(str(names[pos_of.get_loc(a)]), tids[pos_of.get_loc(a)])[:40], Focus(parent=a)))
    if focus.lo is not None:
        crumbs.append((f"ids {focus.lo}…{focus.hi}", focus))

    # group key per DAG node
    is_exec = dict.fromkeys(dag_ids.tolist(), True)
    child_key: dict[int, Hashable] = {}
    used_sorted = np.sort(used)
    ptag = "root" if focus.parent is None else str(focus.parent)
    if len(used_sorted) > max_nodes - 1:
        size = int(np.ceil(len(used_sorted) / (max_nodes - 1)))
        for start in range(0, len(used_sorted), size):
            chunk = used_sorted[start : start + size]
            k = f"range:{ptag}:{int(chunk[0])}:{int(chunk[-1])}"
            for c in chunk.tolist():
                child_key[c] = k
    else:
        for c in used_sorted.tolist():
            child_key[c] = c if c in is_exec else f"tree:{c}"
    keys = [child_key[int(a)] if ok else "outside" for a, ok in zip(anc.tolist(), inside.tolist())]
    key_of = dict(zip(dag_ids.tolist(), keys))
    groups: dict[Hashable, list[int]] = {}
    for i, k in key_of.items():
        groups.setdefault(k, []).append(i)

    weight: dict[tuple[Hashable, Hashable], int] = {}
    for a, b in dag.edges:
        ka, kb = key_of[int(a)], key_of[int(b)]
        if ka != kb:
            weight[(ka, kb)] = weight.get((ka, kb), 0) + 1
    q = nx.DiGraph()
    q.add_nodes_from(groups)
    q.add_edges_from(weight)
    first = {k: float(min(m)) for k, m in groups.items()}
    first["outside"] = -1.0
    pos, layer_ticks = grid_layout(q, GRID_ROWS, first)

    time_col = "gpu_dur_us" if "gpu_dur_us" in ops.columns and ops["gpu_dur_us"].fillna(0).gt(0).any() else "k_dur_us"
    sub = ops.set_index("id")
    tvals = sub[time_col].fillna(0.0) if time_col in sub.columns else pd.Series(0.0, index=sub.index)
    out_rows = []
    for gk, members in groups.items():
        m = sub.loc[members]
        cats, phases = m["category"].astype(str).unique(), m["phase"].astype(str).unique()
        top = m["name"].astype(str).value_counts().head(3)
        top_txt = "<br>".join(f"{n} ×{c}" for n, c in top.items())
        t_us = float(tvals.loc[members].sum())
        if gk == "outside":
            label, kind = f"outside ({len(members)} ops)", "outside"
        elif isinstance(gk, str) and gk.startswith("range:"):
            _, _, _lo, _hi = gk.split(":")
            label, kind = f"{_group_name(m, _clean(str(top.index[0])))[:40]}… ({len(members)})", "range"
        elif isinstance(gk, str):
            row = pos_of.get_loc(int(gk[5:]))
            label, kind = f"{_clean(str(names[row]), tids[row])[:40]} ({len(members)})", "tree"
        else:
            op_id = int(gk)  # type: ignore[call-overload]  # the remaining keys are op ids (ints)
            label, kind = _clean(str(names[pos_of.get_loc(op_id)]))[:40], "op"
        hover = f"<b>{label}</b><br>{len(members)} ops · {time_col} {t_us:,.1f} µs<br>{top_txt}"
        if kind in ("tree", "range"):
            hover += "<br><i>select it, then Open group to drill in</i>"
        x, y = pos[gk]
        out_rows.append(
            (
                gk,
                x,
                y,
                label,
                cats[0] if len(cats) == 1 else "mixed",
                phases[0] if len(phases) == 1 else "mixed",
                t_us,
                len(members),
                hover,
                kind,
            )
        )
    nodes = pd.DataFrame(
        out_rows, columns=["key", "x", "y", "label", "category", "phase", "time_us", "n_ops", "hover", "kind"]
    )
    model = GraphModel(nodes=nodes, edges=sorted(weight, key=str), groups=groups, collapse="hierarchy")
    model.edge_weight = weight
    model.layer_ticks = layer_ticks
    model.crumbs = crumbs
    model.focus = focus
    return model


def neighbours(model: GraphModel, keys) -> tuple[set, set]:
    """(producers, consumers) of the groups `keys` in the collapsed graph."""
    ks = set(keys)
    prod = {a for a, b in model.edges if b in ks and a not in ks}
    cons = {b for a, b in model.edges if a in ks and b not in ks}
    return prod, cons


def search_keys(model: GraphModel, ops: pd.DataFrame, pattern: str) -> set:
    """Groups holding an op whose name matches `pattern` (regex, case-insensitive)."""
    if not pattern:
        return set()
    names = ops.drop_duplicates("id").set_index("id")["name"].astype(str)
    from engine.user_regex import search_mask

    hit_ids = set(names.index[search_mask(names, pattern)].tolist())
    return {k for k, m in model.groups.items() if hit_ids.intersection(m)}


def hierarchy_figure(
    model: GraphModel,
    color_by: str = "category",
    *,
    selected: tuple = (),
    found: tuple = (),
    height: int = 560,
) -> go.Figure:
    """Labelled nodes (SVG, readable text), edges in three widths by aggregated count, the
    selection ringed gold, its producers blue and consumers green, search hits red."""
    import plotly.graph_objects as go

    nodes = model.nodes
    index = {k: i for i, k in enumerate(nodes["key"])}
    x, y = nodes["x"].to_numpy(float), nodes["y"].to_numpy(float)
    weight = getattr(model, "edge_weight", {}) or dict.fromkeys(model.edges, 1)
    fig = go.Figure()
    w = np.array([weight[e] for e in model.edges], dtype=float) if model.edges else np.zeros(0)
    bounds = np.quantile(w, [0.6, 0.9]) if len(w) else [1, 1]
    for lo, hi, width, alpha in (
        (0, bounds[0], 0.7, 0.35),
        (bounds[0], bounds[1], 1.6, 0.5),
        (bounds[1], np.inf, 3.0, 0.65),
    ):
        pick = [e for e, v in zip(model.edges, w) if (v > lo or lo == 0) and v <= hi]
        if not pick:
            continue
        src = np.array([index[a] for a, _ in pick])
        dst = np.array([index[b] for _, b in pick])
        ex, ey = edge_segments(x, y, src, dst)
        fig.add_trace(
            go.Scatter(
                x=ex,
                y=ey,
                mode="lines",
                hoverinfo="skip",
                showlegend=False,
                line=dict(width=width, color=HIER_EDGE.format(alpha)),
            )
        )
    size = np.clip(8 + 3 * np.log2(nodes["n_ops"].to_numpy(float)), 8, 30)
    palette = CATEGORY_COLORS if color_by != "phase" else PHASE_COLORS
    col = "phase" if color_by == "phase" else "category"
    # every group is named (issue 32: 340 unlabelled groups); a name is cut to its grid column
    show_text = len(nodes) <= NODE_BUDGET
    cols = max(1.0, float(x.max() - x.min()) + 1.0) if len(nodes) else 1.0
    fit = max(6, int(LABEL_PX / cols / 6.2))
    short = [lab if len(lab) <= fit else lab[: fit - 1] + "…" for lab in nodes["label"].astype(str)]
    nodes = nodes.assign(short=short)
    for value, part in nodes.groupby(col, sort=True, observed=True):
        idx = part.index.to_numpy()
        fig.add_trace(
            go.Scatter(
                x=part["x"],
                y=part["y"],
                mode="markers+text" if show_text else "markers",
                name=str(value),
                text=part["short"] if show_text else None,
                textposition="top center",
                textfont=dict(size=10),
                customdata=part["key"].tolist(),
                hovertext=part["hover"],
                hovertemplate="%{hovertext}<extra></extra>",
                marker=dict(
                    size=size[idx],
                    color=palette.get(str(value), UNKNOWN),
                    symbol=["square" if k in ("tree", "range", "outside") else "circle" for k in part["kind"]],
                    line=dict(width=0.8, color=OUTLINE),
                ),
            )
        )
    prod, cons = neighbours(model, selected)
    for keys, color, name in (
        (set(found), ALERT, "search hits"),
        (prod, BLUE, "producers"),
        (cons, TEAL, "consumers"),
        (set(selected), GOLD, "selected"),
    ):
        hl = nodes[nodes["key"].isin(keys)]
        if len(hl) == 0:
            continue
        fig.add_trace(
            go.Scatter(
                x=hl["x"],
                y=hl["y"],
                mode="markers",
                name=name,
                customdata=hl["key"].tolist(),
                hoverinfo="skip",
                marker=dict(size=size[hl.index.to_numpy()] + 10, color=TRANSPARENT, line=dict(width=3, color=color)),
            )
        )
    fig.update_layout(
        height=height,
        margin=dict(l=10, r=10, t=40, b=10),
        # layers are integers: ticks on whole numbers only (auto ticks put 0.4, 0.6 on 2 layers)
        xaxis=_layer_axis(model, nodes),
        yaxis=dict(visible=False),
        legend=dict(orientation="h", yanchor="top", y=-0.02, xanchor="left", x=0.0),
        title=dict(text=f"{len(nodes)} groups, {len(model.edges)} aggregated edges", x=0.0),
        clickmode="event+select",
        hovermode="closest",
        dragmode="pan",
    )
    return fig


def _layer_axis(model: GraphModel, nodes: pd.DataFrame) -> dict:
    """Ticks at each data-dependency layer's first column (a wrapped layer spans several)."""
    ticks = getattr(model, "layer_ticks", None)
    if not ticks:
        return dict(title="data-dependency layer", zeroline=False, showgrid=False, tick0=0, dtick=_layer_dtick(nodes))
    step = max(1, math.ceil(len(ticks) / 12))
    shown = ticks[::step]
    return dict(
        title="data-dependency layer (a tall layer wraps into columns)",
        zeroline=False,
        showgrid=False,
        tickvals=[x for x, _ in shown],
        ticktext=[str(g) for _, g in shown],
    )


def _layer_dtick(nodes) -> int:
    """A whole-number tick step giving at most ~10 ticks across the layers shown."""
    span = float(nodes["x"].max() - nodes["x"].min()) if len(nodes) else 0.0
    return max(1, math.ceil(span / 10))
