"""Size lists of view ops a Kineto trace did not record: from the op that reads the view, else
the input's own geometry (engine/compose/synth.py, after synth_infer.py's call-tree rules).

Before PyTorch 2.1 Kineto wrote no "Concrete Inputs", so a view's size (aten::view, reshape,
_reshape_alias, _unsafe_view, expand, as_strided, permute's dims, split_with_sizes' sizes) is an
empty string. Two rules, in order; each result is checked on meta tensors by the caller:

* **the consumer** (`from_consumer`, counted as inferred): among the host ops that follow the
  view on its thread once it has ended (its own children left out, at most `WINDOW`), the first
  one with a recorded tensor input of the view input's dtype is its reader. Its dims are the
  size when the view can make them: the same element count for view/reshape (_reshape_alias'
  stride: the reader's recorded strides, else contiguous), a permutation of the input's dims
  for permute, a shape the input broadcasts to for expand, 2 to all of the input's elements for
  as_strided (its recorded "Input Strides", else contiguous); otherwise there is no consumer.
  A later call of the same op on the same recorded input is a sibling reading the same source
  (DDP's bucket views, layer_norm's two statistics), not a reader, and is passed over; a reader
  whose dims are the input's own says nothing more than the fallback, which then applies.
* **the input's geometry** (`keep_shape`, counted as guessed): a view that keeps its input's
  shape (and strides; permute the identity, split_with_sizes one piece) is always valid and
  costs what any view of it costs (a view allocates nothing and reads no element).

Allocations (aten::empty with no size recorded and no parent result, synth_infer.py) are not
filled here: a guessed allocation size would change what the replay costs, so they stay skipped.
"""

from __future__ import annotations

import math
from typing import Any

VIEWS = frozenset(
    {
        "aten::view",
        "aten::_unsafe_view",
        "aten::reshape",
        "aten::_reshape_alias",
        "aten::expand",
        "aten::as_strided",
        "aten::permute",
        "aten::split_with_sizes",
    }
)
WINDOW = 16  # host events searched after a view for its consumer
_SAME_NUMEL = frozenset({"aten::view", "aten::_unsafe_view", "aten::reshape", "aten::_reshape_alias"})


def _contiguous(shape: list[int]) -> list[int]:
    st, acc = [], 1
    for d in reversed(shape):
        st.append(acc)
        acc *= max(d, 1)
    return st[::-1]


def _ints(v: list) -> str:
    return f"GenericList[{','.join('Int' for _ in v)}]"


def _set(i: int, v: list, vals: list, ets: list, shapes: list, sts: list) -> None:
    vals[i], ets[i] = list(v), _ints(v)
    shapes[i], sts[i] = [[] for _ in v], [[] for _ in v]


def _int_list(x: Any) -> bool:
    return isinstance(x, list) and all(type(d) is int for d in x)


def _perm(src: list[int], dst: list[int]) -> list[int] | None:
    """dims with src[dims[k]] == dst[k] (the first free match per position), None if none."""
    if len(src) != len(dst) or sorted(src) != sorted(dst):
        return None
    free = list(range(len(src)))
    out = []
    for d in dst:
        j = next(j for j in free if src[j] == d)
        free.remove(j)
        out.append(j)
    return out


def _broadcasts(src: list[int], dst: list[int]) -> bool:
    if len(dst) < len(src):
        return False
    return all(s in (1, d) for s, d in zip(reversed(src), reversed(dst)))


def _fits(name: str, src: list[int], dims: list[int]) -> bool:
    if name in _SAME_NUMEL:
        return math.prod(dims) == math.prod(src)
    if name == "aten::permute":
        return _perm(src, dims) is not None
    if name == "aten::expand":
        return _broadcasts(src, dims)
    if name == "aten::as_strided":  # a 0-d or 1-element tensor nearby is any scalar, not the view
        return len(dims) >= 1 and 1 < math.prod(dims) <= math.prod(src)
    return False


def _fill(name: str, schema, unknown: list[int], dims: list[int], strides: list, src, src_st, vals, ets, shapes, sts):
    """Write `dims` (and strides) into the unknown size arguments; the positions filled."""
    names = [a.name for a in schema.arguments]
    filled = []
    for i in unknown:
        if i >= len(names):
            continue
        n = names[i]
        if n in ("size", "shape"):
            _set(i, dims, vals, ets, shapes, sts)
        elif n == "stride":
            _set(
                i,
                strides if _int_list(strides) and len(strides) == len(dims) else _contiguous(dims),
                vals,
                ets,
                shapes,
                sts,
            )
        elif n == "dims" and name == "aten::permute":
            p = _perm(src, dims)
            if p is None:
                return []
            _set(i, p, vals, ets, shapes, sts)
        else:
            continue
        filled.append(i)
    return filled


def from_consumer(name: str, schema, unknown: list[int], vals, ets, shapes, sts, following: list) -> list[int]:
    """Fill the view's size from the first op in `following` [(name, args)] that reads a tensor
    it can make (module docstring); the positions filled, [] when no consumer fits."""
    if name not in VIEWS or name == "aten::split_with_sizes" or not ets or not str(ets[0]).startswith("Tensor("):
        return []
    src, src_st = shapes[0], sts[0]
    if not _int_list(src):
        return []
    dtype = str(ets[0])[len("Tensor(") : -1]
    for cname, a in following:
        dims_all, types = a.get("Input Dims") or [], a.get("Input type") or []
        if cname == name and dims_all[:1] == [src] and types[:1] == [dtype]:
            continue  # a sibling view of the same source
        st_all = a.get("Input Strides") or []
        same = [k for k, d in enumerate(dims_all) if k < len(types) and types[k] == dtype and _int_list(d)]
        for k in same:
            dims = dims_all[k]
            if not _fits(name, src, dims):
                continue
            if dims == src:
                return []  # the input's own shape: no more than the fallback says
            st = st_all[k] if k < len(st_all) else []
            return _fill(name, schema, unknown, dims, st, src, src_st, vals, ets, shapes, sts)
        if same:
            return []  # the next op reading this dtype reads nothing the view can make
    return []


def keep_shape(name: str, schema, unknown: list[int], vals, ets, shapes, sts) -> list[int]:
    """The view keeps its input's geometry (module docstring); the positions filled."""
    if name not in VIEWS or not ets or not str(ets[0]).startswith("Tensor(") or not _int_list(shapes[0]):
        return []
    src = list(shapes[0])
    src_st = list(sts[0]) if _int_list(sts[0]) and len(sts[0]) == len(src) else _contiguous(src)
    names = [a.name for a in schema.arguments]
    if name == "aten::permute":
        return _fill(name, schema, unknown, src, [], src, src_st, vals, ets, shapes, sts)
    if name == "aten::split_with_sizes":
        i = names.index("split_sizes")
        if i not in unknown or not src:
            return []
        d = names.index("dim")
        # an unrecorded dim is the last one (synth._fill_unknown's neutral `dim`), else dim's default
        dim = -1 if d in unknown else vals[d] if d < len(vals) and type(vals[d]) is int else 0
        if not -len(src) <= dim < len(src):
            return []
        _set(i, [src[dim]], vals, ets, shapes, sts)
        return [i]
    return _fill(name, schema, unknown, src, src_st, src, src_st, vals, ets, shapes, sts)


__all__ = ["VIEWS", "WINDOW", "from_consumer", "keep_shape"]
