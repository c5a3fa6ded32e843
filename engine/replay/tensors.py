"""Tensors of a replay: recorded tensor metadata, realistic synthesized values, shared storages.

Why one backing storage per recorded `storage_id`: ops in a trace see views (a weight and its
transpose, a flat gradient bucket and its per-parameter slices). Rebuilding every external
input as an independent tensor would break aliasing (an in-place update through one view must
be seen through the others) and over-count memory. So external inputs that share a storage are
carved from one byte buffer sized to cover every view (max offset + extent over occurrences),
each view rebuilt with its recorded offset and strides.

Why realistic values: integer inputs are usually indices. Random int64 garbage makes
`embedding_bag` read out of bounds (an error, or a different cache footprint), so integer
tensors are generated within ranges implied by the ops that consume them (`index_constraints`);
offsets are sorted, start at 0 and end within the index count. Floats are small non-negative
uniform values (scaled like a default init) so long op chains neither overflow nor produce NaN
(NaN inputs take slow paths in sqrt/log and distort timing).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from engine.replay.placement import Placement

_INT_DTYPES = {"int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"}


@dataclass(slots=True)
class TensorRec:
    """One recorded tensor occurrence (a row of `trace.tensors`)."""

    tensor_id: int
    storage_id: int
    offset: int
    numel: int
    itemsize: int
    dtype: str
    shape: tuple
    strides: tuple | None
    device: str = ""
    """The device the trace recorded ("cpu", "cuda:0"; "" when it recorded none)."""

    def torch_dtype(self) -> torch.dtype:
        dt = getattr(torch, self.dtype, None) if self.dtype else None
        if not isinstance(dt, torch.dtype):
            raise ValueError(f"unknown dtype {self.dtype!r}")
        return dt

    def stride_tuple(self) -> tuple:
        if self.strides is not None and len(self.strides) == len(self.shape):
            return tuple(int(s) for s in self.strides)
        out, acc = [], 1
        for s in reversed(self.shape):
            out.append(acc)
            acc *= max(int(s), 1)
        return tuple(reversed(out))

    def extent_elems(self) -> int:
        """Elements of storage this view needs, from its offset on."""
        if any(int(s) == 0 for s in self.shape):
            return 0
        return 1 + sum((int(s) - 1) * abs(st) for s, st in zip(self.shape, self.stride_tuple()))

    def nbytes(self) -> int:
        return (self.offset + self.extent_elems()) * max(self.itemsize, 1)

    def check(self) -> str | None:
        """A problem with this record (unknown dtype, numel contradicting shape), or None."""
        try:
            dt = self.torch_dtype()
        except ValueError as e:
            return str(e)
        if any((not isinstance(s, (int,)) or s < 0) for s in self.shape):
            return f"invalid shape {list(self.shape)}"
        n = math.prod(int(s) for s in self.shape)
        if self.numel >= 0 and n != self.numel:
            return f"shape {list(self.shape)} has {n} elements but the trace records numel {self.numel}"
        if self.itemsize and dt.itemsize != self.itemsize and self.dtype not in ("bool",):
            return f"dtype {self.dtype} has itemsize {dt.itemsize} but the trace records {self.itemsize}"
        return None


@dataclass(slots=True)
class Constraint:
    """Value range for an integer input: [0, high) or offsets into `n` indices."""

    high: int | None = None
    offsets_of: int | None = None  # offsets over this many indices
    include_last: bool = False

    def merge(self, other: Constraint) -> None:
        if other.high is not None:
            self.high = other.high if self.high is None else min(self.high, other.high)
        if other.offsets_of is not None:
            self.offsets_of = other.offsets_of
            self.include_last = self.include_last or other.include_last


def _dim(shape, d: int) -> int | None:
    try:
        return int(shape[d])
    except (IndexError, TypeError, ValueError):
        return None


def _classes(shape) -> int | None:
    if not shape:
        return None
    return _dim(shape, 1) if len(shape) >= 2 else _dim(shape, 0)


def index_constraints(name: str, values: list, shapes: list) -> list[tuple[int, int | None, Constraint]]:
    """(arg, sub, Constraint) for the index-like inputs of one recorded op.

    `values`/`shapes` are the op's recorded inputs. Positions follow the ATen schemas, which
    have been stable for these ops for years.
    """
    op = name.split("::", 1)[-1]
    out: list[tuple[int, int | None, Constraint]] = []

    def val(i):
        return values[i] if i < len(values) else None

    def shp(i):
        return shapes[i] if i < len(shapes) else None

    def numel(i):
        s = shp(i)
        return math.prod(int(x) for x in s) if isinstance(s, list) and all(isinstance(x, int) for x in s) else None

    if op == "embedding":
        out.append((1, None, Constraint(high=_dim(shp(0), 0))))
    elif op in ("embedding_bag", "_embedding_bag", "_embedding_bag_forward_only"):
        out.append((1, None, Constraint(high=_dim(shp(0), 0))))
        out.append((2, None, Constraint(offsets_of=numel(1), include_last=bool(val(7)))))
    elif op in ("embedding_backward", "embedding_dense_backward"):
        nw = val(2)
        out.append((1, None, Constraint(high=nw if isinstance(nw, int) else None)))
    elif op == "_embedding_bag_backward":
        nw = val(6)
        out.append((1, None, Constraint(high=nw if isinstance(nw, int) else None)))
        out.append((2, None, Constraint(offsets_of=numel(1))))
        out.append((3, None, Constraint(high=_dim(shp(2), 0))))
        out.append((5, None, Constraint(high=nw if isinstance(nw, int) else None)))
    elif op in ("_embedding_bag_dense_backward", "_embedding_bag_per_sample_weights_backward"):
        nw = val(5) if op == "_embedding_bag_dense_backward" else None
        out.append((1, None, Constraint(high=nw if isinstance(nw, int) else None)))
        out.append((2, None, Constraint(high=_dim(shp(0), 0))))
    elif op in (
        "index_select",
        "gather",
        "scatter",
        "scatter_",
        "scatter_add",
        "scatter_add_",
        "scatter_reduce",
        "scatter_reduce_",
        "index_add",
        "index_add_",
        "index_copy",
        "index_copy_",
        "index_fill",
        "index_fill_",
    ):
        d = val(1)
        if isinstance(d, int) and isinstance(shp(0), list) and shp(0):
            out.append((2, None, Constraint(high=_dim(shp(0), d % len(shp(0))))))
    elif op == "index_select_backward":
        sizes, d = val(1), val(2)
        if isinstance(sizes, list) and isinstance(d, int) and sizes:
            out.append((3, None, Constraint(high=int(sizes[d % len(sizes)]))))
    elif op in (
        "nll_loss",
        "nll_loss_forward",
        "nll_loss_nd",
        "nll_loss2d",
        "nll_loss2d_forward",
        "cross_entropy_loss",
        "multi_margin_loss",
        "multilabel_margin_loss",
    ):
        out.append((1, None, Constraint(high=_classes(shp(0)))))
    elif op in ("nll_loss_backward", "nll_loss2d_backward"):
        out.append((2, None, Constraint(high=_classes(shp(1)))))
    elif op in ("index", "_index_put_impl_", "index_put", "index_put_", "_unsafe_index", "_unsafe_index_put"):
        base = shp(0)
        idx = shp(1)
        if isinstance(base, list) and isinstance(idx, list):
            for j in range(len(idx)):
                out.append((1, j, Constraint(high=_dim(base, j))))
    elif op in ("max_pool2d_with_indices_backward", "max_pool3d_with_indices_backward"):
        s = shp(1)
        k = 2 if op.startswith("max_pool2d") else 3
        if isinstance(s, list) and len(s) >= k:
            out.append((7, None, Constraint(high=math.prod(int(x) for x in s[-k:]))))
    elif op == "max_unpool2d":
        out.append((1, None, Constraint(high=math.prod(int(x) for x in (val(2) or [1])))))
    elif op == "one_hot":
        n = val(1)
        out.append((0, None, Constraint(high=n if isinstance(n, int) and n > 0 else None)))
    elif op in ("take", "put_", "put"):
        out.append((1, None, Constraint(high=numel(0))))
    return out


def fill_(t: torch.Tensor, dtype_name: str, c: Constraint | None, gen: torch.Generator) -> None:
    """Fill one synthesized tensor with realistic values (see module docstring)."""
    if t.numel() == 0:
        return
    if dtype_name == "bool":
        t.copy_(torch.rand(t.shape, generator=gen) < 0.5)
        return
    if dtype_name in _INT_DTYPES:
        if c is not None and c.offsets_of is not None:
            n = max(int(c.offsets_of), 0)
            flat = torch.sort(torch.randint(0, n + 1, (t.numel(),), generator=gen)).values
            flat[0] = 0
            if c.include_last:
                flat[-1] = n
            t.copy_(flat.view(t.shape).to(t.dtype))
            return
        if c is not None and c.high is not None and c.high > 0:
            hi = min(int(c.high), torch.iinfo(t.dtype).max if t.dtype != torch.uint8 else 256)
            t.copy_(torch.randint(0, hi, tuple(t.shape), generator=gen).to(t.dtype))
            return
        t.zero_()
        return
    if t.is_floating_point() or t.is_complex():
        scale = 1.0
        if t.dim() >= 2 and t.shape[-1] > 0:
            scale = 1.0 / math.sqrt(t.shape[-1])
        # non-negative on purpose: sqrt/log/rsqrt of negatives give NaN, and NaN paths are up to
        # 10x slower on CPU (Adam's sqrt(exp_avg_sq) would time 4x the original)
        _tile_fill(t, _pool(t.device, t.dtype, scale, gen))
        return
    t.zero_()


_POOL_SIZE = 1 << 16
_POOLS: dict = {}


def _pool(device, dtype, scale: float, gen: torch.Generator) -> torch.Tensor:
    """A cached block of random values; big tensors are filled by tiling it (filling hundreds of
    MB with fresh random numbers would dominate replay start-up, and timing does not care)."""
    key = (str(device), dtype, round(scale, 6))
    p = _POOLS.get(key)
    if p is None:
        p = (torch.rand(_POOL_SIZE, generator=gen, dtype=torch.float32) * scale).to(device=device, dtype=dtype)
        _POOLS[key] = p
    return p


def _tile_fill(t: torch.Tensor, pool: torch.Tensor) -> None:
    n = t.numel()
    size = pool.numel()
    if t.is_contiguous():
        flat = t.view(-1)
        full, rem = divmod(n, size)
        if full:
            flat[: full * size].view(full, size).copy_(pool.expand(full, size))
        if rem:
            flat[full * size :].copy_(pool[:rem])
        return
    reps = -(-n // size)
    t.copy_(pool.repeat(reps)[:n].view(t.shape))


@dataclass(slots=True)
class External:
    """A trace input that no replayed op produces: synthesized once (or per use when lazy)."""

    slot: int
    rec: TensorRec
    constraint: Constraint | None = None
    first_use: int = 0
    last_use: int = 0


@dataclass(slots=True)
class StorageManager:
    """Builds external inputs as views of one byte buffer per recorded storage id."""

    device: str
    seed: int = 0
    placement: Placement | None = None
    """Where each recorded device's tensors go (engine.replay.placement); None: all on `device`."""
    _buffers: dict = field(default_factory=dict)
    _sizes: dict = field(default_factory=dict)
    _filled: dict = field(default_factory=dict)

    def plan(self, externals: list[External]) -> None:
        """Size one buffer per storage to cover every view (max offset + extent)."""
        for e in externals:
            key = e.rec.storage_id
            self._sizes[key] = max(self._sizes.get(key, 0), e.rec.nbytes())

    def total_bytes(self) -> int:
        return sum(self._sizes.values())

    def materialize(self, e: External, gen: torch.Generator) -> torch.Tensor:
        """The tensor for external `e`, a view into its storage's shared buffer (filled)."""
        rec = e.rec
        dt = rec.torch_dtype()
        key = rec.storage_id
        buf = self._buffers.get(key)
        prefilled = False
        if buf is None:
            nbytes = max(self._sizes.get(key, rec.nbytes()), rec.nbytes(), 1)
            buf = torch.empty(nbytes, dtype=torch.uint8, device=self._device(rec))
            self._buffers[key] = buf
            if (dt.is_floating_point or dt.is_complex) and nbytes % dt.itemsize == 0:
                # fill the whole storage once in the first view's dtype: later views of the same
                # dtype (weight and its transpose, bucket slices) need no fill of their own
                whole = buf.view(dt)
                fill_(
                    whole.view(-1, rec.shape[-1])
                    if rec.shape and int(rec.shape[-1]) > 0 and whole.numel() % int(rec.shape[-1]) == 0
                    else whole,
                    rec.dtype,
                    None,
                    gen,
                )
                self._filled[key] = dt
        else:
            prefilled = self._filled.get(key) == dt and e.constraint is None
        t = torch.empty(0, dtype=dt, device=buf.device)
        t.set_(buf.untyped_storage(), rec.offset, tuple(int(s) for s in rec.shape), rec.stride_tuple())
        if not prefilled and not (self._filled.get(key) == dt and e.constraint is None):
            fill_(t, rec.dtype, e.constraint, gen)
        return t

    def standalone(self, e: External, gen: torch.Generator) -> torch.Tensor:
        """A fresh tensor for `e` with no shared buffer (lazy mode: freed after last use)."""
        rec = e.rec
        t = torch.empty_strided(
            tuple(int(s) for s in rec.shape), rec.stride_tuple(), dtype=rec.torch_dtype(), device=self._device(rec)
        )
        fill_(t, rec.dtype, e.constraint, gen)
        return t

    def _device(self, rec: TensorRec) -> str:
        return self.placement.of(rec.device) if self.placement is not None else self.device

    def release(self) -> None:
        self._buffers.clear()
        self._filled.clear()


def empty_like_rec(rec: TensorRec, device: str) -> torch.Tensor:
    """An uninitialized tensor with a recorded output's shape/dtype (for failed ops' outputs)."""
    return torch.empty_strided(
        tuple(int(s) for s in rec.shape), rec.stride_tuple(), dtype=rec.torch_dtype(), device=device
    )
