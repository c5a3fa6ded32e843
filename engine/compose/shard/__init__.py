"""Sharding a composed benchmark across ranks: embedding tables (`embedding`), data parallel (`dp`),
tensor-parallel linear layers (`tp`)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.compose.shard.kinds import ShardContext
from engine.progress import Progress
from engine.settings import Applies

if TYPE_CHECKING:
    from engine.compose.benchmark import Benchmark
    from engine.trace.model import Trace


def apply_sharding(bench: Benchmark, traces: list[Trace], paths: list[Path], progress: Progress | None = None) -> None:
    """Run the spec's sharding (its kind's `apply`, engine.compose.shard.kinds)."""
    kind: Applies[ShardContext, dict[str, Any]] | None = bench.spec.sharding
    if kind is not None:
        kind.apply(ShardContext(bench=bench, traces=traces, paths=paths))
