"""Size lists a Kineto trace did not record, inferred where the call tree pins them down.

Before PyTorch 2.1 Kineto wrote no "Concrete Inputs": an op's `int[]` arguments (a view's
size, a factory's size, layer_norm's normalized_shape) are empty strings. Two rules fill some
of them from what *is* recorded, and a node so filled lists the positions under
`mystique_guessed` as the scalar guesses do (they are inferred, not recorded):

* `normalized_shape` of the layer_norm family is the shape of its `weight` (layer_norm
  requires them equal) when the weight was recorded;
* a norm backward's `output_mask` asks for the input's gradient and for the weight's and the
  bias's when they were passed;
* a factory that fills its own result (aten::zeros runs aten::empty then aten::zero_) has the
  size of the tensor its first fill (aten::zero_, aten::fill_) recorded;
* an allocation or view op nested in another operator (aten::empty under aten::addmm,
  aten::as_strided under aten::transpose, aten::_reshape_alias under aten::reshape...) makes
  one of its parent's results: the k-th such child takes the geometry (size, stride, dtype) of
  the parent's k-th output, computed on meta tensors from the parent's synthesized arguments.
  The child is kept only when its own meta run then yields that shape (a view must keep its
  input's element count), else it is skipped as before;
* an aten::resize_ nested in another operator after such an allocation (aten::where,
  aten::index_select: their `out=` kernels resize the empty result) resizes it to the result
  that allocation took.
The rules never invent a value no recorded tensor holds.
"""

from __future__ import annotations

from typing import Any

FROM_PARENT = frozenset(
    {
        "aten::empty",
        "aten::empty_strided",
        "aten::zeros",
        "aten::ones",
        "aten::full",
        "aten::new_empty",
        "aten::new_empty_strided",
        "aten::new_zeros",
        "aten::new_ones",
        "aten::new_full",
        "aten::view",
        "aten::_unsafe_view",
        "aten::reshape",
        "aten::_reshape_alias",
        "aten::as_strided",
        "aten::expand",
    }
)
RESIZED = frozenset({"aten::resize_"})
"""Ops that size a tensor made for the parent's result: the result the allocation before them
took (aten::where runs aten::empty, then aten::resize_ on it: its `out=` kernel), or the next."""
_SIZE_ARGS = ("size", "shape")
_LIST_INT = ("List[int]", "Optional[List[int]]")
_SCALAR_TYPE = {
    "torch.uint8": 0,
    "torch.int8": 1,
    "torch.int16": 2,
    "torch.int32": 3,
    "torch.int64": 4,
    "torch.float16": 5,
    "torch.float32": 6,
    "torch.float64": 7,
    "torch.bool": 11,
    "torch.bfloat16": 15,
}


def _ints(v: list[int]) -> tuple[str, list[int]]:
    return f"GenericList[{','.join('Int' for _ in v)}]", list(v)


def weight_shape(schema, unknown: list[int], vals: list, ets: list, shapes: list, sts: list) -> list[int]:
    """normalized_shape from the recorded weight, and a norm backward's output_mask (a gradient
    for the input, and for the weight and bias when they were passed); the positions filled."""
    names = [a.name for a in schema.arguments]
    filled = []

    def given(k: str) -> bool:
        j = names.index(k) if k in names else len(ets)
        return j < len(ets) and str(ets[j]).startswith("Tensor(")

    if "normalized_shape" in names and "weight" in names:
        i, w = names.index("normalized_shape"), names.index("weight")
        if i in unknown and given("weight") and shapes[w]:
            ets[i], vals[i] = _ints(shapes[w])
            shapes[i], sts[i] = [[] for _ in shapes[w]], [[] for _ in shapes[w]]
            filled.append(i)
    if "output_mask" in names and schema.name.endswith("_norm_backward"):
        i = names.index("output_mask")
        if i in unknown:
            mask = [True, given("weight"), given("bias")]
            vals[i], ets[i] = mask, "GenericList[Bool,Bool,Bool]"
            shapes[i], sts[i] = [[], [], []], [[], [], []]
            filled.append(i)
    return filled


FILLERS = frozenset({"aten::zero_", "aten::fill_"})
"""In-place fills a factory runs on its own result (aten::zeros = aten::empty + aten::zero_)."""
FILLED = frozenset({"aten::zeros", "aten::ones", "aten::full", "aten::new_zeros", "aten::new_ones", "aten::new_full"})


def filled_result(kids: list[tuple[str, dict]]):
    """A factory's result as a meta tensor, from the first fill among its descendants (name,
    args) in order: the fill's recorded input is that result; None when there is none."""
    from engine.compose.meta_run import meta_dtype, meta_tensor

    for name, a in kids:
        if name not in FILLERS:
            continue
        dims, types = a.get("Input Dims") or [], a.get("Input type") or []
        if dims and isinstance(dims[0], list) and all(type(x) is int for x in dims[0]) and types:
            st = (a.get("Input Strides") or [[]])[0]
            return meta_tensor(dims[0], st if isinstance(st, list) else [], meta_dtype(f"Tensor({types[0]})"))
        return None
    return None


def from_parent(name: str, schema, unknown: list[int], vals, ets, shapes, sts, out: Any) -> list[int]:
    """Fill the size (and stride, dtype) arguments of an allocation/view child from the parent's
    output tensor `out` (a meta tensor); the positions filled ([] when the child does not fit)."""
    if (name not in FROM_PARENT and name not in RESIZED) or out is None:
        return []
    args = schema.arguments
    filled = []
    for i in unknown:
        if i >= len(args):
            continue
        a = args[i]
        t = str(a.type)
        if a.name in _SIZE_ARGS and t in _LIST_INT:
            v = list(out.shape)
        elif a.name == "stride" and t in _LIST_INT:
            v = list(out.stride())
        else:
            continue
        ets[i], vals[i] = _ints(v)
        shapes[i], sts[i] = [[] for _ in v], [[] for _ in v]
        filled.append(i)
    if not filled:
        return []
    names = [a.name for a in args]
    if "dtype" in names:  # a factory's dtype the trace did not give: the result's
        d = names.index("dtype")
        code = _SCALAR_TYPE.get(str(out.dtype))
        if d < len(ets) and code is not None and (d in unknown or ets[d] in ("None", "?")):
            vals[d], ets[d] = code, "Int"
            filled.append(d)
    return filled


__all__ = [
    "FILLED",
    "FILLERS",
    "FROM_PARENT",
    "RESIZED",
    "filled_result",
    "from_parent",
    "weight_shape",
]
