"""Sharding a composed benchmark across ranks: embedding tables (`embedding`), data parallel (`dp`),
tensor-parallel linear layers (`tp`)."""

from __future__ import annotations


def apply_sharding(bench, traces, paths, progress=None) -> None:
    """Run the spec's sharding (its kind's `apply`, engine.compose.shard.kinds)."""
    bench.spec.sharding.apply(bench, traces, paths)
