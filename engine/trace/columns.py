"""Column helpers: building categorical columns fast, and reading them once per distinct value.

Why building: `pd.Categorical(list_of_str)` sorts and hashes through Arrow-backed strings and
costs ~10 ms per 30k values; `pd.factorize` on an object array plus `Categorical.from_codes` is
3-5x faster, and the loaders build a dozen such columns per file.

Why reading: `Series.astype(str)` on a 75k-row categorical builds 75k Python strings (about
70 ms per column); a string test (regex, prefix, set membership) over op names, event
categories or pids should run once per *distinct* value and be indexed by the integer codes.
`codes`, `where`, `isin` and `as_str` are the one home of that "evaluate once" pattern (graph,
trace, simulate and the UI all use them). Missing values read as "".
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import numpy as np
import pandas as pd


def fast_cat(values, categories=None, transform: Callable[[object], str] | None = None) -> pd.Categorical:
    """Categorical of hashable values (first-seen category order unless `categories` is given).

    `transform` maps each *distinct* value to its category label (e.g. an ET type string to a
    dtype name); values mapping to the same label share one category.
    """
    n = len(values)
    if (
        n
        and type(values) in (list, tuple)
        and type(values[0]) is str
        and values[-1] == values[0] == values[n // 2]
        and values.count(values[0]) == n
    ):
        # One distinct string (a trace's device column): no hashing of n fresh string objects.
        label = values[0] if transform is None else transform(values[0])
        cats = [label] if categories is None else list(categories)
        code = cats.index(label) if label in cats else -1
        return pd.Categorical.from_codes(np.full(n, code, dtype=np.int32), categories=cats)
    arr = np.empty(n, dtype=object)
    arr[:] = values
    codes, uniques = pd.factorize(arr, use_na_sentinel=True)
    labels = (
        [transform(u) for u in uniques] if transform is not None else [u if type(u) is str else str(u) for u in uniques]
    )
    if categories is None:
        cats = list(dict.fromkeys(labels))
    else:
        cats = list(categories)
    if cats == labels:
        return pd.Categorical.from_codes(codes.astype(np.int32, copy=False), categories=cats)
    pos = {c: i for i, c in enumerate(cats)}
    lut = np.asarray([pos.get(lab, -1) for lab in labels] + [-1], dtype=np.int32)
    return pd.Categorical.from_codes(lut[codes], categories=cats)


def sorted_positions(keys: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """Position of each `wanted` value in strictly ascending `keys`, -1 when absent.

    Why: a binary search needs no hash table, ~5x cheaper than `pd.Index.get_indexer` on 14k
    rows, and ET node ids ascend in file order."""
    pos = np.searchsorted(keys, wanted)
    hit = pos < len(keys)
    hit[hit] = keys[pos[hit]] == wanted[hit]
    return np.where(hit, pos, -1).astype(np.int64, copy=False)


class Distinct:
    """A column's distinct values as text and each row's code into them; build it once and
    test as many predicates as needed. Missing values get the code of a trailing "" (added
    only when a value is missing)."""

    __slots__ = ("codes", "values")

    def __init__(self, col: pd.Series):
        if isinstance(col.dtype, pd.CategoricalDtype):
            c = col.cat.codes.to_numpy().astype(np.int64)
            values = [str(x) for x in col.cat.categories]
        else:
            f, uniq = pd.factorize(col.astype(object).fillna(""), use_na_sentinel=True)
            c, values = f.astype(np.int64), [str(u) for u in uniq]
        if (c < 0).any():
            c = np.where(c < 0, len(values), c)
            values.append("")
        self.codes: np.ndarray = c
        self.values: list[str] = values

    def where(self, pred: Callable[[str], object]) -> np.ndarray:
        """Boolean mask of rows whose text satisfies `pred` (evaluated once per distinct value)."""
        if not self.values:
            return np.zeros(len(self.codes), dtype=bool)
        table = np.fromiter((bool(pred(u)) for u in self.values), dtype=bool, count=len(self.values))
        return table[self.codes]


def where(col: pd.Series, pred: Callable[[str], object]) -> np.ndarray:
    """Boolean mask of rows whose text satisfies `pred`, evaluated once per distinct value."""
    return Distinct(col).where(pred)


def isin(col: pd.Series, values: Iterable[str]) -> np.ndarray:
    """Boolean mask of rows whose text is one of `values`."""
    vals = set(values)
    return where(col, lambda u: u in vals)


def as_str(col: pd.Series) -> np.ndarray:
    """Object array of the values as text ("" for missing)."""
    d = Distinct(col)
    if not d.values:
        return np.full(len(col), "", dtype=object)
    return np.asarray(d.values, dtype=object)[d.codes]
