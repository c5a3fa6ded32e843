"""Resource bounds of a composition, checked on an estimate *before* anything is built.

Why: a spec is a hand-edited file. `repeat: 1000000000`, one source listed 1,000 times or
embedding sharding over 100,000 ranks used to grow memory without bound (or spin for hours)
before anything failed. The composed size is cheap to predict: after selecting each segment we
know its node and tensor count, so nodes = sum(segment nodes x repeat) x ranks, and bytes follow
from a per-node cost measured on real composed ETs. Anything over a limit is refused with the
estimate and the limit in the message. `ComposeLimits` is the one source of these defaults
(CLI `mystique compose --limits FILE` reads a JSON object of overrides through `from_dict`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from engine.errors import TraceError
from engine.rules import Between
from engine.settings import Settings

# In-memory cost of one composed node dict (deep-copied node, its inputs/outputs lists and
# attrs), measured with tracemalloc on the sample transformer and DLRM compositions (repeat 3):
# 4.3-4.5 KiB retained and 6.0 KiB at the peak per node; rounded up so the estimate stays an
# upper bound.
NODE_BYTES = 6144
TENSOR_BYTES = 64  # beyond the node's own share: tensors make nodes with many arguments larger
# Validating a written rank (`mystique compose` does it unless --no-validate) parses its file
# back: 9.1 KiB per node at the peak (GPT-2 listed 40 times, 51,921 nodes, ru_maxrss growth),
# more than the composed node since parsed dicts share no strings. One rank is validated at a
# time, after the composition is released, so the bound is the larger of the two phases. The
# estimate once counted only the first: a GPT-2 source listed 1,000 times passed at ~2 GB and
# used 11.9 GB.
VALIDATE_NODE_BYTES = 10240


COUNT = Between(1)  # every limit is a positive integer


@dataclass(frozen=True, kw_only=True, slots=True)
class ComposeLimits(Settings):
    """Largest composition `compose` builds (module docstring)."""

    max_nodes: Annotated[int, COUNT] = 2_000_000  # ET nodes over all ranks (~12 GiB, ~20 min to build on 2 cores)
    max_tensors: Annotated[int, COUNT] = 20_000_000  # tensor slots over all ranks
    max_bytes: Annotated[int, COUNT] = (
        16 << 30
    )  # estimated memory of the composed node lists (also <= 1/2 of free memory)
    max_ranks: Annotated[int, COUNT] = 1024  # sharding world size
    max_sources: Annotated[int, COUNT] = 64  # distinct source traces loaded
    max_segments: Annotated[int, COUNT] = 4096
    max_rank_bytes: Annotated[int, COUNT] = 1 << 40  # tensors one rank's ops touch (1 TiB: beyond any device or host)

    WHAT = "compose limit"

    def check_spec(self, spec) -> None:
        """What the spec alone decides: ranks, distinct sources, segments."""
        if spec.sharding is not None and spec.sharding.world_size > self.max_ranks:
            raise TraceError(
                f"sharding over {spec.sharding.world_size:,} ranks exceeds the limit of {self.max_ranks:,} ranks"
            )
        n_src = len(set(spec.sources))
        if n_src > self.max_sources:
            raise TraceError(f"{n_src:,} distinct sources exceed the limit of {self.max_sources:,}")
        if len(spec.segments) > self.max_segments:
            raise TraceError(f"{len(spec.segments):,} segments exceed the limit of {self.max_segments:,}")

    def check(self, est: ComposeEstimate) -> None:
        """Refuse an estimate over any limit; the message gives the estimate and the limit."""
        from engine.sysinfo import available_memory_bytes

        avail = available_memory_bytes()
        max_bytes = self.max_bytes if avail is None else min(self.max_bytes, avail // 2)
        over = []
        if est.nodes > self.max_nodes:
            over.append(f"{est.nodes:,} nodes > limit {self.max_nodes:,}")
        if est.tensors > self.max_tensors:
            over.append(f"{est.tensors:,} tensors > limit {self.max_tensors:,}")
        if est.bytes > max_bytes:
            over.append(f"~{est.bytes / 2**30:,.1f} GiB > limit {max_bytes / 2**30:,.1f} GiB")
        if over:
            raise TraceError(
                f"composition too large: {'; '.join(over)} (estimated before building: {est.detail}); "
                "lower 'repeat' or the rank count, or raise the limits with --limits"
            )

    def check_ranks(self, per_rank_bytes: dict[int, int]) -> None:
        """Refuse a composition one of whose ranks needs more memory than any machine has (the
        tensors its ops touch, engine.compose.benchmark.rank_summary): a TBE of 40 TB per rank was
        accepted and failed only at replay."""
        if not per_rank_bytes:
            return
        rank, need = max(per_rank_bytes.items(), key=lambda kv: kv[1])
        if need > self.max_rank_bytes:
            raise TraceError(
                f"rank {rank} would need ~{need / 2**30:,.1f} GiB for its tensors, over the limit of "
                f"{self.max_rank_bytes / 2**30:,.1f} GiB per rank (max_rank_bytes); lower batch_scale or "
                "the tables, shard over more ranks, or raise the limit with --limits"
            )


@dataclass(kw_only=True, slots=True)
class ComposeEstimate:
    nodes: int
    tensors: int
    ranks: int
    detail: str = ""

    @property
    def bytes(self) -> int:
        """Peak of composing (every rank's nodes) or of validating one written rank (module docstring)."""
        compose_b = self.nodes * NODE_BYTES + self.tensors * TENSOR_BYTES
        validate_b = -(-self.nodes // max(1, self.ranks)) * VALIDATE_NODE_BYTES
        return max(compose_b, validate_b)


def estimate(segments: list[tuple[int, int, int]], ranks: int) -> ComposeEstimate:
    """`segments`: (nodes, tensors, repeat) per segment; every rank holds a copy."""
    nodes = (1 + sum((n + 1) * rep for n, _t, rep in segments)) * ranks
    tensors = sum(t * rep for _n, t, rep in segments) * ranks
    parts = " + ".join(f"{n:,} x {rep:,}" for n, _t, rep in segments[:4]) + (" + ..." if len(segments) > 4 else "")
    return ComposeEstimate(nodes=nodes, tensors=tensors, ranks=ranks, detail=f"({parts}) nodes x {ranks:,} rank(s)")


__all__ = ["NODE_BYTES", "VALIDATE_NODE_BYTES", "ComposeEstimate", "ComposeLimits", "estimate"]
