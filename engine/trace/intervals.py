"""The one interval toolkit: union, length, overlap and exclusive time of [start, end) intervals.

Why one home: busy time, overlap and "communication not hidden by compute" were computed by three
separately written unions (Analysis page, simulator result, GPU idle table) that disagreed at
the edges. All take numpy arrays of starts and ends in the same unit and are whole-array numpy
(one sort per union), so they run on 100k-event traces without Python loops.
"""

from __future__ import annotations

import numpy as np


def union(start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Disjoint, sorted intervals (n x 2) covering the [start, end) pairs (touching ones merge)."""
    s = np.asarray(start, np.float64)
    e = np.asarray(end, np.float64)
    if len(s) == 0:
        return np.zeros((0, 2))
    o = np.argsort(s, kind="stable")
    s, e = s[o], e[o]
    run_end = np.maximum.accumulate(e)
    new = np.ones(len(s), bool)
    new[1:] = s[1:] > run_end[:-1]
    idx = np.flatnonzero(new)
    ends = np.r_[run_end[idx[1:] - 1], run_end[-1]]
    return np.stack([s[idx], ends], axis=1)


def length(iv: np.ndarray) -> float:
    """Total length of disjoint intervals (the output of `union`)."""
    return float((iv[:, 1] - iv[:, 0]).sum()) if len(iv) else 0.0


def union_length(start: np.ndarray, end: np.ndarray) -> float:
    """Time covered by at least one interval (busy time)."""
    return length(union(start, end))


def overlap(a: np.ndarray, b: np.ndarray) -> float:
    """Length of the intersection of two disjoint sorted interval sets (outputs of `union`):
    |a| + |b| - |a ∪ b|."""
    if not len(a) or not len(b):
        return 0.0
    both = np.concatenate([a, b])
    return length(a) + length(b) - length(union(both[:, 0], both[:, 1]))


def exclusive(a: np.ndarray, b: np.ndarray) -> float:
    """Length of `a` not covered by `b` (both outputs of `union`): |a ∪ b| - |b|."""
    if not len(a):
        return 0.0
    both = np.concatenate([a, b]) if len(b) else a
    return length(union(both[:, 0], both[:, 1])) - length(b)


def clip(start: np.ndarray, end: np.ndarray, lo: float, hi: float) -> tuple[np.ndarray, np.ndarray]:
    """Intervals cut to the window [lo, hi] (ones outside become empty)."""
    return np.clip(start, lo, hi), np.clip(end, lo, hi)


def subtract(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The parts of `a` not covered by `b` (both outputs of `union`), as disjoint sorted intervals.

    A sweep over all boundaries: a point is kept while inside `a` and outside `b`."""
    if not len(a) or not len(b):
        return a
    t = np.concatenate([a[:, 0], a[:, 1], b[:, 0], b[:, 1]])
    da = np.concatenate([np.ones(len(a)), -np.ones(len(a)), np.zeros(2 * len(b))])
    db = np.concatenate([np.zeros(2 * len(a)), np.ones(len(b)), -np.ones(len(b))])
    o = np.argsort(t, kind="stable")
    t, ca, cb = t[o], np.cumsum(da[o]), np.cumsum(db[o])
    keep = (ca[:-1] > 0) & (cb[:-1] <= 0) & (t[1:] > t[:-1])
    return union(t[:-1][keep], t[1:][keep])
