"""Selections: which part of a trace a benchmark replays, as a closed, replayable subgraph.

A `Selection` is a small JSON-friendly spec (benchmark specs embed it); `select` turns it into a
`Subgraph` that a replay can run on its own: the op set is closed under call-tree descendants,
the replayed ops follow the shared operator rule (`engine.graph.replayset`), and the tensors
the subgraph needs from outside are listed so the replay can synthesize them.

Criteria combine with AND; each criterion left as None does not filter:
  ids             exact ET node ids
  name_pattern    regex searched in op names (RE2, engine.user_regex: "addmm" matches "aten::addmm")
  module          a module/annotation label: ops inside an annotation with exactly that name
                  (``nn.Module: body``, ``## forward ##``) or whose `module` column equals it; when
                  no label equals it, it is used as a regex searched in labels and modules
  phase           "forward" | "backward" | "optimizer" | "other"
  time_window_us  (start, end) in microseconds *relative to the trace start* (the first Kineto
                  event of the rank, or the first linked op when there are no events); an op
                  matches when its linked Kineto start lies in [start, end). Needs a linked trace.
  rank            rank to select on (None: the lowest rank present)
  include_descendants  close the matched ops over their call-tree descendants (default True).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from engine.errors import TraceError, reject_unknown_fields
from engine.graph.replayset import replay_mask
from engine.trace.columns import where
from engine.trace.model import PHASES
from engine.trace.ranks import of_rank, rank_ops, resolve_rank
from engine.trace.tree import any_marked_ancestor, parent_positions
from engine.user_regex import UserRegex, compile_user

if TYPE_CHECKING:
    from engine.trace.model import Trace

_TENSOR_COLS = ["tensor_id", "storage_id", "offset", "numel", "itemsize", "dtype", "shape", "strides", "device"]


@dataclass(kw_only=True, slots=True)
class Selection:
    """What to select (see module docstring); validated on construction (TraceError)."""

    ids: list[int] | None = None
    name_pattern: str | None = None
    module: str | None = None
    phase: str | None = None
    time_window_us: tuple[float, float] | None = None
    rank: int | None = None
    include_descendants: bool = True

    def __post_init__(self):
        if self.ids is not None:
            if isinstance(self.ids, (str, bytes)) or not hasattr(self.ids, "__iter__"):
                raise TraceError(f"selection ids must be a list of integers, not {self.ids!r}")
            try:
                self.ids = [_as_int(i) for i in self.ids]
            except (TypeError, ValueError) as e:
                raise TraceError(f"selection ids must be integers: {e}") from None
        if self.name_pattern is not None:
            _compile(self.name_pattern, "name_pattern")
        if self.module is not None and not isinstance(self.module, str):
            raise TraceError(f"selection module must be a string, not {self.module!r}")
        if self.phase is not None and self.phase not in PHASES:
            raise TraceError(f"unknown phase {self.phase!r}; expected one of {', '.join(PHASES)}")
        if self.time_window_us is not None:
            try:
                start, end = (float(x) for x in self.time_window_us)
            except (TypeError, ValueError):
                raise TraceError(f"time_window_us must be (start, end) numbers, not {self.time_window_us!r}") from None
            if not (np.isfinite(start) and np.isfinite(end)) or start < 0 or end < 0:
                raise TraceError(f"time_window_us must be non-negative finite numbers, got ({start}, {end})")
            if end <= start:
                raise TraceError(f"time_window_us end must be after start, got ({start}, {end})")
            self.time_window_us = (start, end)
        if self.rank is not None:
            try:
                self.rank = _as_int(self.rank)
            except (TypeError, ValueError):
                raise TraceError(f"selection rank must be an integer, not {self.rank!r}") from None
            if self.rank < 0:
                raise TraceError(f"selection rank must be >= 0, not {self.rank}")
        if not isinstance(self.include_descendants, bool):
            raise TraceError(f"include_descendants must be true or false, not {self.include_descendants!r}")

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict; only the criteria that are set (plus include_descendants when False)."""
        out: dict[str, Any] = {}
        for f in fields(self):
            v = getattr(self, f.name)
            if f.name == "include_descendants":
                if v is False:
                    out[f.name] = False
            elif v is not None:
                out[f.name] = list(v) if isinstance(v, (tuple, list)) else v
        return out


def _as_int(v) -> int:
    if isinstance(v, bool) or (isinstance(v, float) and not v.is_integer()):
        raise ValueError(f"{v!r} is not an integer")
    return int(v)


def _compile(pattern: str, what: str) -> UserRegex:
    return compile_user(pattern, what)


def selection_from_dict(d: dict[str, Any]) -> Selection:
    """Build a Selection from a JSON object; unknown keys and bad values raise TraceError."""
    if not isinstance(d, dict):
        raise TraceError(f"a selection must be a JSON object, not {type(d).__name__}")
    reject_unknown_fields(d, {f.name for f in fields(Selection)}, "selection")
    kw = dict(d)
    if kw.get("time_window_us") is not None and isinstance(kw["time_window_us"], list):
        if len(kw["time_window_us"]) != 2:
            raise TraceError(f"time_window_us must be [start, end], got {kw['time_window_us']!r}")
        kw["time_window_us"] = tuple(kw["time_window_us"])
    return Selection(**kw)


def selection_to_dict(sel: Selection) -> dict[str, Any]:
    return sel.to_dict()


@dataclass(kw_only=True, slots=True)
class Subgraph:
    """A closed, replayable part of one rank's trace.

    op_ids          sorted ET node ids: the matched ops and (by default) all their descendants
    replay_ids      sorted ids the replay runs: the replay rule applied inside `op_ids`
    external_inputs tensors (columns tensor_id, storage_id, offset, numel, itemsize, dtype, shape,
                    strides, device, consumer, arg, sub) read by replay ops but not produced by
                    an earlier replay op of the subgraph: the replay must synthesize them.
                    One row per tensor (tensor_id, storage_id), at its first consumer.
                    `aliases_internal` is True when an earlier replay op of the subgraph output
                    that storage (the tensor is a view, made outside the selection, of memory
                    the subgraph produces): rebuild it as a view of that memory.
                    Undefined tensors (storage_id 0, e.g. bias=None) are not listed.
    outputs         tensors produced by replay ops and read by an op outside `op_ids` later
                    (same columns, `producer` instead of `consumer`).
    rank            the rank selected
    """

    op_ids: list[int]
    replay_ids: list[int]
    external_inputs: pd.DataFrame
    outputs: pd.DataFrame
    rank: int
    selection: Selection | None = field(default=None)


def _match_module(ops: pd.DataFrame, module: str) -> np.ndarray:
    names = ops["name"].astype(object).to_numpy()
    mods = ops["module"].astype(object).fillna("").to_numpy() if "module" in ops.columns else np.full(len(ops), "")
    hit = (names == module) | (mods == module)
    if hit.any():
        return hit
    rx = _compile(module, "module")
    label_like = np.zeros(len(ops), dtype=bool)
    if "category" in ops.columns:
        label_like = (ops["category"].astype(object) == "annotation").to_numpy()
    name_hit = np.fromiter(
        (bool(label_like[i]) and rx.search(str(n)) for i, n in enumerate(names)),
        dtype=bool,
        count=len(names),
    )
    uniq_mods = pd.unique(mods)
    good = {m for m in uniq_mods if m and rx.search(str(m))}
    return name_hit | np.isin(mods, list(good))


def _time_zero(trace: Trace, ops: pd.DataFrame, rank: int) -> float:
    ev = trace.events
    if len(ev) and "ts_us" in ev.columns:
        ev = of_rank(ev, rank)
        if len(ev):
            return float(np.nanmin(ev["ts_us"].to_numpy(dtype=float)))
    return float(np.nanmin(ops["k_ts_us"].to_numpy(dtype=float)))


def _match(trace: Trace, ops: pd.DataFrame, sel: Selection, rank: int) -> np.ndarray:
    n = len(ops)
    ids = ops["id"].to_numpy(dtype=np.int64)
    hit = np.ones(n, dtype=bool)
    if sel.ids is not None:
        want = np.asarray(sel.ids, dtype=np.int64)
        unknown = want[~np.isin(want, ids)]
        if len(unknown):
            shown = ", ".join(str(int(u)) for u in unknown[:5])
            more = f" (and {len(unknown) - 5} more)" if len(unknown) > 5 else ""
            raise TraceError(f"unknown ET node ids on rank {rank}: {shown}{more}")
        hit &= np.isin(ids, want)
    if sel.name_pattern is not None:
        rx = _compile(sel.name_pattern, "name_pattern")
        hit &= where(ops["name"], lambda s: s != "" and rx.search(s))
    if sel.module is not None:
        hit &= _match_module(ops, sel.module)
    if sel.phase is not None:
        if "phase" not in ops.columns:
            raise TraceError("this trace has no phase column; load it with engine.trace.load")
        hit &= (ops["phase"].astype(object) == sel.phase).to_numpy()
    if sel.time_window_us is not None:
        ts = ops["k_ts_us"].to_numpy(dtype=float) if "k_ts_us" in ops.columns else np.full(n, np.nan)
        if not np.isfinite(ts).any():
            raise TraceError("time_window_us needs a trace whose ET ops are linked to a Kineto trace")
        t0 = _time_zero(trace, ops, rank)
        start, end = sel.time_window_us
        rel = ts - t0
        in_window = np.isfinite(rel) & (rel >= start) & (rel < end)
        if not (hit & in_window).any():
            lo, hi = np.nanmin(rel), np.nanmax(rel)
            raise TraceError(
                f"selection matched no operators (linked ops start between {lo:.0f} and "
                f"{hi:.0f} us after the trace start; the window was [{start:g}, {end:g}))"
            )
        hit &= in_window
    return hit


def _tensor_table(trace: Trace, rank: int) -> pd.DataFrame:
    return of_rank(trace.tensors, rank)


def _empty_tensors(role: str) -> pd.DataFrame:
    extra = ["aliases_internal"] if role == "consumer" else []
    return pd.DataFrame({c: pd.Series(dtype=object) for c in _TENSOR_COLS + [role, "arg", "sub"] + extra})


def _boundary(trace: Trace, rank: int, op_ids: np.ndarray, replay_ids: np.ndarray) -> tuple[pd.DataFrame, pd.DataFrame]:
    t = _tensor_table(trace, rank)
    if len(t) == 0:
        return _empty_tensors("consumer"), _empty_tensors("producer")
    cols = [c for c in _TENSOR_COLS if c in t.columns]
    op = t["op_id"].to_numpy(dtype=np.int64)
    # A tensor is (tensor_id, storage_id): ETs reuse tensor ids after a tensor dies.
    sid = t["storage_id"].to_numpy(dtype=np.int64)
    s_uniq = np.unique(sid)
    tid = t["tensor_id"].to_numpy(dtype=np.int64) * np.int64(len(s_uniq) + 1) + np.searchsorted(s_uniq, sid)
    io = t["io"].astype(object).to_numpy()
    in_replay = np.isin(op, replay_ids) & (sid > 0)  # storage_id 0: undefined tensor (bias=None)
    prod = in_replay & (io == "out")
    cons = in_replay & (io == "in")
    # earliest production of each tensor by a replay op
    first_prod = pd.Series(op[prod]).groupby(tid[prod]).min()
    pr = first_prod.reindex(tid[cons]).to_numpy(dtype=float)
    external = np.flatnonzero(cons)[~(np.isfinite(pr) & (pr < op[cons]))]
    # a tensor whose storage an earlier replay op of the subgraph wrote is an alias (a view made
    # outside the selection) of memory the subgraph produces: build it as a view, not new memory
    fresh_storage = pd.Series(op[prod]).groupby(sid[prod]).min()
    sp = fresh_storage.reindex(sid[external]).to_numpy(dtype=float)
    ext = t.iloc[external][cols].assign(
        consumer=op[external],
        arg=t["arg"].to_numpy()[external],
        sub=t["sub"].to_numpy()[external],
        aliases_internal=np.isfinite(sp) & (sp < op[external]),
    )
    ext = ext.sort_values(["consumer", "arg", "sub"], kind="stable").drop_duplicates(["tensor_id", "storage_id"])
    # outputs: produced inside, read later by an op outside the selection
    outside_in = (~np.isin(op, op_ids)) & (io == "in")
    last_outside_read = pd.Series(op[outside_in]).groupby(tid[outside_in]).max()
    prod_rows = np.flatnonzero(prod)
    last_read = last_outside_read.reindex(tid[prod_rows]).to_numpy(dtype=float)
    out_rows = prod_rows[np.isfinite(last_read) & (last_read > op[prod_rows])]
    out = t.iloc[out_rows][cols].assign(
        producer=op[out_rows], arg=t["arg"].to_numpy()[out_rows], sub=t["sub"].to_numpy()[out_rows]
    )
    out = out.sort_values(["producer", "arg", "sub"], kind="stable").drop_duplicates(
        ["tensor_id", "storage_id"], keep="last"
    )
    return ext.reset_index(drop=True), out.reset_index(drop=True)


def select(trace: Trace, selection: Selection) -> Subgraph:
    """Resolve a Selection on a trace into a closed Subgraph (see module docstring)."""
    if not isinstance(selection, Selection):
        raise TraceError(f"select() needs a Selection, not {type(selection).__name__}")
    if not trace.has_et:
        raise TraceError("selections need an execution trace (ET); this trace has only Kineto events")
    rank = resolve_rank(trace.ops, selection.rank)
    ops = rank_ops(trace.ops, rank)
    hit = _match(trace, ops, selection, rank)
    if not hit.any():
        raise TraceError("selection matched no operators")
    parent = parent_positions(ops)
    closed = any_marked_ancestor(parent, hit) if selection.include_descendants else hit
    if selection.phase is not None:
        # A phase is a property of each op, not of a subtree: a "## forward ##"-style root that
        # matched must not drag in the backward/optimizer ops nested under the same step label.
        closed &= (ops["phase"].astype(object) == selection.phase).to_numpy()
    ids = ops["id"].to_numpy(dtype=np.int64)
    replay = replay_mask(ops, "top", within=closed)
    op_ids = np.sort(ids[closed])
    replay_ids = np.sort(ids[replay])
    ext, out = _boundary(trace, rank, op_ids, replay_ids)
    return Subgraph(
        op_ids=op_ids.tolist(),
        replay_ids=replay_ids.tolist(),
        external_inputs=ext,
        outputs=out,
        rank=rank,
        selection=selection,
    )


__all__ = ["Selection", "Subgraph", "select", "selection_from_dict", "selection_to_dict"]
