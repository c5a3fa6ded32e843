"""A suite: N jobs with weights whose weighted signature matches the fleet's.

The fleet's signature is the mean of its jobs' time shares (engine.fleet.signature.SHARE_KEYS;
each job counts once). A suite of N jobs S with weights w (w >= 0, sum 1) has the signature
sum_j w_j x_j; its distance to the fleet is the L1 norm of the difference (0 = the same mix, 2 =
disjoint mixes), and the error per class is the signed difference.

How the picks are made (`pick`):
  1. k-means (scikit-learn, k = N, fixed seed) over the jobs' share vectors; in each cluster the
     job nearest its centre (a real job, never a synthetic mix);
  2. weights by non-negative least squares with the sum-to-one row (SciPy `nnls`), so a pick that
     stands for more of the fleet weighs more;
  3. local search: each pick is swapped for the job that most lowers the L1 distance (candidates:
     every job, or the `max_candidates` nearest the fleet mean on a large fleet), re-fitting the
     weights, until no swap helps.
`baselines` gives the figures a suite must beat: the median distance of random N-job picks and
the N longest jobs, each with the same weight fitting (a fair, stronger baseline than equal weights).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from engine.errors import TraceError
from engine.fleet.signature import SHARE_KEYS


@dataclass(frozen=True, kw_only=True, slots=True)
class Suite:
    """The picks (row positions in the signature table), their weights and the distance."""

    picks: list[int]
    weights: list[float]
    l1: float
    fleet: dict[str, float]
    suite: dict[str, float]

    def error(self) -> dict[str, float]:
        """Suite minus fleet share, per class."""
        return {k: self.suite[k] - self.fleet[k] for k in self.fleet}


def share_matrix(sigs: pd.DataFrame) -> np.ndarray:
    """The jobs' share vectors (rows), SHARE_KEYS order."""
    missing = [k for k in SHARE_KEYS if k not in sigs.columns]
    if missing:
        raise TraceError(f"the signature table lacks columns {missing}")
    return sigs[list(SHARE_KEYS)].to_numpy(np.float64)


def fit_weights(xs: np.ndarray, target: np.ndarray) -> np.ndarray:
    """Non-negative weights summing to 1 that bring sum_j w_j xs[j] closest to `target` (least
    squares, the sum-to-one constraint as a heavily weighted extra row)."""
    from scipy.optimize import nnls

    lam = 10.0
    a = np.vstack([xs.T, lam * np.ones(len(xs))])
    b = np.concatenate([target, [lam]])
    w, _ = nnls(a, b)
    s = w.sum()
    return w / s if s > 0 else np.full(len(xs), 1.0 / len(xs))


def _l1(x: np.ndarray, picks: list[int], target: np.ndarray) -> tuple[float, np.ndarray]:
    w = fit_weights(x[picks], target)
    return float(np.abs(w @ x[picks] - target).sum()), w


def pick(sigs: pd.DataFrame, budget: int, *, seed: int = 0, max_candidates: int = 200) -> Suite:
    """The suite of `budget` jobs (see the module doc); TraceError when the fleet is smaller."""
    x = share_matrix(sigs)
    n = len(x)
    if budget < 1:
        raise TraceError(f"--budget must be at least 1, got {budget}")
    if n < budget:
        raise TraceError(f"the fleet has {n} job(s), fewer than --budget {budget}")
    target = x.mean(axis=0)
    from sklearn.cluster import KMeans

    km = KMeans(n_clusters=budget, n_init=10, random_state=seed).fit(x)
    picks = []
    for c in range(budget):
        members = np.flatnonzero(km.labels_ == c)
        d = np.linalg.norm(x[members] - km.cluster_centers_[c], axis=1)
        picks.append(int(members[int(np.argmin(d))]))
    picks = list(dict.fromkeys(picks))  # distinct (a tie could repeat one)
    for j in np.argsort(np.linalg.norm(x - target, axis=1)):
        if len(picks) == budget:
            break
        if int(j) not in picks:
            picks.append(int(j))
    cand = (
        np.argsort(np.abs(x - target).sum(axis=1))[: max(max_candidates, budget)].tolist()
        if n > max_candidates
        else list(range(n))
    )
    best, w = _l1(x, picks, target)
    improved = True
    while improved:
        improved = False
        for slot in range(budget):
            for j in cand:
                if j in picks:
                    continue
                trial = [*picks[:slot], j, *picks[slot + 1 :]]
                d, tw = _l1(x, trial, target)
                if d < best - 1e-12:
                    best, w, picks, improved = d, tw, trial, True
    suite_vec = w @ x[picks]
    return Suite(
        picks=picks,
        weights=[float(v) for v in w],
        l1=best,
        fleet={k: float(v) for k, v in zip(SHARE_KEYS, target, strict=True)},
        suite={k: float(v) for k, v in zip(SHARE_KEYS, suite_vec, strict=True)},
    )


def projection(sigs: pd.DataFrame, clusters: int, *, seed: int = 0) -> pd.DataFrame:
    """job, x, y (the first two principal components of the share vectors) and cluster (k-means,
    `clusters` groups): the Fleet page's map of the jobs."""
    from sklearn.cluster import KMeans
    from sklearn.decomposition import PCA

    x = share_matrix(sigs)
    n = len(x)
    xy = PCA(n_components=2, random_state=seed).fit_transform(x) if n >= 2 else np.zeros((n, 2))
    k = max(1, min(clusters, n))
    labels = KMeans(n_clusters=k, n_init=10, random_state=seed).fit_predict(x) if n >= k else np.zeros(n, int)
    return pd.DataFrame({"job": sigs["job"].astype(str).to_numpy(), "x": xy[:, 0], "y": xy[:, 1], "cluster": labels})


def baselines(sigs: pd.DataFrame, budget: int, *, n_random: int = 100, seed: int = 0) -> dict[str, Any]:
    """Distances a suite must beat: random `budget`-job picks (median, over `n_random`) and the
    `budget` longest jobs by step_ms, each with fitted weights."""
    x = share_matrix(sigs)
    target = x.mean(axis=0)
    rng = np.random.default_rng(seed)
    rand = [_l1(x, rng.choice(len(x), budget, replace=False).tolist(), target)[0] for _ in range(n_random)]
    longest = np.argsort(-sigs["step_ms"].to_numpy(np.float64), kind="stable")[:budget].tolist()
    return {
        "random_median_l1": float(np.median(rand)),
        "random_p10_l1": float(np.percentile(rand, 10)),
        "random_picks": n_random,
        "longest_l1": _l1(x, longest, target)[0],
        "longest_jobs": [str(sigs["job"].iat[i]) for i in longest],
    }


SUITE_KIND = "mystique-suite"
"""The manifest's `kind`: what `mystique replay SUITE` recognises a suite folder by."""


def manifest(
    sigs: pd.DataFrame, budget: int, suite: Suite, base: dict[str, Any], composed: list[dict] | None = None
) -> dict[str, Any]:
    """A suite folder's manifest.json: the members (job, path, weight, step_ms and, once composed
    (engine.fleet.members), benchmark: the member's folder relative to the suite folder, or
    refused: the one-line reason, with the step, ranks kept, trims and provenance), the distance,
    the error per class, both signatures and the baselines (written by the CLI and the Fleet page)."""
    members = [
        {
            "job": str(sigs["job"].iat[i]),
            "path": str(sigs["path"].iat[i]),
            "weight": w,
            "step_ms": float(sigs["step_ms"].iat[i]),
        }
        for i, w in zip(suite.picks, suite.weights, strict=True)
    ]
    for m, c in zip(members, composed or [], strict=False):
        m.update({k: v for k, v in c.items() if k not in ("job", "path", "weight", "step_ms")})
        m["recorded_step_ms"] = c.get("step_ms")
    return {
        "kind": SUITE_KIND,
        "budget": budget,
        "fleet_jobs": len(sigs),
        "members": members,
        "l1": suite.l1,
        "error": suite.error(),
        "fleet_signature": suite.fleet,
        "suite_signature": suite.suite,
        "baselines": base,
    }
