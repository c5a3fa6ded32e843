"""What the transforms know about a composed benchmark beyond its exported ET nodes.

Why a typed object instead of private keys: compose used to pass this state through the node
dicts (`_phase`, `_orig`, `_replay`) and the meta dict (`_params`, `_backward_ids`,
`_dtype_baseline_failures`), read back by name in scale.py, dp.py and tp.py and stripped on
export. A field here has one writer (compose), a type, and never reaches an exported file.

A node is found by its provenance (`mystique_origin`: source index + node id in that source),
not by its composed id, so the facts survive renumbering (dp, tp) and the per-rank copies the
sharding makes; nodes compose adds itself (labels, all_reduces, TBE tables) have no phase.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# Provenance of every exported node (a documented ET node key; ET readers ignore unknown keys):
#   "mystique_origin": {"id": <node id in the source ET>, "segment": <segment index>,
#                       "repeat": <0-based repeat index>, "source": <index into spec.sources>}
# Composed ETs renumber nodes, so a replay's op ids name the *composed* node; compare maps them
# back to the original through this field (engine.compare.provenance) instead of trusting ids.
ORIGIN_KEY = "mystique_origin"


def origin_of(node: dict) -> tuple[int, int] | None:
    """(source index, node id in that source) of a composed node, None for nodes compose made."""
    o = node.get(ORIGIN_KEY)
    return (int(o["source"]), int(o["id"])) if isinstance(o, dict) else None


@dataclass(kw_only=True, slots=True)
class ComposeContext:
    """Facts about the sources the transforms read (filled by compose, never exported).

    phases: (source, source node id) -> the op's phase in its trace ("forward", "backward",
        "optimizer", ...): batch inference looks for the forward's inputs, tp for forward
        linears and their backward/optimizer ops, dp for the last backward op.
    params: (numel, itemsize, ET dtype) of the model's parameters in first-use order (dp buckets).
    dtype_baseline_failures: ops that already fail on meta tensors with the recorded dtypes
        (a dtype change is not blamed for them).
    """

    phases: dict[tuple[int, int], str] = field(default_factory=dict)
    params: list[tuple[int, int, str]] = field(default_factory=list)
    dtype_baseline_failures: dict[str, str] = field(default_factory=dict)

    def phase_of(self, node: dict) -> str:
        """The phase of the source op a composed node copies ("" for nodes compose made)."""
        key = origin_of(node)
        return self.phases.get(key, "") if key is not None else ""


__all__ = ["ORIGIN_KEY", "ComposeContext", "origin_of"]
