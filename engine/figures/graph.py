"""Operator graph figure: a layered (Sugiyama-style) layout over topological generations.

Why layered and not a spring layout: an operator DAG has a direction (producer -> consumer)
that is the story of the program; `nx.topological_generations` gives each node its depth in
that order in O(V+E), so the 14k-node ResNet ET lays out in milliseconds where a force layout
takes minutes and scrambles the order. Big graphs are collapsed into super-nodes (one per
module, or per call-tree ancestor at a chosen depth) so the browser draws hundreds of points,
not tens of thousands; the caller can expand chosen groups.

The model (`build_graph_model`) is separate from the figure (`graph_figure`) so the UI can keep
the key -> member-ids map (`GraphModel.groups`) and map chart selections back to ET node ids
(`engine.figures.selection`). `customdata` of every point is the node key: an ET node id (int)
for a single op, a string ("module:<label>" or "tree:<id>") for a super-node.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from engine import jsonio
from engine.figures.style import (
    CATEGORY_COLORS,
    DEP_EDGE,
    HIGHLIGHT,
    OUTLINE,
    PHASE_COLORS,
    SCALE,
    TRANSPARENT,
    UNKNOWN,
)

if TYPE_CHECKING:
    import networkx as nx
    import plotly.graph_objects as go

COLLAPSE_MODES = ("auto", "none", "module", "depth", "chunk")
COLOR_BY = ("category", "phase", "time")


# Default node budget of a collapsed view. Why 600: in a browser the draw, not the server, is the
# cost; on the 14k-node resnet ET 1,203 drawn nodes took ~3.5 s to appear (headless Chromium,
# benchmarks/responsiveness_browser.py) and ~650 take ~2 s. Groups expand on demand.
DEFAULT_MAX_NODES = 600


@dataclass(kw_only=True, slots=True)
class GraphView:
    """How to draw the graph: collapse mode, depth, groups to expand, colouring, node budget."""

    collapse: str = "auto"
    depth: int = 0
    expand: tuple[str, ...] = ()
    color_by: str = "category"
    max_nodes: int = DEFAULT_MAX_NODES

    def __post_init__(self) -> None:
        if self.collapse not in COLLAPSE_MODES:
            raise ValueError(f"collapse must be one of {COLLAPSE_MODES}, not {self.collapse!r}")
        if self.color_by not in COLOR_BY:
            raise ValueError(f"color_by must be one of {COLOR_BY}, not {self.color_by!r}")
        if self.depth < 0 or self.max_nodes < 1:
            raise ValueError("depth must be >= 0 and max_nodes >= 1")
        self.expand = tuple(self.expand)


@dataclass(kw_only=True, slots=True)
class GraphModel:
    """Laid-out nodes (key, x, y, label, category, phase, time_us, n_ops, hover) and edges."""

    nodes: pd.DataFrame
    edges: list[tuple[Hashable, Hashable]]
    groups: dict[Hashable, list[int]] = field(default_factory=dict)
    collapse: str = "none"
    edge_weight: dict = field(default_factory=dict)  # (key, key) -> data edges summed (hierarchy)
    crumbs: list = field(default_factory=list)  # [(label, Focus)] from the root (hierarchy)
    focus: object = None
    layer_ticks: list = field(default_factory=list)  # [(x, data-dependency layer)] (hierarchy grid)

    def ids_for(self, keys) -> list[int]:
        out: list[int] = []
        for k in keys:
            out.extend(self.groups.get(k, [int(k)] if isinstance(k, (int, np.integer)) else []))
        return sorted({int(i) for i in out})


def layered_layout(g: nx.DiGraph) -> dict[Hashable, tuple[float, float]]:
    """x = topological generation index, y = position inside the generation (centred on 0).

    Cycles (possible after collapsing nodes into groups) are condensed first: all members of a
    strongly connected component share the component's generation.
    """
    import networkx as nx

    if g.number_of_nodes() == 0:
        return {}
    if nx.is_directed_acyclic_graph(g):
        gens = list(nx.topological_generations(g))
    else:
        cond = nx.condensation(g)
        gens = [
            [m for c in gen for m in sorted(cond.nodes[c]["members"], key=str)]
            for gen in nx.topological_generations(cond)
        ]
    pos: dict[Hashable, tuple[float, float]] = {}
    for x, gen in enumerate(gens):
        gen = sorted(gen, key=lambda n: (isinstance(n, str), str(n) if isinstance(n, str) else n))
        off = (len(gen) - 1) / 2.0
        for i, node in enumerate(gen):
            pos[node] = (float(x), float(i) - off)
    return pos


def grid_layout(
    g: nx.DiGraph, max_rows: int = 16, order: dict[Hashable, float] | None = None
) -> tuple[dict[Hashable, tuple[float, float]], list[tuple[float, int]]]:
    """`layered_layout` with each generation wrapped into columns of at most `max_rows` nodes
    (issue 32: GPT-2's backward opened as 121 groups in one column, out of sight below the fold).
    Generations stay left to right; a wrapped one takes as many columns as it needs. Within a
    generation nodes follow `order` (execution order: a group's first op id), then their key.
    Returns positions and (x, generation) of each generation's first column, for axis ticks."""
    base = layered_layout(g)
    if not base:
        return {}, []
    gens: dict[int, list] = {}
    for node, (x, _) in base.items():
        gens.setdefault(int(x), []).append(node)
    rank = order or {}
    pos: dict[Hashable, tuple[float, float]] = {}
    ticks: list[tuple[float, int]] = []
    x0 = 0.0
    for gen in sorted(gens):
        members = sorted(gens[gen], key=lambda n: (rank.get(n, float("inf")), str(n)))
        cols = -(-len(members) // max_rows)
        rows = -(-len(members) // cols)  # balanced columns
        ticks.append((x0, gen))
        for i, node in enumerate(members):
            c, r = divmod(i, rows)
            n_in_col = min(rows, len(members) - c * rows)
            pos[node] = (x0 + c, (n_in_col - 1) / 2.0 - float(r))  # read top-down
        x0 += cols + (0.6 if cols > 1 else 0.0)
    return pos, ticks


def _ancestor_at_depth(ops: pd.DataFrame, depth: int) -> np.ndarray:
    """For every row: id of its call-tree ancestor (or itself) at `depth` (itself when shallower)."""
    ids = ops["id"].to_numpy(np.int64)
    parent = ops["parent"].to_numpy(np.int64)
    dep = ops["depth"].to_numpy(np.int64)
    index = pd.Index(ids)
    cur = np.arange(len(ids))
    for _ in range(int(dep.max(initial=0)) + 1):
        deeper = dep[cur] > depth
        if not deeper.any():
            break
        ppos = index.get_indexer(parent[cur[deeper]])
        ok = ppos >= 0
        moved = cur[deeper]
        moved[ok] = ppos[ok]
        if not ok.any():
            break
        cur[deeper] = moved
    return ids[cur]


def _chunk_keys(ops: pd.DataFrame, max_nodes: int) -> list[str]:
    """Contiguous runs (in execution = id order) of one (phase, module), split into chunks.

    Why: traces without per-layer module annotations (the ResNet ET has one module for the
    whole forward) still need a few hundred readable super-nodes. Since every data edge goes
    from a lower to a higher id, contiguous id ranges keep the collapsed graph acyclic.
    """
    o = ops.sort_values("id", kind="stable")
    ids = o["id"].to_numpy(np.int64)
    lab = (o["phase"].astype(str) + "|" + (o["module"].astype(str) if "module" in o.columns else "")).to_numpy()
    starts = np.flatnonzero(np.r_[True, lab[1:] != lab[:-1]])
    lengths = np.diff(np.r_[starts, len(ids)])
    lo, hi = 1, max(1, int(lengths.max(initial=1)))
    while lo < hi:  # smallest chunk size keeping the node count within budget
        mid = (lo + hi) // 2
        if int(np.ceil(lengths / mid).sum()) <= max_nodes:
            hi = mid
        else:
            lo = mid + 1
    size = lo
    run = np.repeat(np.arange(len(starts)), lengths)
    pos_in_run = np.arange(len(ids)) - starts[run]
    first = ids[starts[run] + (pos_in_run // size) * size]
    key_by_id = dict(zip(ids.tolist(), (f"chunk:{f}" for f in first.tolist())))
    return [key_by_id[i] for i in ops["id"].astype(np.int64).tolist()]


def _group_keys(ops: pd.DataFrame, mode: str, depth: int, expand: tuple[str, ...], max_nodes: int) -> list[Hashable]:
    ids = ops["id"].to_numpy(np.int64)
    if mode == "none":
        return [int(i) for i in ids]
    if mode == "chunk":
        keys = _chunk_keys(ops, max_nodes)
    else:
        anc = _ancestor_at_depth(ops, depth)
        tree = [f"tree:{a}" for a in anc.tolist()]
        if mode == "depth":
            keys = tree
        else:  # module: innermost module label, falling back to the call-tree ancestor
            mod = ops["module"].astype(object).fillna("").to_numpy() if "module" in ops.columns else [""] * len(ids)
            keys = [f"module:{m}" if m else t for m, t in zip(mod, tree)]
    exp = set(expand)
    return [int(i) if k in exp else k for k, i in zip(keys, ids.tolist())]


def _shapes_dtypes(inputs: str) -> str:
    try:
        d = jsonio.loads(inputs) if inputs else {}
    except jsonio.JSONDecodeError:
        return ""
    shapes = [s for s in d.get("shapes", []) if s not in ([], "", None)]
    types = [t for t in d.get("types", []) if isinstance(t, str) and t.startswith("Tensor")]
    return f"shapes {shapes[:4]}<br>types {types[:4]}"


def _auto_mode(sub: pd.DataFrame, view: GraphView) -> str:
    """none when small; module groups when they are within budget and none holds >10% of the
    ops; else contiguous chunks."""
    if len(sub) <= view.max_nodes:
        return "none"
    keys = pd.Series(_group_keys(sub, "module", view.depth, view.expand, view.max_nodes), dtype=object)
    counts = keys.value_counts()
    if len(counts) <= view.max_nodes and counts.iloc[0] <= max(10, 0.1 * len(sub)):
        return "module"
    return "chunk"


def build_graph_model(ops: pd.DataFrame, dag: nx.DiGraph, view: GraphView | None = None) -> GraphModel:
    """Collapse `dag` (nodes = ET ids of one rank) per `view` and lay it out in layers.

    `ops` are the rows of that rank (for names, modules, call tree, schema and linked times).
    "auto" keeps single ops up to `view.max_nodes` nodes, else groups by module when that gives
    balanced groups within budget, else by contiguous chunks of one phase/module.
    """
    import networkx as nx

    view = view or GraphView()
    ids = np.fromiter((int(n) for n in dag.nodes), dtype=np.int64, count=dag.number_of_nodes())
    sub = ops[ops["id"].isin(ids)].drop_duplicates("id").reset_index(drop=True)
    mode = _auto_mode(sub, view) if view.collapse == "auto" else view.collapse
    keys = _group_keys(sub, mode, view.depth, view.expand, view.max_nodes)
    key_of = dict(zip(sub["id"].astype(int).tolist(), keys))
    for n in dag.nodes:  # nodes without an ops row (should not happen) stay single
        key_of.setdefault(int(n), int(n))

    groups: dict[Hashable, list[int]] = {}
    for i, k in key_of.items():
        groups.setdefault(k, []).append(i)
    q = nx.DiGraph()
    q.add_nodes_from(groups)
    edges = {(key_of[int(a)], key_of[int(b)]) for a, b in dag.edges}
    edges = {e for e in edges if e[0] != e[1]}
    q.add_edges_from(edges)
    pos = layered_layout(q)

    time_col = "gpu_dur_us" if "gpu_dur_us" in sub.columns and sub["gpu_dur_us"].fillna(0).gt(0).any() else "k_dur_us"
    name_of = dict(zip(ops["id"].astype(int).tolist(), ops["name"].astype(str).tolist()))
    kser = pd.Series(keys, dtype=object)
    kstr = kser.map(str)
    t = sub[time_col].fillna(0.0) if time_col in sub.columns else pd.Series(0.0, index=sub.index)
    frame = pd.DataFrame(
        {
            "k": kstr,
            "name": sub["name"].astype(str),
            "category": sub["category"].astype(str),
            "phase": sub["phase"].astype(str),
            "t": t,
        }
    )
    g = frame.groupby("k", sort=False)
    agg = pd.DataFrame({"time_us": g["t"].sum(), "n_ops": g.size()})
    for col in ("category", "phase"):  # the group's value when all members agree, else "mixed"
        agg[col] = g[col].first().where(g[col].nunique() == 1, "mixed")
    tops = (
        frame.groupby(["k", "name"], sort=False)
        .size()
        .rename("c")
        .reset_index()
        .sort_values(["k", "c"], ascending=[True, False])
        .groupby("k", sort=False)
        .head(3)
    )
    top_txt = (tops["name"] + " ×" + tops["c"].astype(str)).groupby(tops["k"]).agg("<br>".join)
    single = sub.assign(k=kstr)[[not isinstance(k, str) for k in keys]].set_index("k")

    rows = []
    arec = agg.to_dict("index")
    for k in groups:
        ks = str(k)
        x, y = pos[k]
        a = arec[ks]
        if isinstance(k, str):
            kind, _, rest = k.partition(":")
            label = (
                f"{name_of.get(int(rest), rest)} [{rest}]"
                if kind == "tree"
                else (f"{a['phase']} ops from {rest}" if kind == "chunk" else rest)
            )
            hover = f"<b>{label}</b><br>{int(a['n_ops'])} ops; {time_col} {a['time_us']:,.1f} µs<br>" + top_txt.get(
                ks, ""
            )
        else:
            r = single.loc[ks]
            label = str(r["name"])
            hover = (
                f"<b>{label}</b> (id {k})<br>{str(r['schema'])[:160]}<br>{_shapes_dtypes(r['inputs'])}"
                f"<br>{time_col} {a['time_us']:,.1f} µs"
            )
        rows.append((k, x, y, label, a["category"], a["phase"], float(a["time_us"]), int(a["n_ops"]), hover))
    nodes = pd.DataFrame(rows, columns=["key", "x", "y", "label", "category", "phase", "time_us", "n_ops", "hover"])
    return GraphModel(nodes=nodes, edges=sorted(edges, key=str), groups=groups, collapse=mode)


def edge_segments(
    x: np.ndarray, y: np.ndarray, src: np.ndarray, dst: np.ndarray, dtype: type = np.float64
) -> tuple[np.ndarray, np.ndarray]:
    """Polyline coordinates drawing every edge src[i] -> dst[i] between node positions (x, y):
    segments separated by NaN gaps, so thousands of edges are one plotly trace, not one each."""
    ex: np.ndarray = np.full(3 * len(src), np.nan, dtype=dtype)
    ey: np.ndarray = np.full(3 * len(src), np.nan, dtype=dtype)
    ex[0::3], ex[1::3] = x[src], x[dst]
    ey[0::3], ey[1::3] = y[src], y[dst]
    return ex, ey


_DEP_LINE = dict(width=0.6, color=DEP_EDGE)


def _markers(go, part: pd.DataFrame, name: str, marker: dict, *, hover: bool = True):
    """A WebGL marker trace for the nodes in `part` (click selection reads `customdata` = key);
    `hover`: show the nodes' hover text (an overlay ring shows none, the node below has it)."""
    tips = dict(text=part["hover"], hovertemplate="%{text}<extra></extra>") if hover else dict(hoverinfo="skip")
    return go.Scattergl(
        x=part["x"], y=part["y"], mode="markers", name=name, customdata=part["key"].tolist(), marker=marker, **tips
    )


def graph_figure(
    model: GraphModel, color_by: str = "category", *, highlight: list | None = None, height: int = 560
) -> go.Figure:
    """Scattergl nodes (one trace per colour class) + one line trace for all edges."""
    import plotly.graph_objects as go

    if color_by not in COLOR_BY:
        raise ValueError(f"color_by must be one of {COLOR_BY}, not {color_by!r}")
    nodes = model.nodes
    index = {k: i for i, k in enumerate(nodes["key"])}
    nx_, ny_ = nodes["x"].to_numpy(float), nodes["y"].to_numpy(float)
    src = np.fromiter((index[a] for a, _ in model.edges), dtype=np.int64, count=len(model.edges))
    dst = np.fromiter((index[b] for _, b in model.edges), dtype=np.int64, count=len(model.edges))
    fig = go.Figure()
    # generations and half-slots: exact in float32 (half the JSON of float64)
    ex, ey = edge_segments(nx_, ny_, src, dst, np.float32)
    fig.add_trace(
        go.Scattergl(x=ex, y=ey, mode="lines", hoverinfo="skip", name="data deps", line=_DEP_LINE, showlegend=False)
    )
    size = np.clip(6 + 2 * np.log2(nodes["n_ops"].to_numpy(float)), 6, 22)
    if color_by == "time":
        log_us = np.log10(1 + nodes["time_us"].to_numpy(float))
        scale = dict(color=log_us, colorscale=SCALE, showscale=True, colorbar=dict(title="log10 µs"))
        fig.add_trace(_markers(go, nodes, "ops", dict(size=size, **scale)))
    else:
        palette = CATEGORY_COLORS if color_by == "category" else PHASE_COLORS
        for value, part in nodes.groupby(color_by, sort=True, observed=True):
            color = palette.get(str(value), UNKNOWN)
            marker = dict(size=size[part.index.to_numpy()], color=color, line=dict(width=0.5, color=OUTLINE))
            fig.add_trace(_markers(go, part, str(value), marker))
    if highlight:
        hl = nodes[nodes["key"].isin(set(highlight))]
        ring = dict(size=16, color=TRANSPARENT, line=dict(width=2.5, color=HIGHLIGHT))
        fig.add_trace(_markers(go, hl, "selected", ring, hover=False))
    fig.update_layout(
        height=height,
        margin=dict(l=10, r=10, t=30, b=10),
        xaxis=dict(title="topological generation", zeroline=False),
        yaxis=dict(visible=False),
        legend=dict(orientation="h"),
        title=f"{len(nodes)} nodes ({model.collapse}), {len(model.edges)} edges",
        clickmode="event+select",
        hovermode="closest",
    )
    return fig
