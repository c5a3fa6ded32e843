"""Seam for collectives (c10d::*, nccl:*, record_param_comms) in a replay.

A single-process replay cannot run an all-reduce with its real peers, so by default collectives
are skipped with the reason "collective (single-process replay)" and counted in coverage. A
distributed replay (one process per rank, e.g. under torchrun) will plug in a backend that
rebuilds each collective on a real process group; the plan asks the backend, never hard-codes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

COLLECTIVE_PREFIXES = ("c10d::", "nccl:", "gloo:", "record_param_comms", "c10d_functional::", "_c10d_functional::")
SKIP_REASON = "collective (single-process replay)"


def is_collective(name: str) -> bool:
    return name.startswith(COLLECTIVE_PREFIXES)


class CollectiveBackend(Protocol):
    """Runs recorded collectives. `prepare` returns a zero-argument callable for one recorded
    collective (its tensors already bound), or None with `reason` set when it cannot."""

    reason: str

    def prepare(self, name: str, inputs: dict, outputs: dict, tensors: list[Any]) -> Callable[[], None] | None: ...


class SkipCollectives:
    """Default backend: every collective is skipped (single-process replay)."""

    reason = SKIP_REASON

    def prepare(self, name, inputs, outputs, tensors):
        return None
