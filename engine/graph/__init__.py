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

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from engine.graph.calltree import call_tree, descendants, leaves, roots
    from engine.graph.deps import DepKind, data_deps
    from engine.graph.modes import SelectionMode
    from engine.graph.replayset import replay_ops
    from engine.graph.selection import Selection, Subgraph, select, selection_from_dict, selection_to_dict
    from engine.trace.phases import annotate_phases  # it lives with the loader that calls it

# Each name's module, imported on first use: a process that only builds the CLI's parser (which
# reads SelectionMode) or refuses its input should not pay for pandas and networkx.
_HOME = {
    **dict.fromkeys(("call_tree", "descendants", "leaves", "roots"), "engine.graph.calltree"),
    **dict.fromkeys(("DepKind", "data_deps"), "engine.graph.deps"),
    "SelectionMode": "engine.graph.modes",
    "replay_ops": "engine.graph.replayset",
    **dict.fromkeys(
        ("Selection", "Subgraph", "select", "selection_from_dict", "selection_to_dict"), "engine.graph.selection"
    ),
    "annotate_phases": "engine.trace.phases",
}


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(home), name)


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
