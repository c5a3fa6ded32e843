"""Operator graphs of a trace: call tree, data dependencies, phases, replay set, selections.

Public API:
    annotate_phases(ops) -> (phase, module)     # lives in engine.trace.phases (the loader calls it)
    call_tree(trace, rank=None) -> nx.DiGraph   # parent -> child
    data_deps(trace, rank=None, ops=None) -> nx.DiGraph   # producer -> consumer, storage-aware
    replay_ops(trace, mode=SelectionMode.TOP|LEAF, rank=None, within=None) -> list[int]
    DepKind (edge kinds of data_deps), SelectionMode (the replay rule)
    Selection, Subgraph, select(trace, selection), selection_from_dict(d)
    descendants(ops, ids), roots(ops), leaves(ops)   # vectorized tree queries on one rank's ops
"""

from engine.graph.calltree import call_tree, descendants, leaves, roots
from engine.graph.deps import DepKind, data_deps
from engine.graph.replayset import SelectionMode, replay_ops
from engine.graph.select import Selection, Subgraph, select, selection_from_dict, selection_to_dict
from engine.trace.phases import annotate_phases  # it lives with the loader that calls it

__all__ = [
    "DepKind",
    "Selection",
    "SelectionMode",
    "Subgraph",
    "annotate_phases",
    "call_tree",
    "data_deps",
    "descendants",
    "leaves",
    "replay_ops",
    "roots",
    "select",
    "selection_from_dict",
    "selection_to_dict",
]
