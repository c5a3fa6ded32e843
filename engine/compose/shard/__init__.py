"""Sharding a composed benchmark across ranks: embedding tables (`embedding`), data parallel (`dp`)."""
from __future__ import annotations

from engine.errors import TraceError


def apply_sharding(bench, traces, paths, progress=None) -> None:
    kind = bench.spec.sharding.kind
    if kind == "embedding":
        from engine.compose.shard.embedding import shard_embeddings

        shard_embeddings(bench, paths[bench.spec.segments[0].source])
    elif kind == "dp":
        from engine.compose.shard.dp import shard_dp

        shard_dp(bench)
    else:
        raise TraceError("tensor-parallel sharding ('tp') is not implemented yet")
