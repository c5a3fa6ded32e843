"""Pipeline stages with the 1F1B schedule, from the simulated step (analytic, after scheduling).

How: the simulated step's forward and backward spans (`## forward ##` / `## backward ##`
annotations, else the ET phases' host spans) are split into `stages` equal stages and
`microbatches` equal microbatches: one stage's forward of one microbatch takes
f = F / (stages x microbatches), its backward b = B / (stages x microbatches). 1F1B (warm-up,
steady one-forward-one-backward, cool-down) then takes (microbatches + stages - 1) x (f + b)
plus one activation/gradient hand-off per step between neighbouring stages (`p2p_us` each way),
and each stage updates only its parameters (optimizer / stages). The rest of the step (data
loading, loss, anything outside the spans) is kept.

Assumptions: balanced stages; time proportional to the microbatch size (per-op fixed costs
are not amortised differently); activations fit in memory; no interleaving (virtual stages).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import numpy as np

from engine.rules import MAX_US, Between
from engine.simulate.whatif.spec import Edit, SpecError, register

if TYPE_CHECKING:
    from engine.simulate.whatif.context import EditContext

SPANS = {"forward": "## forward ##", "backward": "## backward ##", "optimizer": "## optimizer ##"}


@register("pipeline", stage="result")
class Pipeline(Edit):
    stages: Annotated[int, Between(1, 4096)]
    microbatches: Annotated[int, Between(1, 1_000_000)]
    p2p_us: Annotated[float, Between(0, MAX_US)] = 0.0

    def apply(self, ctx: EditContext) -> None:
        from engine.trace import columns as _cols

        ev = ctx.predicted_events
        names = _cols.as_str(ev["name"])
        dur = ev["dur_us"].to_numpy(np.float64)
        spans = {k: float(dur[names == v].sum()) for k, v in SPANS.items()}
        if spans["forward"] <= 0 or spans["backward"] <= 0:
            raise SpecError("kind", "pipeline needs '## forward ##' and '## backward ##' spans in the trace")
        from engine.simulate.result import step_spans

        st = step_spans(ev)
        n_steps = max(len(st), 1)
        step_us = float(st["dur_us"].sum()) if len(st) else float(spans["forward"] + spans["backward"])
        fwd, bwd, opt = (spans[k] / n_steps for k in ("forward", "backward", "optimizer"))
        rest = step_us / n_steps - fwd - bwd - opt
        s, m = self.stages, self.microbatches
        f, b = fwd / (s * m), bwd / (s * m)
        pipe = (m + s - 1) * (f + b) + (2 * (s - 1) * self.p2p_us if s > 1 else 0.0)
        total = max(rest, 0.0) + pipe + opt / s
        ctx.report["pipeline"] = {
            "stages": s,
            "microbatches": m,
            "predicted_step_ms": total / 1000,
            "unpipelined_step_ms": step_us / n_steps / 1000,
            "bubble_fraction": (s - 1) / (m + s - 1),
            "per_microbatch_stage_ms": {"forward": f / 1000, "backward": b / 1000},
        }
