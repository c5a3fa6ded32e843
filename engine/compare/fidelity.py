"""Paired statistics of timing measurements: replay against original, plan against plan.

The one home for the figures the fidelity benchmarks (benchmarks/fidelity.py for one process,
benchmarks/distributed.py for a job), the compose measurements (engine.compose.measure) and the
simulator benchmark (benchmarks/simbench) report, so a change to how an error or a noise band is
computed reaches every table and results file alike. Why paired: runs taken alternately share
the machine's load, so per-round ratios and differences cancel a slow drift that medians of
each side alone keep.
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


def paired_ratio(a: Sequence[float], b: Sequence[float]) -> float:
    """Median of per-round ratios a_i / b_i (rounds run alternately share the machine's load)."""
    return statistics.median(x / y for x, y in zip(a, b))


def median_ci(d: Sequence[float], conf: float = 0.95) -> tuple[float, float]:
    """Distribution-free CI of the median (sign-test order statistics): no normality assumed,
    robust to the load spikes of a shared machine."""
    s, n = sorted(d), len(d)
    k = 0  # largest k with P(Binom(n, 1/2) <= k - 1) <= (1 - conf) / 2
    while k + 1 <= n // 2 and sum(math.comb(n, i) for i in range(k + 1)) / 2**n <= (1 - conf) / 2:
        k += 1
    return (s[k - 1], s[n - k]) if k else (s[0], s[-1])


def paired_difference(a: Sequence[float], b: Sequence[float]) -> dict:
    """Median per-round difference a - b and its 95 % CI; within noise when the CI contains 0."""
    d = [x - y for x, y in zip(a, b)]
    lo, hi = median_ci(d)
    return {"median_ms": statistics.median(d), "ci95_ms": [lo, hi], "within_noise": lo <= 0 <= hi}


def geomean_error(errors: Iterable[float]) -> float:
    """Geometric mean of relative errors, each floored at 1e-6 (one exact replay would make it 0);
    NaN when there are none."""
    floored = [max(e, 1e-6) for e in errors]
    return math.exp(sum(math.log(e) for e in floored) / len(floored)) if floored else float("nan")


__all__ = ["geomean_error", "iqr_over_median", "median_ci", "paired_difference", "paired_ratio", "step_errors"]
