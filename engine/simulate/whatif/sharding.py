"""The what-if `sharding` edit: rank embedding sharding plans over N ranks by predicted time.

The tables, the cost model and the planners are engine.simulate.planners (shared with compose's
embedding sharding); this edit fits the model on the trace's own tables, runs every plan for
every rank count, and reports each plan's slowest rank and the predicted step (the original
embedding time replaced by the plan's).

Assumptions: indices uniform over rows (row shards get lookups/N); all_to_all exchange of
pooled embeddings not modelled (equal bytes for every plan at a given N); dense part unchanged.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import numpy as np

from engine.rules import Between, NonEmpty, OneOf
from engine.simulate.planners import PLANNERS, EmbeddingModel, rank_us, tables_from_trace
from engine.simulate.whatif.spec import Edit, SpecError, register

if TYPE_CHECKING:
    from engine.simulate.whatif.context import EditContext


def _embedding_like(ops) -> list[tuple[str, dict, str | None]]:
    """(name, inputs, schema) of the embedding-like ops (their arguments parsed only for them)."""
    import json

    from engine.trace.tbe import embedding_like

    out: list[tuple[str, dict, str | None]] = []
    for name, inputs, schema in zip(ops["name"].astype(str), ops["inputs"], ops["schema"]):
        if embedding_like(name):
            try:
                ins = json.loads(inputs) if isinstance(inputs, str) else (inputs or {})
            except ValueError:
                ins = {}
            out.append((name, ins, str(schema or "")))
    return out


@register("sharding")
class Sharding(Edit):
    ranks: Annotated[tuple[int, ...], NonEmpty(), Between(1, 4096)] = (2, 4)
    plans: Annotated[tuple[str, ...], NonEmpty(), OneOf(PLANNERS)] = ("table", "row", "column", "greedy")

    def apply(self, ctx: EditContext) -> None:
        from engine.trace.tbe import TbeUnreadable, why_not

        try:
            tables = tables_from_trace(ctx.trace)
        except TbeUnreadable as e:
            raise SpecError("kind", f"sharding cannot read a TBE lookup: {e}") from None
        if not tables:
            ops = ctx.trace.ops
            seen = "" if ops is None else why_not(_embedding_like(ops))
            raise SpecError(
                "kind",
                "sharding needs an ET with embedding_bag ops or FBGEMM TBE lookups (none found)"
                + (f"; seen: {seen}" if seen else ""),
            )
        model = EmbeddingModel.fit(tables)
        emb_total = sum(t.fwd_us + (t.bwd_us if np.isfinite(t.bwd_us) else 0.0) for t in tables)
        from engine.simulate.result import iteration_ms

        step = iteration_ms(ctx.trace.events) or 0.0
        ranking = {}
        for n in self.ranks:
            rows = []
            for plan in self.plans:
                per = rank_us(PLANNERS[plan](tables, n, model), n, model)
                rows.append(
                    {
                        "plan": plan,
                        "slowest_rank_ms": max(per) / 1000,
                        "per_rank_ms": [round(x / 1000, 4) for x in per],
                        "predicted_step_ms": step - emb_total / 1000 + max(per) / 1000,
                    }
                )
            rows.sort(key=lambda r: float(r["slowest_rank_ms"]))  # type: ignore[arg-type]  # rows are plain dicts of floats
            ranking[str(n)] = rows
        ctx.report["sharding"] = {
            "tables": [
                {"rows": t.rows, "dim": t.dim, "lookups": t.lookups, "fwd_us": t.fwd_us, "bwd_us": t.bwd_us}
                for t in tables
            ],
            "model": {"source": model.source, "scale": model.scale},
            "ranking": ranking,
        }
