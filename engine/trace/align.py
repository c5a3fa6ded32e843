"""Gap filling for External-id linking: align op-name sequences between trusted anchors.

Why: in traces without "Record function id", ET `rf_id` and Kineto `External id` are separate
counters. Where both recorded exactly the same ops, one offset maps one onto the other (the
block-offset pass in `link`). Where one side has ops the other lacks (a DDP reducer hook in the
ET only, a `cudaStreamSynchronize` wrapper in Kineto only), the offset drifts and constant
offsets stop matching. Between two trusted matches ("anchors") the remaining ops of one ET
thread must correspond, in order, to the Kineto ops between the anchors' events; aligning
the two name sequences there (longest matching blocks, `difflib`) recovers those links.

Anchors are the longest increasing run (by Kineto External-id order) of the existing matches of
one ET thread, so a match that jumped to another iteration never bounds a gap.
"""

from __future__ import annotations

import bisect
from difflib import SequenceMatcher

import numpy as np

_MAX_CELLS = 4_000_000  # skip gaps whose alignment would compare more than this many pairs


def _lis(seq: list[int]) -> list[int]:
    """Indices of one longest strictly increasing subsequence of `seq` (patience sorting)."""
    tails: list[int] = []
    tails_idx: list[int] = []
    prev = [-1] * len(seq)
    for i, v in enumerate(seq):
        k = bisect.bisect_left(tails, v)
        if k == len(tails):
            tails.append(v)
            tails_idx.append(i)
        else:
            tails[k] = v
            tails_idx[k] = i
        prev[i] = tails_idx[k - 1] if k else -1
    out = []
    i = tails_idx[-1] if tails_idx else -1
    while i >= 0:
        out.append(i)
        i = prev[i]
    return out[::-1]


def fill_gaps(
    rf: np.ndarray,
    tid: np.ndarray,
    et_code: np.ndarray,
    match: np.ndarray,
    k_ext: np.ndarray,
    k_tid: np.ndarray,
    k_code: np.ndarray,
) -> np.ndarray:
    """Extend `match` (Kineto row per ET op, -1 = none) by aligning names between anchors.

    `rf`, `tid`, `et_code`: per ET op; `k_ext`, `k_tid`, `k_code`: per Kineto host event.
    Returns a new match array; existing matches are kept and events are never used twice.
    """
    match = match.copy()
    if len(k_ext) == 0:
        return match
    korder = np.argsort(k_ext, kind="stable")  # Kineto rows in External-id order
    kpos = np.empty(len(korder), dtype=np.int64)
    kpos[korder] = np.arange(len(korder))  # row -> position in that order
    used = np.zeros(len(korder), dtype=bool)  # by position
    used[kpos[match[match >= 0]]] = True
    k_code_o = k_code[korder]
    k_tid_o = k_tid[korder]
    for t in np.unique(tid):
        rows = np.flatnonzero(tid == t)
        rows = rows[np.argsort(rf[rows], kind="stable")]
        m = match[rows]
        have = np.flatnonzero(m >= 0)
        if len(have) == 0:
            continue
        mp = kpos[m[have]]
        anchors = have[_lis(mp.tolist())]
        a_pos = kpos[match[rows[anchors]]]
        bounds_et = [-1, *anchors.tolist(), len(rows)]
        first_k = int(a_pos[0])
        last_k = int(a_pos[-1])
        bounds_k = [None, *a_pos.tolist(), None]
        for g in range(len(bounds_et) - 1):
            e0, e1 = bounds_et[g] + 1, bounds_et[g + 1]
            if e1 <= e0:
                continue
            gap = rows[e0:e1]
            gap = gap[match[gap] < 0]
            if len(gap) == 0:
                continue
            k0 = bounds_k[g] + 1 if bounds_k[g] is not None else max(0, first_k - 2 * len(gap) - 8)
            k1 = bounds_k[g + 1] if bounds_k[g + 1] is not None else min(len(korder), last_k + 2 * len(gap) + 9)
            if k1 <= k0:
                continue
            ktid = k_tid_o[bounds_k[g] if bounds_k[g] is not None else bounds_k[g + 1]]
            cand = np.arange(k0, k1)
            cand = cand[~used[cand] & (k_tid_o[cand] == ktid)]
            if len(cand) == 0 or len(cand) * len(gap) > _MAX_CELLS:
                continue
            a = et_code[gap].tolist()
            b = k_code_o[cand].tolist()
            sm = SequenceMatcher(None, a, b, autojunk=False)
            for i, j, size in sm.get_matching_blocks():
                if size:
                    sel_e = gap[i : i + size]
                    sel_k = cand[j : j + size]
                    match[sel_e] = korder[sel_k]
                    used[sel_k] = True
    return match
