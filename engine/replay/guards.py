"""Argument checks that run before a library op whose kernel trusts its inputs.

Why: a replayed tensor that the trace recorded only as an allocation (`aten::empty`, then a host
copy the profiler did not capture) holds whatever memory it got. FBGEMM's sparse permutes index
`lengths` with the `permute` tensor and write `permuted_lengths_sum` values without checking
either: TorchRec builds its permutation exactly that way (`torch.tensor([...])`), and the replay
of such a trace died with SIGSEGV (issue 31, the KJT input dist). A guard raises ValueError
instead; the executor records the op as failed with that one line, and the replay goes on.
"""

from __future__ import annotations

from collections.abc import Callable

import torch


def _sparse_permute(args: tuple, kwargs: dict) -> None:
    """permute_{2D,1D,}_sparse_data(permute, lengths, values, weights=None, permuted_lengths_sum=None)."""
    names = ("permute", "lengths", "values", "weights", "permuted_lengths_sum")
    a = dict(zip(names, args)) | {k: v for k, v in kwargs.items() if k in names}
    perm, lengths, values = a.get("permute"), a.get("lengths"), a.get("values")
    if not (isinstance(perm, torch.Tensor) and isinstance(lengths, torch.Tensor)):
        return
    rows = int(lengths.shape[0]) if lengths.dim() >= 1 else 0
    p = perm.reshape(-1).to(torch.int64)
    if p.numel() and (int(p.min()) < 0 or int(p.max()) >= rows):
        raise ValueError(
            f"permute holds values outside [0, {rows}) (min {int(p.min())}, max {int(p.max())}): "
            "the trace recorded it as an allocation whose contents it did not capture"
        )
    if p.numel() != int(torch.unique(p).numel()):
        raise ValueError("permute repeats an index: not a permutation the output sizes were recorded for")
    sub = lengths.reshape(rows, -1)[p].to(torch.int64)
    if int(sub.min()) < 0 if sub.numel() else False:
        raise ValueError("lengths hold negative values (uncaptured contents)")
    need = int(sub.sum())
    given = a.get("permuted_lengths_sum")
    if isinstance(values, torch.Tensor) and need > int(values.numel()):
        raise ValueError(f"the permuted lengths sum to {need}, over the {int(values.numel())} values given")
    if isinstance(given, int) and given != need:
        raise ValueError(f"permuted_lengths_sum {given} is not the permuted lengths' sum {need}")


GUARDS: dict[str, Callable[[tuple, dict], None]] = {
    "fbgemm::permute_2D_sparse_data": _sparse_permute,
    "fbgemm::permute_1D_sparse_data": _sparse_permute,
    "fbgemm::permute_sparse_data": _sparse_permute,
}


def guard_of(overload) -> Callable[[tuple, dict], None] | None:
    """The check to run before `overload` (a torch OpOverload), or None."""
    schema = getattr(overload, "_schema", None)
    return GUARDS.get(getattr(schema, "name", "")) if schema is not None else None
