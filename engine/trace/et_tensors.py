"""ET tensor records -> the tensors table (one row per tensor argument of every op).

An ET records a tensor argument as `[tensor_id, storage_id, offset, numel, itemsize, device]`
next to its shape, type and strides; list arguments (`TensorList`, `GenericList[Tensor,...]`)
hold one record per element. Both parsers of et.py feed this module: the general path walks
each node's arguments into row tuples (`walk_tensors` -> `tensor_frame`), the typed fast path
(et_typed.py) appends to one flat list (`tensor_frame_flat`). Either way the table's columns are
built once, column by column, because 30k+ tensors must convert in milliseconds.
"""

from __future__ import annotations

import array
from itertools import chain
from operator import itemgetter

import numpy as np
import pandas as pd

from engine.trace.columns import fast_cat
from engine.trace.dtypes import dtype_of, split_list_type

_LIST_TYPE = frozenset((list,))
_TUPLE_TYPE = frozenset((tuple,))
_LIST_PREFIXES = ("GenericList[", "TensorList", "List[", "Optional[")


def tensor_kind(t) -> int:
    """0: an argument type without tensors; 1: a tensor (its value is the tensor record);
    2: a list type whose elements may be tensors."""
    if type(t) is not str or "Tensor" not in t:
        return 0
    if t.startswith("Tensor"):
        return 1
    return 2 if t.startswith(_LIST_PREFIXES) else 0


def walk_tensors(rows: list, op_id: int, io: str, values, shapes, types, strides) -> None:
    """Append (op_id, io, arg, sub, value, type, shape, strides) for every tensor argument."""
    for i, t in enumerate(types):
        kind = tensor_kind(t)
        if not kind:
            continue
        v = values[i] if i < len(values) else None
        sh = shapes[i] if shapes is not None and i < len(shapes) else None
        st = strides[i] if strides is not None and i < len(strides) else None
        if kind == 1:
            if type(v) is list and len(v) >= 5:
                rows.append((op_id, io, i, 0, v, t, sh, st))
        else:
            walk_list(rows, op_id, io, i, v, t, sh, st)


def walk_list(rows: list, op_id: int, io: str, i: int, v, t: str, sh, st) -> None:
    """The tensor elements of list argument `i` (type `t`, value `v`), one row per element."""
    for j, ev, et, esh, est in list_tensors(v, t, sh, st):
        rows.append((op_id, io, i, j, ev, et, esh, est))


def list_tensors(v, t: str, sh, st):
    """(index, record, element type, shape, strides) of each tensor element of a list argument
    (type `t`, value `v`, shapes `sh`, strides `st`)."""
    if type(v) is not list:
        return
    elem_types = split_list_type(t) or ("Tensor",)
    last = len(elem_types) - 1
    sh_ok, st_ok = type(sh) is list, type(st) is list
    for j, ev in enumerate(v):
        et = elem_types[j if j < last else last]
        if not et.startswith("Tensor") or type(ev) is not list or len(ev) < 5:
            continue
        yield (j, ev, et, sh[j] if sh_ok and j < len(sh) else None, st[j] if st_ok and j < len(st) else None)


def _shapes(shapes) -> list:
    """Shape tuples (() when not recorded) of walk rows' shapes (lists, or tuples already)."""
    kinds = set(map(type, shapes))
    if kinds <= _TUPLE_TYPE:
        return list(shapes)
    if kinds <= _LIST_TYPE:
        return list(map(tuple, shapes))
    return [tuple(x) if type(x) in (list, tuple) else () for x in shapes]


def _strides(st):
    if type(st) is not list:
        return None
    for x in st:
        if type(x) is not int:
            return None
    return tuple(st)


def tensor_frame(rows: list, rank: int) -> pd.DataFrame:
    """The tensors table from walk rows (general path), column by column (C-level passes)."""
    n = len(rows)
    if n:
        op_id, io, arg, sub, vals, types, shapes, strides = zip(*rows)
    else:
        op_id = io = arg = sub = vals = types = shapes = strides = ()
    grid = np.fromiter(chain.from_iterable(map(itemgetter(0, 1, 2, 3, 4), vals)), dtype=np.int64, count=5 * n).reshape(
        -1, 5
    )
    return _tensor_table(
        as_ints(op_id, "q"),
        fast_cat(io, _IO_CATS),
        arg,
        sub,
        [grid[:, k] for k in range(5)],
        _devices(vals),
        fast_cat(types, transform=dtype_of),
        _shapes(shapes),
        strides,
        rank,
    )


# The typed path's flat tensor list: per tensor these fields (io 0/1, type as a code), then its
# six-element record [tensor_id, storage_id, offset, numel, itemsize, device].
FLAT_FIELDS = ("io", "arg", "sub", "type", "shape", "strides")
FLAT_WIDTH = len(FLAT_FIELDS) + 6
_IO_CATS = ["in", "out"]


def tensor_frame_flat(flat: list, op_id: np.ndarray, types: list, rank: int) -> pd.DataFrame:
    """The tensors table from the typed path's flat list (`FLAT_FIELDS` + record per tensor;
    shapes already tuples), each row's op id, and the tensor types the type codes index.

    Why flat: every column is a strided slice of one list (C speed), with no row tuples to
    build, transpose and free; the int columns convert with `array.array`, and io and dtype
    come from codes instead of hashing 30k strings."""
    w = FLAT_WIDTH
    io = pd.Categorical.from_codes(as_ints(flat[0::w], "b"), categories=_IO_CATS)
    labels = [dtype_of(t) for t in types]
    cats = list(dict.fromkeys(labels))
    codes = as_ints(flat[3::w], "i")
    if cats != labels:  # types with one dtype name (e.g. two spellings): merge their codes
        codes = np.asarray([cats.index(lab) for lab in labels], dtype=np.int32)[codes]
    dtype = pd.Categorical.from_codes(codes, categories=cats)
    return _tensor_table(
        op_id,
        io,
        flat[1::w],
        flat[2::w],
        [as_ints(flat[6 + k :: w], "q") for k in range(5)],
        flat[11::w],
        dtype,
        flat[4::w],
        flat[5::w],
        rank,
    )


def _tensor_table(
    op_id, io: pd.Categorical, arg, sub, v5: list, devices, dtype: pd.Categorical, shapes: list, strides, rank: int
) -> pd.DataFrame:
    n = len(op_id)
    return pd.DataFrame(
        {
            "op_id": op_id,
            "rank": np.full(n, rank, dtype=np.int32),
            "io": io,
            "arg": as_ints(arg, "i"),
            "sub": as_ints(sub, "i"),
            "tensor_id": v5[0],
            "storage_id": v5[1],
            "offset": v5[2],
            "numel": v5[3],
            "itemsize": v5[4].astype(np.int32),
            "dtype": dtype,
            "shape": pd.Series(shapes, dtype=object),
            "strides": pd.Series(
                [None] * n if strides.count(None) == n else [_strides(x) for x in strides], dtype=object
            ),
            "device": fast_cat(devices),
        }
    )


_INT_TYPES = {"q": np.int64, "i": np.int32, "b": np.int8}


def as_ints(values, typecode: str) -> np.ndarray:
    """int64 ("q"), int32 ("i") or int8 ("b") array of a sequence of Python ints.

    Why `array.array`: it converts a list of ints in one C loop without numpy's per-element type
    discovery, 2-3x faster than `np.asarray` on 30k-element lists. Raises TypeError or
    OverflowError for anything that is not an int in range (callers fall back)."""
    return np.frombuffer(array.array(typecode, values), dtype=_INT_TYPES[typecode])


def _devices(vals) -> list:
    """Device element of each tensor value list ("" when absent); the common all-six-element
    case is one C-level pass (fast_cat turns non-str values into text)."""
    try:
        return list(map(itemgetter(5), vals))
    except IndexError:
        return [v[5] if len(v) > 5 else "" for v in vals]
