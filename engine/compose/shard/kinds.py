"""The sharding kinds a spec may name: one frozen spec dataclass per kind, in one registry.

Why a registry: the kind used to be a string tested in if/elif chains in the spec, the sharding
dispatcher, the composer and the compose page; a new kind meant editing all four. Here a kind
is one class, an engine `Settings`: its fields are the spec's JSON fields, each with its rules
declared on it (engine.rules; the Compose page reads its bounds and choices from them, and only
the widget's label and starting value from the field's metadata), `world_size` its rank count, `apply` the transform (engine.settings.Applies over a `ShardContext`) (imported when it runs, so this
module, and with it the spec, imports without torch), and two flags tell the composer what the
transform does itself.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, ClassVar

from engine.errors import TraceError
from engine.rules import Between, OneOf
from engine.settings import Settings
from engine.simulate.planners import PLANNERS

if TYPE_CHECKING:
    from engine.compose.benchmark import Benchmark
    from engine.trace.model import Trace

EMBEDDING_PLANS = tuple(PLANNERS)  # the planners compose and the what-if share (engine.simulate.planners)


class ShardKind(Enum):
    EMBEDDING = "embedding"
    DP = "dp"
    TP = "tp"


@dataclass(frozen=True, kw_only=True, slots=True)
class ShardContext:
    """What a sharding kind's `apply` works on: the composed benchmark (changed in place), its
    source traces and their paths, in the spec's source order."""

    bench: Benchmark
    traces: list[Trace]
    paths: list[Path]


RANKS = Between(1)  # a rank count (ComposeLimits.max_ranks bounds the composition's)


def _ui(label: str, default: Any) -> Any:
    """A field's widget on the Compose page: its label and starting value (its bounds and choices
    are the field's rules)."""
    return field(metadata={"label": label, "default": default})


@dataclass(frozen=True, kw_only=True, slots=True)
class _ShardingSpec(Settings):
    kind: ClassVar[ShardKind]
    # what the transform does itself, so the composer does not: apply spec.batch_scale (dp
    # divides the global batch over its ranks in one step; embedding scales its tables' bags)
    scales_batch: ClassVar[bool] = False
    # needs the model's parameters (ComposeContext.params) from the source trace
    needs_params: ClassVar[bool] = False
    WHAT = "sharding"

    @property
    def world_size(self) -> int:
        raise NotImplementedError

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind.value, **Settings.to_dict(self)}

    def apply(self, ctx: ShardContext) -> dict[str, Any]:
        """Shard `ctx.bench` in place (rank 0 -> world_size ranks); returns the sharding's meta."""
        raise NotImplementedError


@dataclass(frozen=True, kw_only=True, slots=True)
class EmbeddingSharding(_ShardingSpec):
    """Embedding tables over `ranks` ranks by a planner (engine.simulate.planners)."""

    kind: ClassVar[ShardKind] = ShardKind.EMBEDDING
    scales_batch: ClassVar[bool] = True
    WHAT = "embedding sharding"
    plan: Annotated[str, OneOf(EMBEDDING_PLANS)] = _ui("Plan", "table")
    ranks: Annotated[int, RANKS] = _ui("Ranks", 2)

    @property
    def world_size(self) -> int:
        return self.ranks

    def apply(self, ctx: ShardContext) -> dict[str, Any]:
        from engine.compose.shard.embedding import shard_embeddings

        return shard_embeddings(ctx.bench, ctx.paths[ctx.bench.spec.segments[0].source], self)


@dataclass(frozen=True, kw_only=True, slots=True)
class DpSharding(_ShardingSpec):
    """Data parallel: every rank runs batch / degree samples, gradients all-reduced in buckets."""

    kind: ClassVar[ShardKind] = ShardKind.DP
    scales_batch: ClassVar[bool] = True
    needs_params: ClassVar[bool] = True
    WHAT = "dp sharding"
    degree: Annotated[int, RANKS] = _ui("Degree (ranks)", 2)

    @property
    def world_size(self) -> int:
        return self.degree

    def apply(self, ctx: ShardContext) -> dict[str, Any]:
        from engine.compose.shard.dp import shard_dp

        return shard_dp(ctx.bench, self)


@dataclass(frozen=True, kw_only=True, slots=True)
class TpSharding(_ShardingSpec):
    """Tensor parallel: consecutive linear layers split column- then row-wise over `degree` ranks."""

    kind: ClassVar[ShardKind] = ShardKind.TP
    WHAT = "tp sharding"
    degree: Annotated[int, RANKS] = _ui("Degree (ranks)", 2)

    @property
    def world_size(self) -> int:
        return self.degree

    def apply(self, ctx: ShardContext) -> dict[str, Any]:
        from engine.compose.shard.tp import shard_tp

        return shard_tp(ctx.bench, self)


Sharding = EmbeddingSharding | DpSharding | TpSharding
SHARDINGS: dict[ShardKind, type[Sharding]] = {c.kind: c for c in (DpSharding, TpSharding, EmbeddingSharding)}


def sharding_from_dict(d: Any) -> Sharding:
    """Validate a spec's `sharding` object into its kind's dataclass (TraceError names the field)."""
    if not isinstance(d, dict):
        raise TraceError(f"sharding must be an object or null, not {d!r}")
    names = [k.value for k in SHARDINGS]
    try:
        kind = ShardKind(d.get("kind"))
    except ValueError:
        raise TraceError(f"sharding kind must be one of {', '.join(map(repr, names))}, not {d.get('kind')!r}") from None
    cls = SHARDINGS[kind]
    known = [f.name for f in fields(cls)]
    extra = sorted(set(d) - {"kind", *known})
    if extra:
        raise TraceError(f"{kind.value} sharding takes only {', '.join(map(repr, known))}, not {', '.join(extra)}")
    missing = [k for k in known if k not in d]
    if missing:
        raise TraceError(f"{kind.value} sharding needs {', '.join(map(repr, missing))}")
    return cls(**{k: d[k] for k in known})


__all__ = [
    "EMBEDDING_PLANS",
    "SHARDINGS",
    "DpSharding",
    "EmbeddingSharding",
    "ShardContext",
    "ShardKind",
    "Sharding",
    "TpSharding",
    "sharding_from_dict",
]
