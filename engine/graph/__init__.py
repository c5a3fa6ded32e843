"""Operator graphs of a trace: call tree, data dependencies, phases, replay set, selections.

Public API:
    annotate_phases(ops) -> (phase, module)     # the loader calls it; vectorized, no networkx
    call_tree(trace, rank=None) -> nx.DiGraph   # parent -> child
    data_deps(trace, rank=None, ops=None) -> nx.DiGraph   # producer -> consumer, storage-aware
    replay_ops(trace, mode="top"|"leaf", rank=None, within=None) -> list[int]
    Selection, Subgraph, select(trace, selection), selection_from_dict(d)
    descendants(ops, ids), roots(ops), leaves(ops)   # vectorized tree queries on one rank's ops
"""

from engine.graph.calltree import call_tree, descendants, leaves, roots
from engine.graph.deps import data_deps
from engine.graph.phases import annotate_phases
from engine.graph.replayset import replay_ops
from engine.graph.select import Selection, Subgraph, select, selection_from_dict, selection_to_dict

__all__ = [
    "Selection",
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
