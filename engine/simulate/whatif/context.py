"""`EditContext`: what a what-if edit reads and writes (engine.simulate.whatif.apply_edits makes
one per prediction). Apart from the package's face so that every edit module imports the type
from below, not from the package that imports them all to register them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

    from engine.simulate.config import SimConfig
    from engine.trace.model import Trace


@dataclass(kw_only=True, slots=True)
class EditContext:
    """What edits read and write: the source trace, the (possibly rewritten) events, the graph."""

    trace: Trace
    config: SimConfig
    events: pd.DataFrame
    graph: Any = None
    predicted_events: Any = None  # set before "result"-stage edits run
    warnings: list[str] = field(default_factory=list)
    report: dict[str, Any] = field(default_factory=dict)
