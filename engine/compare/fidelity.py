"""Summary figures of a timing-fidelity measurement: replay times against original times.

One home for the figures both fidelity benchmarks report (benchmarks/fidelity.py for one
process, benchmarks/distributed.py for a job), so a change to how an error is computed reaches
both tables and both results files alike.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence


def iqr_over_median(xs: Sequence[float]) -> float:
    """Interquartile range / median: the run-to-run noise a fidelity error is judged against
    (below 4 samples, the full range)."""
    if len(xs) < 4:
        return (max(xs) - min(xs)) / statistics.median(xs) if xs else float("nan")
    q = statistics.quantiles(xs, n=4)
    return (q[2] - q[0]) / statistics.median(xs)


def step_errors(original_ms: Sequence[float], replay_ms: Sequence[float]) -> dict[str, float]:
    """`error` |median replay - median original| / median original, its `signed_error`, and the
    `paired_error`: the median over adjacent (original, replay) pairs of replay/original - 1,
    which a slow drift in machine load (it moves both members of a pair) does not bias."""
    o_med, r_med = statistics.median(original_ms), statistics.median(replay_ms)
    return {
        "error": abs(r_med - o_med) / o_med,
        "signed_error": (r_med - o_med) / o_med,
        "paired_error": statistics.median(r / o for o, r in zip(original_ms, replay_ms)) - 1.0,
    }


def geomean_error(errors: Iterable[float]) -> float:
    """Geometric mean of relative errors, each floored at 1e-6 (one exact replay would make it 0);
    NaN when there are none."""
    floored = [max(e, 1e-6) for e in errors]
    return math.exp(sum(math.log(e) for e in floored) / len(floored)) if floored else float("nan")
