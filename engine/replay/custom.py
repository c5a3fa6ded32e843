"""Custom rebuilders: library ops replayed by rebuilding the library's module, not by calling the
recorded operator with synthesized arguments.

FBGEMM's table-batched embedding (TBE, production DLRM): `split_embedding_codegen_lookup_*`
takes weights, per-table offsets, `D_offsets`, `hash_size_cumsum` and indices whose *values*
must be consistent (an index past its table reads out of bounds inside a C++ kernel); a trace
records only their shapes. So the lookup is rebuilt as a `SplitTableBatchedEmbeddingBagsCodegen`
from the trace's arguments: number of tables (len(D_offsets) - 1), dims (`total_D`, `max_D`),
rows (the weights' numel split evenly over the tables: per-table sizes are not recorded), pooling
mode, optimizer (from the op name: `..._lookup_sgd_function` -> exact SGD), batch
((len(offsets) - 1) / tables) and pooling factor (len(indices) / bags). Indices are drawn
uniformly within each table's rows, bag lengths even: valid, realistic accesses. The TBE's
recorded backward (`split_embedding_backward_codegen_*`, the fused optimizer update) runs as the
rebuilt module's backward; `bounds_check_indices` runs on the module's own tensors.

Ops are tied together by their recorded `indices` tensor (the same across bounds check, lookup
and backward of one TBE). Without fbgemm_gpu the TBE is *substituted*, and counted so in the
coverage ("substituted", `by_substitution`): the same tables as one torch weight, the lookup as
one `embedding_bag` over all T x B bags (sum/mean; `embedding` for sequence TBEs) laid out as
the TBE's [B, total_D] output, the backward as each lookup's gradient row applied in place with
`index_add_` (the fused update of exact SGD; other optimizers' state is not modelled), the bounds
check as a range check of the indices. Never a dense [rows, dim] gradient: that is what made a
13.3M-row table cost 3.3 s and GiBs per iteration (issue 31 item 19).

Registry: `REBUILDERS` maps an op-name predicate to a rebuilder class, so new library ops plug in
without touching the plan.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from engine.replay.reasons import SkipReason

FBGEMM_HINT = "fbgemm-gpu-cpu==1.8.0 on CPU / fbgemm-gpu on CUDA (pip install -e '.[dlrm]')"
_LOOKUP = re.compile(r"^fbgemm::split_embedding_codegen_lookup_(?P<opt>\w+?)_function(_pt2|_cpu)?$")
_BACKWARD = re.compile(r"^fbgemm::split_embedding_backward_codegen_(?P<opt>[a-z_]+?)_(unweighted|weighted)")
_OPTIMIZERS = {
    "sgd": "EXACT_SGD",
    "rowwise_adagrad": "EXACT_ROWWISE_ADAGRAD",
    "adagrad": "EXACT_ADAGRAD",
    "adam": "ADAM",
    "lamb": "LAMB",
    "partial_rowwise_adam": "PARTIAL_ROWWISE_ADAM",
    "partial_rowwise_lamb": "PARTIAL_ROWWISE_LAMB",
    "lars_sgd": "LARS_SGD",
    "none": "NONE",
}

# optimizer state per optimizer: (fp32 values per weight element, fp32 values per row)
_STATE = {
    "sgd": (0, 0),
    "none": (0, 0),
    "lars_sgd": (1, 0),
    "rowwise_adagrad": (0, 1),
    "adagrad": (1, 0),
    "adam": (2, 0),
    "lamb": (2, 1),
    "partial_rowwise_adam": (1, 1),
    "partial_rowwise_lamb": (1, 1),
}


def _args(schema: str, ins: dict) -> dict[str, tuple[Any, Any, str]]:
    """{argument name: (value, shape, type)} through the recorded schema."""
    import torch

    values, shapes, types = ins.get("values", []), ins.get("shapes", []), ins.get("types", [])
    try:
        names = [a.name for a in torch._C.parse_schema(schema).arguments] if schema else []
    except RuntimeError:
        names = []
    return {
        n: (values[i], shapes[i] if i < len(shapes) else None, types[i]) for i, n in enumerate(names) if i < len(values)
    }


def _numel(v: Any) -> int | None:
    return int(v[3]) if isinstance(v, list) and len(v) >= 5 and isinstance(v[3], int) else None


def _key(a: dict) -> tuple | None:
    v = a.get("indices", (None,))[0]
    return (int(v[0]), int(v[1])) if isinstance(v, list) and len(v) >= 2 else None


class _TBE:
    """One rebuilt table-batched embedding and its synthesized batch."""

    def __init__(
        self,
        *,
        tables: int,
        rows: int,
        dims: list[int],
        opt: str,
        pooling: int,
        batch: int,
        n_idx: int,
        precision: str = "fp32",
    ):
        self.tables, self.rows, self.dims, self.opt = tables, rows, dims, opt
        self.pooling, self.batch, self.n_idx = pooling, batch, n_idx
        self.precision = precision  # of the recorded weights and pooled output: fp32, fp16 or bf16
        self.module: Any = None  # fbgemm's SplitTableBatchedEmbeddingBagsCodegen once built
        self.out: Any = None
        self.native = True  # False: the torch substitute (no fbgemm_gpu; module docstring)

    def nbytes(self) -> int:
        """Bytes this TBE holds once built (counted in the replay's memory estimate, issue 26:
        a TorchRec DLRM peaked at 7.7x a bound that left them out): the weights in the precision
        the kernels run in, the optimizer's state (`_STATE`: per element, per row, or none), the
        synthesized batch (indices, offsets, pooled output and its cast, the output gradient) and
        the backward's per-index gradient rows."""
        elem = 2 if self.precision == "fp16" else 4  # bf16 runs in fp32 on CPU (build)
        n_rows = self.rows * self.tables
        n_elems = self.rows * sum(self.dims)
        per_elem, per_row = _STATE.get(self.opt, (2, 1))  # unknown: the largest (Adam-like)
        if not self.native:  # the torch substitute: weights in their own dtype, no optimizer state
            elem, per_elem, per_row = (2 if self.precision in ("fp16", "bf16") else 4), 0, 0
        total_d = sum(self.dims)
        batch = self.n_idx * 8 + (self.tables * self.batch + 1) * 8 + 3 * self.batch * total_d * 4
        return n_elems * elem + per_elem * n_elems * 4 + per_row * n_rows * 4 + batch + self.n_idx * max(self.dims) * 4

    def _batch(self, device: str, g) -> None:
        """Indices within each table's rows (`local`), even bag lengths, the output gradient."""
        import torch

        bags = self.tables * self.batch
        offsets = torch.linspace(0, self.n_idx, bags + 1).round().long()
        per_table = [offsets[t * self.batch + self.batch] - offsets[t * self.batch] for t in range(self.tables)]
        local = [torch.randint(0, self.rows, (int(n),), generator=g) for n in per_table]
        self.indices = torch.cat(local).to(device)
        # the same lookups in one weight of all tables' rows (the torch substitute)
        self.flat_indices = torch.cat([x + t * self.rows for t, x in enumerate(local)]).to(device)
        self.offsets = offsets.to(device)
        total_d = sum(self.dims)
        rows_out = self.n_idx if self.pooling == 2 else self.batch
        width = self.dims[0] if self.pooling == 2 else total_d
        self.grad = (torch.randn(rows_out, width, generator=g) * 1e-3).to(device, self.out_dtype)
        self.warning = torch.zeros(1, dtype=torch.long, device=device)

    def build(self, device: str, seed: int) -> None:
        if self.module is not None:
            return
        import torch

        if not self.native:
            self._build_torch(device, seed)
            return
        from fbgemm_gpu.split_embedding_configs import EmbOptimType, SparseType
        from fbgemm_gpu.split_table_batched_embeddings_ops_common import BoundsCheckMode, EmbeddingLocation, PoolingMode
        from fbgemm_gpu.split_table_batched_embeddings_ops_training import (
            ComputeDevice,
            SplitTableBatchedEmbeddingBagsCodegen,
        )

        cuda = device.startswith("cuda")
        loc, comp = (
            (EmbeddingLocation.DEVICE, ComputeDevice.CUDA) if cuda else (EmbeddingLocation.HOST, ComputeDevice.CPU)
        )
        # FBGEMM's CPU kernels have no bf16 ("split_embedding_cpu_forward_1 not implemented for
        # 'BFloat16'"): there the lookup runs in fp32 and its output is cast to bf16, so the ops
        # downstream get the dtype the trace recorded
        native = self.precision if (cuda or self.precision != "bf16") else "fp32"
        prec = getattr(SparseType, native.upper())
        self.out_dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(self.precision, torch.float32)
        self.module = SplitTableBatchedEmbeddingBagsCodegen(
            embedding_specs=[(self.rows, d, loc, comp) for d in self.dims],
            optimizer=getattr(EmbOptimType, _OPTIMIZERS.get(self.opt, "EXACT_SGD")),
            learning_rate=0.01,
            pooling_mode=PoolingMode(self.pooling) if self.pooling in (0, 1, 2) else PoolingMode.SUM,
            bounds_check_mode=BoundsCheckMode.NONE,  # the trace's own bounds_check op is replayed separately
            device=torch.device(device),
            weights_precision=prec,
            output_dtype=prec,
        )
        self._batch(device, torch.Generator().manual_seed(seed))

    def _build_torch(self, device: str, seed: int) -> None:
        """The substitute without fbgemm_gpu (module docstring): one weight of every table's rows."""
        import torch

        self.out_dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(self.precision, torch.float32)
        g = torch.Generator().manual_seed(seed)
        w = torch.empty(self.rows * self.tables, self.dims[0], dtype=self.out_dtype, device=device)
        self.module = w.uniform_(-0.01, 0.01)
        self._batch(device, g)
        # the bag of every lookup (the backward sends each bag's gradient to its lookups' rows)
        sizes = self.offsets[1:] - self.offsets[:-1]
        self.bag_of = torch.repeat_interleave(torch.arange(len(sizes), device=device), sizes)
        self.bag_scale = (1.0 / sizes.clamp(min=1).to(self.out_dtype)).unsqueeze(1) if self.pooling == 1 else None

    def forward(self):
        import torch
        import torch.nn.functional as F

        if not self.native:
            w = self.module
            if self.pooling == 2:  # sequence: one row per lookup
                self.out = F.embedding(self.flat_indices, w)
            else:
                mode = "mean" if self.pooling == 1 else "sum"
                bags = F.embedding_bag(self.flat_indices, w, self.offsets, mode=mode, include_last_offset=True)
                # [T x B, dim], table-major as the TBE's offsets -> the TBE's [B, T x dim]
                self.out = bags.view(self.tables, self.batch, -1).transpose(0, 1).reshape(self.batch, -1)
            return (self.out,)
        with torch.enable_grad():
            out = self.module(self.indices, self.offsets)
            self.out = out if out.dtype == self.out_dtype else out.to(self.out_dtype)
        return (self.out,)

    def backward(self):
        if self.out is None:  # a backward selected without its forward: run the forward first
            self.forward()
        out, self.out = self.out, None
        if not self.native:  # the fused exact-SGD update: each lookup's gradient row, in place
            g = self.grad
            if self.pooling != 2:  # [B, T x dim] -> per bag [T x B, dim] -> per lookup
                g = g.view(self.batch, self.tables, -1).transpose(0, 1).reshape(self.tables * self.batch, -1)
                if self.bag_scale is not None:
                    g = g * self.bag_scale
                g = g.index_select(0, self.bag_of)
            self.module.index_add_(0, self.flat_indices, g, alpha=-0.01)
            return None
        out.backward(self.grad)
        return None

    def bounds_check(self):
        import torch

        if not self.native:  # a range check of every index and the offsets' order
            bad = (self.flat_indices < 0) | (self.flat_indices >= self.rows * self.tables)
            self.warning.fill_(int(bool(bad.any()) or bool((self.offsets[1:] < self.offsets[:-1]).any())))
            return None
        m = self.module
        torch.ops.fbgemm.bounds_check_indices(m.rows_per_table, self.indices, self.offsets, 1, self.warning)
        return None


class FbgemmTBE:
    """Rebuilder for FBGEMM TBE ops (see module docstring)."""

    @staticmethod
    def handles(name: str) -> bool:
        return bool(_LOOKUP.match(name) or _BACKWARD.match(name)) or name == "fbgemm::bounds_check_indices"

    def __init__(self, seed: int):
        self.seed = seed
        self.tbes: dict[tuple, _TBE] = {}

    def prepare(self, op_id: int, name: str, schema: str, ins: dict, outs: dict, device: str) -> Callable[[], Any]:
        from engine.replay.resolved import DispatchError

        native = fbgemm_available()
        a = _args(schema, ins)
        key = _key(a)
        if key is None:
            raise DispatchError(f"op {op_id} {name}: no recorded indices argument", SkipReason.NO_MATCHING_OVERLOAD)
        m = _LOOKUP.match(name)
        if m:
            self.tbes[key] = self._spec(op_id, name, m.group("opt"), a)
            self.tbes[key].native = native
        tbes, seed = self.tbes, self.seed
        what = "forward" if m else ("bounds_check" if name.endswith("bounds_check_indices") else "backward")

        def run():
            tbe = tbes.get(key)
            if tbe is None:
                raise RuntimeError(f"no split_embedding_codegen_lookup op in the replay set uses indices {key}")
            tbe.build(device, seed)
            return getattr(tbe, what)()

        if not native:  # counted as substituted in the coverage (executor, result.coverage_report)
            run.substituted = f"{name} -> {_SUBSTITUTE[what]} (fbgemm_gpu not installed)"  # type: ignore[attr-defined]
        return run

    def resident_bytes(self) -> int:
        """Bytes the TBEs prepared so far hold once built (memory estimate)."""
        return sum(t.nbytes() for t in self.tbes.values())

    @staticmethod
    def _spec(op_id: int, name: str, opt: str, a: dict) -> _TBE:
        from engine.replay.resolved import DispatchError

        def val(n, default=None):
            return a[n][0] if n in a and isinstance(a[n][0], (int, float)) else default

        d_off = a.get("D_offsets", (None,))[0]
        tables = (_numel(d_off) or 0) - 1
        w = a.get("weights") or a.get("host_weights") or a.get("dev_weights")
        wv = w[0] if w else None
        w_numel = _numel(wv[0] if isinstance(wv, list) and wv and isinstance(wv[0], list) else wv) or 0
        total_d, max_d = val("total_D"), val("max_D")
        n_idx, n_off = _numel(a.get("indices", (None,))[0]), _numel(a.get("offsets", (None,))[0])
        if tables < 1 or not total_d or not n_idx or not n_off or not w_numel:
            raise DispatchError(
                f"op {op_id} {name}: tables/dims/weights/indices not recorded", SkipReason.NO_MATCHING_OVERLOAD
            )
        dims = (
            [int(max_d)] * tables
            if max_d and int(max_d) * tables == int(total_d)
            else [int(total_d) // tables] * tables
        )
        rows = max(1, w_numel // sum(dims))
        batch = max(1, (n_off - 1) // tables)
        wtype = str(w[2]) if w else ""  # "GenericList[Tensor(c10::BFloat16),...]" after a dtype change
        precision = "bf16" if "BFloat16" in wtype else ("fp16" if "Half" in wtype else "fp32")
        return _TBE(
            tables=tables,
            rows=rows,
            dims=dims,
            opt=opt,
            pooling=int(val("pooling_mode", 0)),
            batch=batch,
            n_idx=n_idx,
            precision=precision,
        )


_SUBSTITUTE = {
    "forward": "aten::embedding_bag (one over all tables)",
    "backward": "per-lookup gradient rows + aten::index_add_",
    "bounds_check": "a range check of the indices",
}


def fbgemm_available() -> bool:
    """Can fbgemm_gpu be imported (it registers torch.ops.fbgemm)? False when it is not installed
    or when `sys.modules["fbgemm_gpu"]` is None (how a test stands for a machine without it)."""
    try:
        import fbgemm_gpu  # noqa: F401
    except ImportError:
        return False
    return True


REBUILDERS: list[type[FbgemmTBE]] = [FbgemmTBE]


class CustomOps:
    """The plan's entry point: the first registered rebuilder that handles an op name."""

    def __init__(self, seed: int = 0):
        self.seed = seed
        self._inst: dict[type, Any] = {}

    def _for(self, name: str):
        for cls in REBUILDERS:
            if cls.handles(name):
                if cls not in self._inst:
                    self._inst[cls] = cls(self.seed)
                return self._inst[cls]
        return None

    def handles(self, name: str) -> bool:
        return self._for(name) is not None

    def prepare(self, op_id: int, name: str, schema: str, ins: dict, outs: dict, device: str):
        return self._for(name).prepare(op_id, name, schema, ins, outs, device)

    def resident_bytes(self) -> int:
        """Bytes every rebuilt library module holds for the run (plan.Plan.resident_bytes)."""
        return sum(int(getattr(inst, "resident_bytes", lambda: 0)()) for inst in self._inst.values())
