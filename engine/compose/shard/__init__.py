"""Sharding a composed benchmark across ranks: embedding tables (`embedding`), data parallel (`dp`),
tensor-parallel linear layers (`tp`)."""

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
    elif kind == "tp":
        from engine.compose.shard.tp import shard_tp

        shard_tp(bench)
    else:
        raise TraceError(f"unknown sharding kind {kind!r}")
