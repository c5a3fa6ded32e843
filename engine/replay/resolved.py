"""What resolving one recorded operator yields (`Resolved`) and why it can fail (`DispatchError`).

These two types are shared by the resolver (dispatch), the accelerator remaps (accel), the
collective backends (collectives, comm_backend), custom-op replays (custom) and the planner; they
live here, below all of them, so none of those modules has to import another to name them (they
lived in dispatch.py, which closed an import circle through accel and collectives).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from engine.replay.reasons import SkipReason


class DispatchError(Exception):
    """The op cannot be rebuilt: `reason` (a SkipReason) goes into coverage, the message is the detail."""

    def __init__(self, message: str, reason: SkipReason = SkipReason.NO_MATCHING_OVERLOAD):
        super().__init__(message)
        self.reason = reason


@dataclass(slots=True)
class Resolved:
    """One recorded op bound to the overload that runs it and where each argument comes from."""

    overload: Any  # torch._ops.OpOverload
    positional: list[tuple[str, Any]]  # ("rec", i) | ("const", v)
    keywords: dict[str, tuple[str, Any]]
    arg_types: dict[int, str]  # recorded index -> target schema type (for enum conversion)
    substituted: str = ""  # "" or "aten::cudnn_x -> aten::y"
    out_map: list[int] | None = None  # result position per recorded output (None: identity)
    extra: dict = field(default_factory=dict)
