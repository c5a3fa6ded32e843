"""How a batch scale rewrites an op's own arguments: size lists, slice ends, all_to_all splits.

Why apart from meta_check: these are pure rules about recorded argument values (which entry of
a `view`'s size list carries the batch, how far from the end a slice stops), decided from the
recorded and the scaled shapes alone; meta_check runs the ops on meta tensors and asks these
rules what to try. Each rule is small enough to read against the trace that motivated it.
"""

from __future__ import annotations

import torch

SIZE_ARG_OPS = frozenset(
    """view _unsafe_view reshape expand new_empty new_zeros new_ones new_full zeros ones empty
full rand randn randint empty_strided unflatten _reshape_alias""".split()
)
# the size-list ops whose output reads no tensor's shape: its sizes are constants of the model's
# code, which a batch scale rewrites (a model sizes its buffers by B) and a weight split keeps
FACTORIES = SIZE_ARG_OPS - frozenset(("view", "_unsafe_view", "reshape", "expand", "unflatten", "_reshape_alias"))


def size_candidates(sizes: list, S: set, batch: int | None, s: float) -> list[list]:
    """Size lists to try for a view/reshape/expand, most likely first.

    Batch 1 is special: every dim is a multiple of 1, and scaling any one of them keeps numel
    equal to the scaled input's, so the first try wins even when it is the sequence or hidden
    dim. A batch-1 trace keeps its batch as a size entry of 1 (or inside a -1), so those come
    first, then the sizes unchanged, and only then other dims (a flattened B*T)."""
    cands = []
    if batch == 1:
        for i, x in enumerate(sizes):
            if x == 1:
                c = list(sizes)
                c[i] = round(s)
                cands.append(c)
        cands.append(list(sizes))
    ints = [i for i, x in enumerate(sizes) if isinstance(x, int) and x > 1]
    in_s = [i for i in ints if sizes[i] in S]
    if in_s:  # the batch leads: the first dim known to carry it alone, then all of them
        c = list(sizes)
        c[in_s[0]] = round(c[in_s[0]] * s)
        cands.append(c)
        cands.append([round(x * s) if i in in_s else x for i, x in enumerate(sizes)])
    guesses = [i for i in ints if i not in in_s and batch and sizes[i] % batch == 0]
    for k, i in enumerate(in_s + guesses):
        if k == len(in_s) and list(sizes) not in cands:
            # unchanged before guessing: a factory op (empty([64]) for BatchNorm's saved mean)
            # accepts any size, so a guessed "multiple of the batch" would always win there
            cands.append(list(sizes))
        c = list(sizes)
        c[i] = round(c[i] * s)
        if c not in cands:
            cands.append(c)
    if list(sizes) not in cands:
        cands.append(list(sizes))
    return [c for c in cands if all(not isinstance(x, float) for x in c)]


RESHAPES = ("view", "reshape", "_unsafe_view", "_reshape_alias")


def layout_candidate(
    new_in: list, old_in: list, sizes: list, s: float, known: frozenset | set = frozenset()
) -> list | None:
    """The size list a reshape of the scaled input needs, from element order alone.

    A reshape keeps the order of elements, so the block of elements *inside* the scaled input
    dim (the product of the dims after it) is a suffix of the output; the output dim just
    before that suffix (or the one the block ends inside) is where the scaled dim went. This is
    what decides a batch-1 trace, where every dim is a multiple of the batch and numel alone
    cannot tell the batch from the sequence or hidden dim. `known`: dims known to carry the
    batch; where the scaled dim splits into pieces, the outermost is not known and another (> 1)
    is, that one scales (an all_to_all's [world x B] rows viewed as [world, B, ..])."""
    if len(new_in) != len(old_in) or any(not isinstance(x, int) or x < -1 for x in sizes):
        return None
    if sizes.count(-1) == 1:  # an inferred dim: solve it on the recorded input, decide, keep the -1
        i = sizes.index(-1)
        rest = 1
        for j, x in enumerate(sizes):
            rest *= x if j != i else 1
        numel = 1
        for d in old_in:
            numel *= int(d)
        if rest <= 0 or numel % rest:
            return None
        solved = layout_candidate(
            new_in, old_in, [numel // rest if j == i else x for j, x in enumerate(sizes)], s, known
        )
        return None if solved is None else [-1 if j == i else x for j, x in enumerate(solved)]
    if any(x < 0 for x in sizes):
        return None
    diff = [i for i, (a, b) in enumerate(zip(new_in, old_in)) if a != b]
    if len(diff) != 1:
        return None
    p = diff[0]
    old = int(old_in[p])
    if any(x == 0 for x in sizes):
        return None
    inner = 1
    for d in old_in[p + 1 :]:
        inner *= int(d)
    b, suffix = len(sizes), 1
    while suffix < inner and b > 0:  # sizes[b:] is the block inside the scaled dim
        b -= 1
        suffix *= int(sizes[b])
    if suffix > inner:
        k = b  # the block ends inside sizes[b]: the scaled dim was merged into it
    elif suffix != inner:
        return None
    else:
        j, prod = b, 1  # sizes[j:b] is the scaled dim split up (leading dims of 1 included)
        while j > 0 and prod * int(sizes[j - 1]) <= old and (prod < old or sizes[j - 1] == 1):
            j -= 1
            prod *= int(sizes[j])
        if prod != old:
            return None
        if j < b:
            # the outermost piece carries the batch; a split that does not divide it goes to the
            # next piece in (a fused [.., 3, heads, d] view: tensor parallelism splits heads)
            k = next((i for i in range(j, b) if abs(sizes[i] * s - round(sizes[i] * s)) < 1e-9), j)
            if sizes[k] not in known:  # (a batch-1 trace's leading 1 is known: it stays first)
                k = next((i for i in range(j, b) if sizes[i] > 1 and sizes[i] in known), k)
        elif b < len(sizes):
            k = b  # a dim of 1 was dropped: the batch merges into the next dim out
        else:
            return None
    c = list(sizes)
    v = c[k] * s
    if abs(v - round(v)) > 1e-9:
        return None
    c[k] = round(v)
    return c


def shapes_note(tensors: dict) -> str:
    """The meta inputs' shapes, for an error that names the op and the shapes blocking it."""
    parts = []
    for t in tensors.values():
        for x in t if isinstance(t, list) else [t]:
            if isinstance(x, torch.Tensor):
                parts.append(str(list(x.shape)))
    return f" (inputs {', '.join(parts[:6])}{', ..' if len(parts) > 6 else ''})" if parts else ""


def split_slice(base: str, ins: dict, orig_shapes: list, t: torch.Tensor, s: float) -> bool:
    """Under a weight split, a slice of a dim that shrank by exactly s (a fused QKV's q, k or v
    piece, in backward) takes the same piece of the split dim: start and end scale by s."""
    vals = ins.get("values", [])
    if base != "slice" or len(vals) < 4 or not orig_shapes or not isinstance(orig_shapes[0], list):
        return False
    dim, a, b = vals[1], vals[2], vals[3]
    if not isinstance(dim, int) or not -len(orig_shapes[0]) <= dim < len(orig_shapes[0]):
        return False
    old, new = orig_shapes[0][dim], int(t.shape[dim])
    if old == new or abs(new - old * s) > 1e-9 or not isinstance(a, int) or not isinstance(b, int):
        return False
    b = min(b, old)
    if any(abs(x * s - round(x * s)) > 1e-9 for x in (a, b)):
        return False
    vals[2], vals[3] = round(a * s), round(b * s)
    return True


def rescale_slice(base: str, ins: dict, orig_shapes: list, t: torch.Tensor, mutate: bool) -> None:
    """slice/narrow whose end was tied to x's (batch-carrying) size: keep the same distance
    from the end (PyTorch records `x[:-1]` as end = B - 1)."""
    vals = ins.get("values", [])
    if len(vals) < 4 or not orig_shapes or not isinstance(orig_shapes[0], list):
        return
    dim, a, b = vals[1], vals[2], vals[3]
    if not isinstance(dim, int) or not orig_shapes[0] or not -len(orig_shapes[0]) <= dim < len(orig_shapes[0]):
        return
    old, new = orig_shapes[0][dim], int(t.shape[dim])
    if old == new:
        return
    if base == "slice" and isinstance(b, int) and 0 < b <= old and old - b < old / 2:
        ins["values"][3] = new - (old - b)  # x[:B] -> x[:sB], x[:B-1] -> x[:sB-1]
    elif base == "narrow" and isinstance(a, int) and isinstance(b, int) and a + b == old:
        ins["values"][3] = new - a


SPLITS = ("split", "split_with_sizes")


def rescale_split(base: str, ins: dict, orig_shapes: list, t: torch.Tensor, s: float, mutate: bool) -> None:
    """split(x, size, dim) / split_with_sizes(x, sizes, dim) along a dim that scaled by exactly s:
    the piece sizes scale with it, so the op keeps its number of outputs (a fused QKV [.., 3H]
    split by H: tensor parallelism halves both, q, k and v keep their places)."""
    vals = ins.get("values", [])
    if len(vals) < 2 or not orig_shapes or not isinstance(orig_shapes[0], list) or not orig_shapes[0]:
        return
    dim = vals[2] if len(vals) > 2 and isinstance(vals[2], int) else 0
    if not -len(orig_shapes[0]) <= dim < len(orig_shapes[0]):
        return
    old, new = int(orig_shapes[0][dim]), int(t.shape[dim])
    if old == new or abs(new - old * s) > 1e-9:
        return
    size = vals[1]
    pieces = size if isinstance(size, list) else [size]
    if not all(isinstance(x, int) for x in pieces) or any(abs(x * s - round(x * s)) > 1e-9 for x in pieces):
        return
    if mutate:  # scaled runs always mutate (a check-only run keeps s = 1)
        scaled = [round(x * s) for x in pieces]
        vals[1] = scaled if isinstance(size, list) else scaled[0]


ALL_TO_ALL = frozenset(("alltoall_base_",))


def base_name(name: str) -> str:
    return name.split("::", 1)[-1].split(".", 1)[0]


def rescale_splits(ins: dict, orig_shapes: list, tensors: dict) -> None:
    """c10d::alltoall_base_(output, input, group, output_split_sizes, input_split_sizes, ...):
    explicit split sizes follow their tensor's new dim 0 (empty lists split evenly: nothing to do)."""
    vals = ins.get("values", [])
    for t_arg, j in ((0, 3), (1, 4)):
        t = tensors.get(t_arg)
        splits = vals[j] if j < len(vals) else None
        if not (isinstance(t, torch.Tensor) and t.dim() and isinstance(splits, list) and splits):
            continue
        if t_arg >= len(orig_shapes) or not isinstance(orig_shapes[t_arg], list) or not orig_shapes[t_arg]:
            continue
        old, new = int(orig_shapes[t_arg][0]), int(t.shape[0])
        if old and new != old and all(isinstance(x, int) for x in splits):
            scaled = [x * new // old for x in splits]
            scaled[-1] += new - sum(scaled)  # splits that do not scale evenly: the remainder goes last
            vals[j] = scaled
