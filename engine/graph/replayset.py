"""Which ET nodes a replay runs: the operator-selection rule shared by graph, compose and replay.

An ET records every level of the dispatcher: ``aten::linear`` and, inside it, ``aten::t`` and
``aten::addmm``. Running both a parent and its children would do the work twice, so on each
path of the call tree exactly one level is replayed.

Rule (mode="top", the default): replay the *highest-level operator that can be rebuilt* on each
path, looking through annotations and autograd wrappers (``## forward ##``,
``autograd::engine::evaluate_function: ...``, ``AddmmBackward0``, ``torch::autograd::AccumulateGrad``
are never replayed; the aten ops below them are). Never an op and one of its descendants both.

mode="leaf": replay the *lowest-level* rebuildable operators instead (no rebuildable
descendant): closer to the kernels, more ops, more dispatch overhead.

An op *can be rebuilt* when all hold:
  * its name is a registered-operator name ``namespace::op`` (one ``::``, identifier on both
    sides: ``aten::addmm``, ``c10d::allreduce_``, ``fbgemm::...``). This excludes labels and
    record_function ranges that merely contain ``::`` (``torch::autograd::AccumulateGrad``,
    ``torch.distributed.ddp.reducer::copy_bucket_to_grad``, ``autograd::engine::...``);
  * its category is not "annotation" or "autograd";
  * it has a schema, or at least recorded inputs (old 1.0.1 traces may lack ``op_schema``: the
    op is then looked up by name at replay time).

`within` restricts the rule to a set of ops (a selection): an op is then replayed when it is
the highest rebuildable op *inside the set* on its path. For a selection closed under
descendants this equals the global rule restricted to the set, and selecting a child op alone
(``aten::addmm`` without its ``aten::linear``) replays that child.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from engine.graph.modes import SelectionMode
from engine.trace.categories import OP_NAME
from engine.trace.columns import where
from engine.trace.ranks import rank_ops
from engine.trace.tree import any_marked_ancestor, any_marked_descendant, parent_positions

if TYPE_CHECKING:
    from engine.trace.model import Trace


_EMPTY_VALUES = re.compile(r'"values"\s*:\s*\[\s*\]')
_NOT_REBUILDABLE_CATEGORIES = ("annotation", "autograd")


def rebuildable(ops: pd.DataFrame) -> np.ndarray:
    """Boolean per row: can this op be rebuilt and run by a replay (rules in module docstring)?"""
    n = len(ops)
    if n == 0:
        return np.zeros(0, dtype=bool)
    ok = where(ops["name"], lambda s: OP_NAME.match(s) is not None)
    if "category" in ops.columns:
        ok &= ~where(ops["category"], lambda s: s in _NOT_REBUILDABLE_CATEGORIES)
    has_schema = where(ops["schema"], bool) if "schema" in ops.columns else np.zeros(n, bool)
    need = np.flatnonzero(ok & ~has_schema)
    if len(need) and "inputs" in ops.columns:
        texts = ops["inputs"].to_numpy(dtype=object)[need]
        recorded = np.fromiter(
            (isinstance(t, str) and t.strip() not in ("", "{}") and _EMPTY_VALUES.search(t) is None for t in texts),
            dtype=bool,
            count=len(need),
        )
        ok[need[~recorded]] = False
    elif len(need):
        ok[need] = False
    return ok


def replay_mask(
    ops: pd.DataFrame, mode: SelectionMode | str = SelectionMode.TOP, within: np.ndarray | None = None
) -> np.ndarray:
    """Boolean per row of one rank's ops: is the row replayed? (see module docstring)."""
    mode = SelectionMode.parse(mode)
    cand = rebuildable(ops)
    if within is not None:
        cand &= within
    parent = parent_positions(ops)
    if mode is SelectionMode.TOP:
        return cand & ~any_marked_ancestor(parent, cand, include_self=False)
    return cand & ~any_marked_descendant(parent, cand)


def replay_ops(
    trace: Trace,
    mode: SelectionMode | str = SelectionMode.TOP,
    *,
    rank: int | None = None,
    within: Iterable[int] | None = None,
) -> list[int]:
    """Sorted ET node ids the replay runs for one rank (lowest rank when None).

    `within`: optional ids to restrict the choice to (e.g. a selection's closed op set).
    """
    ops = rank_ops(trace.ops, rank)
    if len(ops) == 0:
        return []
    ids = ops["id"].to_numpy(dtype=np.int64)
    mask = None
    if within is not None:
        mask = np.isin(ids, np.fromiter(within, dtype=np.int64))
    return np.sort(ids[replay_mask(ops, mode, mask)]).tolist()


__all__ = ["rebuildable", "replay_mask", "replay_ops"]
