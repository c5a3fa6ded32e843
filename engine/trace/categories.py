"""Operator categories (see `CATEGORIES` in model.py): one rule set, applied per distinct name.

Why per distinct name: a 14k-node ET has a few hundred distinct names, so classification costs
nothing when it runs on the categorical's categories and is mapped back through the codes.
The rules are ordered; the first that matches wins:

1. annotation: "## ... ##", "[...]" labels (profiler roots, param's "[param|...]"),
   ProfilerStep#N, "nn.Module: ...", "Optimizer.*", "enumerate(DataLoader)...", and any
   record_function label without a "::" namespace that is not an autograd node.
2. communication: `engine.trace.vocab.is_comm` (the one answer: c10d::*, nccl:*, gloo:*,
   record_param_comms, and non-aten names of a collective).
3. autograd: "autograd::engine::evaluate_function: ...", "*Backward0/1/..." nodes,
   AccumulateGrad, "torch::autograd::*".
4. view: aten ops that only change metadata (view, reshape, t, transpose, permute, expand,
   as_strided, slice, select, squeeze/unsqueeze, detach, alias, size/stride/numel,
   contiguous, flatten, split/chunk/unbind, narrow, ...).
5. allocation: aten::empty*, zeros/ones/full(_like), *_like, new_*, scalar_tensor, resize_,
   set_, lift_fresh.
6. custom: an "ns::op" outside aten/prims/c10d (fbgemm::, triton kernels, user ops) and
   Triton/Inductor kernel names (triton_*).
7. compute: everything else under aten:: / prims:: (and unknown names as a last resort).
"""

from __future__ import annotations

import re

import pandas as pd

from engine.trace.model import CATEGORIES
from engine.trace.vocab import STEP_PREFIX, is_comm

OP_NAME = re.compile(r"^[A-Za-z_]\w*::[A-Za-z_][\w.]*$")
"""A dispatcher operator name, `namespace::op[.overload]` (what a replay can look up and run)."""

_VIEW_OPS = frozenset(
    """
view _unsafe_view view_as reshape reshape_as t transpose transpose_ permute expand expand_as
as_strided as_strided_ slice select squeeze squeeze_ unsqueeze unsqueeze_ detach detach_ alias
size stride numel sym_size sym_stride sym_numel dim contiguous flatten unflatten split
split_with_sizes chunk unbind narrow movedim moveaxis swapaxes swapdims diagonal real imag
view_as_real view_as_complex _reshape_alias unfold lift lift_fresh_copy _nested_view_from_buffer
is_contiguous is_same_size result_type _has_compatible_shallow_copy_type
numpy_T mT mH T H matrix_H adjoint indices values crow_indices col_indices
_values _indices coalesce is_nonzero is_floating_point is_complex stride_ storage_offset
""".split()
)
_ALLOC_OPS = frozenset(
    """
empty empty_like empty_strided new_empty new_empty_strided zeros zeros_like ones ones_like full
full_like new_zeros new_ones new_full scalar_tensor resize_ resize_as_ set_ lift_fresh
_empty_affine_quantized _empty_per_channel_affine_quantized empty_permuted
""".split()
)


def classify(name: str) -> str:
    """The category of one operator/annotation name (rules in the module docstring)."""
    if not name:
        return "annotation"
    if name.startswith(("## ", "[", STEP_PREFIX, "nn.Module:", "Optimizer.", "enumerate(DataLoader)")) or (
        name.startswith("#") and name.endswith("#")
    ):
        return "annotation"
    lower = name.lower()
    if is_comm(name):
        return "communication"
    if (
        name.startswith(("autograd::", "torch::autograd::"))
        or name == "AccumulateGrad"
        or re.fullmatch(r"[A-Za-z0-9_]*Backward\d*", name)
    ):
        return "autograd"
    ns, sep, op = name.partition("::")
    if not sep:
        if lower.startswith(("triton_", "triton")):
            return "custom"
        if name in _VIEW_OPS or name in ("detach",):
            return "view"
        return "annotation"  # a record_function label
    base = op.split(".", 1)[0]
    if ns in ("aten", "prims", "prim"):
        if base in _VIEW_OPS:
            return "view"
        if base in _ALLOC_OPS:
            return "allocation"
        return "compute"
    if ns in ("inductor", "torch_dynamo", "triton") or ns.startswith(("triton", "fbgemm", "torchrec")):
        return "custom"
    return "custom"


def categorize(names: pd.Series) -> pd.Categorical:
    """Categories for a (categorical or object) name column, computed once per distinct name."""
    if not isinstance(names.dtype, pd.CategoricalDtype):
        names = names.astype("category")
    cats = names.cat.categories
    per_name = [CATEGORIES.index(classify(str(c))) for c in cats]
    import numpy as np

    lut = np.asarray(per_name + [CATEGORIES.index("annotation")], dtype=np.int8)
    codes = names.cat.codes.to_numpy()
    return pd.Categorical.from_codes(lut[codes], categories=list(CATEGORIES))
