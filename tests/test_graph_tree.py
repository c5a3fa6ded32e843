"""Vectorized tree primitives (engine.trace.tree) against brute force on random forests."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.trace.tree import any_marked_ancestor, any_marked_descendant, depths, nearest_marked


@st.composite
def forests(draw):
    n = draw(st.integers(min_value=1, max_value=60))
    # parent[i] < i or -1 gives a forest; then shuffle positions so order carries no meaning
    parent = [-1] + [draw(st.integers(min_value=-1, max_value=i - 1)) for i in range(1, n)]
    perm = draw(st.permutations(range(n)))
    inv = {old: new for new, old in enumerate(perm)}
    shuffled = np.full(n, -1, dtype=np.int64)
    for old, p in enumerate(parent):
        shuffled[inv[old]] = -1 if p < 0 else inv[p]
    marked = np.array(draw(st.lists(st.booleans(), min_size=n, max_size=n)), dtype=bool)
    return shuffled, marked


def _chain(parent, i):
    out = []
    while i >= 0:
        out.append(i)
        i = parent[i]
    return out


@settings(max_examples=200, deadline=None)
@given(forests())
def test_tree_primitives_match_brute_force(forest):
    parent, marked = forest
    n = len(parent)
    near = nearest_marked(parent, marked)
    anc_self = any_marked_ancestor(parent, marked)
    anc_strict = any_marked_ancestor(parent, marked, include_self=False)
    desc = any_marked_descendant(parent, marked)
    dep = depths(parent)
    for i in range(n):
        chain = _chain(parent, i)
        hits = [j for j in chain if marked[j]]
        assert near[i] == (hits[0] if hits else -1)
        assert anc_self[i] == bool(hits)
        assert anc_strict[i] == any(marked[j] for j in chain[1:])
        assert dep[i] == len(chain) - 1
        assert desc[i] == any(marked[j] and i in _chain(parent, j)[1:] for j in range(n))


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.integers(min_value=0, max_value=40), min_size=1, max_size=40),
    st.lists(st.integers(min_value=-2, max_value=45), min_size=1, max_size=40),
    st.booleans(),
)
def test_parent_positions_sorted_and_hashed_paths_agree(ids, parents, ascending):
    """Ascending ids take a binary search, others a hash index: same positions, first row wins
    for duplicated ids, -1 for roots, self-parents and parents not in the table."""
    import pandas as pd

    from engine.trace.tree import parent_positions

    ids = sorted(set(ids)) if ascending else ids
    parents = (parents * len(ids))[: len(ids)]
    ops = pd.DataFrame({"id": ids, "parent": parents, "rank": 0})
    got = parent_positions(ops)
    for i, p in enumerate(parents):
        want = ids.index(p) if p >= 0 and p in ids else -1
        assert got[i] == (-1 if want == i else want)
