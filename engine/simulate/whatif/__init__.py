"""What-if edits (see spec.py for the format). Importing this package registers every edit."""

from __future__ import annotations

from typing import TYPE_CHECKING

from engine.settings import Applies
from engine.simulate.config import SimConfig
from engine.simulate.whatif.context import EditContext
from engine.simulate.whatif.spec import EDITS, Edit, SpecError, WhatIfSpec, register

if TYPE_CHECKING:
    from engine.trace.model import Trace

__all__ = ["EDITS", "Edit", "EditContext", "SpecError", "WhatIfSpec", "apply_edits", "register"]


def apply_edits(spec: WhatIfSpec, trace: Trace, config: SimConfig, *, stage: str, ctx: EditContext | None = None):
    if ctx is None:
        ctx = EditContext(trace=trace, config=config, events=trace.events)
    for i, edit in enumerate(spec.edits):
        if type(edit).stage == stage:
            change: Applies[EditContext, None] = edit
            try:
                change.apply(ctx)
            except SpecError as exc:  # an edit names its own field; the spec path is added here
                where = exc.field if exc.field.startswith("edits[") else f"edits[{i}].{exc.field}"
                raise SpecError(where, exc.detail, exc.path or spec.path) from None
    if stage == "graph" and spec.edits:
        ctx.report.setdefault("assumptions", spec.assumptions())
    return ctx


# registration side effects (one module per edit kind)
from engine.simulate.whatif import dependency as _dependency  # noqa: E402,F401 -- registers into the registry above
from engine.simulate.whatif import device as _device  # noqa: E402,F401 -- registers into the registry above
from engine.simulate.whatif import dims as _dims  # noqa: E402,F401 -- registers into the registry above
from engine.simulate.whatif import dp as _dp  # noqa: E402,F401 -- registers into the registry above
from engine.simulate.whatif import kernel_times as _kernel_times  # noqa: E402,F401 -- registers into the registry above
from engine.simulate.whatif import layers as _layers  # noqa: E402,F401 -- registers into the registry above
from engine.simulate.whatif import pipeline as _pipeline  # noqa: E402,F401 -- registers into the registry above
from engine.simulate.whatif import sharding as _sharding  # noqa: E402,F401 -- registers into the registry above
from engine.simulate.whatif import speedup as _speedup  # noqa: E402,F401 -- registers into the registry above
from engine.simulate.whatif import unprofiled as _unprofiled  # noqa: E402,F401 -- registers into the registry above
