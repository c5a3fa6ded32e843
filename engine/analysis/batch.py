"""The model's batch and parameters, read from a captured ET (torch-free).

Why infer the batch from the trace: a captured ET does not say which tensor is "the batch".
The model's inputs are the forward ops' external tensors that are not parameters (parameters
and optimizer state are read by optimizer-phase ops); B is dim 0 of the first such tensor.
Batch scaling in compose (`engine.compose.transforms.scale`) and the simulator's batch what-if
(`engine.simulate.whatif.dims`) both ask it, so it lives below both.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from engine.errors import TraceError

if TYPE_CHECKING:
    from engine.trace.model import Trace


def _first_rank(trace: Trace):
    """(ops, tensors) of the trace's lowest rank: a multi-rank source composes its first rank,
    and node/storage ids repeat across ranks (one rank's tables keep every lookup unique)."""
    from engine.trace.ranks import of_rank, rank_ops

    ops = rank_ops(trace.ops)
    rank = int(ops["rank"].iloc[0]) if "rank" in ops.columns and len(ops) else None
    return ops, of_rank(trace.tensors, rank)


def param_storages(trace: Trace) -> set[int]:
    """Storages of parameters and optimizer state: read by optimizer-phase ops and first seen
    as an op *input* (never produced in the step). Storage ids are recycled, so the second
    condition keeps activations/gradients that reuse an id out."""
    ops, t = _first_rank(trace)
    opt_ids = ops.loc[ops["phase"].astype(str) == "optimizer", "id"].to_numpy(dtype=np.int64)
    if len(opt_ids) == 0 or len(t) == 0:
        return set()
    opt = set(t.loc[t["op_id"].isin(opt_ids), "storage_id"].astype(int).tolist())
    tt = t.sort_values(["op_id", "io"], kind="stable")  # "in" sorts before "out" within an op
    first = tt.drop_duplicates("storage_id")
    external = set(first.loc[first["io"].astype(str) == "in", "storage_id"].astype(int).tolist())
    return (opt & external) - {0}


_ET_TYPE = {"float32": "float", "bfloat16": "c10::BFloat16", "float16": "c10::Half", "float64": "double"}


def parameters(trace: Trace) -> list[tuple[int, int, str]]:
    """(numel, itemsize, ET dtype) of the model's parameters in first-use order: float tensors
    the forward reads from outside that the optimizer also touches."""
    from engine.graph import replay_ops

    params = param_storages(trace)
    ops, t = _first_rank(trace)
    fwd = set(ops.loc[ops["phase"].astype(str) == "forward", "id"].astype(int))
    ids = [i for i in replay_ops(trace) if i in fwd]
    tt = t[t["op_id"].isin(ids) & (t["io"].astype(str) == "in")].sort_values(["op_id", "arg", "sub"], kind="stable")
    seen: set = set()
    out = []
    for r in tt.itertuples(index=False):
        sid = int(r.storage_id)
        if sid in params and sid not in seen and str(r.dtype) in _ET_TYPE:
            seen.add(sid)
            out.append((int(r.numel), int(r.itemsize), _ET_TYPE[str(r.dtype)]))
    return out


def infer_batch(trace: Trace, path=None) -> int:
    """B: dim 0 of the first non-parameter external input of a forward op (module docstring)."""
    from engine.graph import replay_ops

    params = param_storages(trace)
    ops, t = _first_rank(trace)
    fwd = set(ops.loc[ops["phase"].astype(str) == "forward", "id"].astype(int))
    comm = set(ops.loc[ops["category"].astype(str) == "communication", "id"].astype(int))
    ids = [i for i in replay_ops(trace) if i in fwd and i not in comm] or replay_ops(trace)
    tt = t[t["op_id"].isin(ids)].sort_values(["op_id", "io", "arg", "sub"], kind="stable")
    # tensor-list arguments (DDP buffer broadcast, foreach optimizers) hold parameters/buffers
    lists = set(map(tuple, tt.loc[tt["sub"] > 0, ["op_id", "arg"]].to_numpy().tolist()))
    # a tensor the step writes in place (DDP's broadcast buffers, copied back with `copy_`) is
    # model state, not an input, even where it is read first (flatten_dense_tensors)
    names = ops.set_index("id")["name"].astype(str)
    inplace = {i for i in ids if names.get(i, "").split("::")[-1].split(".")[0].endswith("_")}
    written = {
        (int(r.tensor_id), int(r.storage_id))
        for r in tt.itertuples(index=False)
        if int(r.op_id) in inplace and int(r.arg) == 0 and str(r.io) == "in"
    }
    produced: set = set()
    fallback = None
    for r in tt.itertuples(index=False):
        key = (int(r.tensor_id), int(r.storage_id))
        if str(r.io) == "out":  # list outputs too: `split`'s pieces are activations, not inputs
            produced.add(key)
            continue
        if (int(r.op_id), int(r.arg)) in lists or key in written:
            continue
        if key in produced or int(r.storage_id) in params or int(r.storage_id) == 0 or not r.shape:
            continue
        if len(r.shape) >= 2:  # a model's first input is a batch of samples, not a flat buffer
            return int(r.shape[0])
        fallback = fallback if fallback is not None else int(r.shape[0])
    if fallback is not None:
        return fallback
    raise TraceError("cannot infer the batch size (no non-parameter input tensor); set 'batch_size' in the spec", path)


__all__ = ["infer_batch", "param_storages", "parameters"]
