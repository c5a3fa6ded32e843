"""Each op's output sizes computed on the `meta` device before the replay allocates anything.

Why: the memory bound (engine/replay/memory.py) trusts the trace's recorded output sizes, but an
op's real output size comes from its arguments: `arange(end=N)`, `eye(n)` from scalars,
`outer(a, b)` from its inputs' shapes. A trace that records small outputs for such an op (a
hand-edited or hostile ET) ran the op for real: peak RSS 1.93 GB against a bound of 509 MB,
growing to an OOM kill (issue 31). Here every resolved op is called once with meta tensors of
its inputs' recorded shapes, dtypes and strides (device arguments set to `meta`), which
allocates nothing; the bytes of its outputs that are new storage (views of inputs excluded)
are compared with the recorded outputs, and an op over them is skipped before the run, its
consumers with it; the budget check (engine/replay/memory.py) then works on sizes that hold. An op the meta device cannot run (no meta
kernel, data-dependent output shapes) keeps the recorded sizes.

torch's meta kernels for many ops are Python decompositions, whose first call imports
torch._dynamo and sympy (~1.8 s of CPU per process, benchmarks/results/suite_cpu.json). A
distributed launcher therefore computes `meta_sizes` once per recorded rank, beside the memory
budget it already plans (engine.replay.budget), and its ranks apply them (`skip_over_meta(...,
sizes)`) without calling a meta kernel. A single-process replay finds them in the parse cache
(`<cache dir>/meta-sizes/<key>.json`): the key is the sha256 of every checked op's call as the
meta device sees it (overload, argument values, each tensor's shape, strides, dtype and which
arguments share one), torch's version and META_VERSION, so a second replay of the same plan, in
any process and from any copy of the trace, calls no meta kernel; a different call is a
different key, and an unreadable or unwritable cache only means computing them again.
"""

from __future__ import annotations

import hashlib

import torch

from engine.replay.plan import OpStep, Plan
from engine.replay.reasons import SkipReason
from engine.replay.tensors import empty_like_rec

SLACK_BYTES = 1 << 20
"""Outputs may exceed the recorded ones by this much (or by the factor below) before refusal."""
FACTOR = 2.0
_META = torch.device("meta")
META_VERSION = "m1"
"""Part of the cache key of remembered sizes: bump when what `meta_output_bytes` counts changes."""


_DEVICE_ARGS: dict = {}


def _device_args(ov) -> tuple[frozenset[int], frozenset[str]]:
    """(positions, names) of the overload's Device arguments (read once per overload)."""
    got = _DEVICE_ARGS.get(ov)
    if got is None:
        args = [(i, a) for i, a in enumerate(ov._schema.arguments) if "Device" in str(a.type)]
        got = _DEVICE_ARGS[ov] = (frozenset(i for i, a in args if not a.kwarg_only), frozenset(a.name for _, a in args))
    return got


def _meta_call(st: OpStep, recs: dict):
    """(overload, args, kwargs, {slot: meta tensor}) of `st`'s call on the meta device; None when
    it has no overload or its inputs' records make no meta tensor."""
    ov = st.resolved.overload if st.resolved is not None else None
    if ov is None:
        return None
    try:
        tensors = {slot: empty_like_rec(recs[slot], "meta") for _, _, _, slot in st.fixups}
    except (KeyError, RuntimeError, ValueError, TypeError):
        return None
    a, kw = list(st.pos), dict(st.kw)
    for w, key, sub, slot in st.fixups:
        box = a if w == "p" else kw
        if sub is None:
            box[key] = tensors[slot]
        else:
            if not isinstance(box[key], list):
                box[key] = list(box[key])
            box[key][sub] = tensors[slot]
    dpos, dnames = _device_args(ov)
    for i in dpos:
        if i < len(a) and a[i] is not None:
            a[i] = _META
    for k in dnames & set(kw):
        if kw[k] is not None:
            kw[k] = _META
    if kw.get("pin_memory"):
        kw["pin_memory"] = False
    return ov, a, kw, tensors


def _describe(x, slot_of: dict[int, int]) -> object:
    """What the meta kernel sees of an argument, as plain values (a tensor: which input it is,
    shape, strides, offset, dtype, storage bytes)."""
    if isinstance(x, torch.Tensor):
        return ("T", slot_of.get(id(x)), tuple(x.shape), x.stride(), x.storage_offset(), str(x.dtype),
                x.untyped_storage().nbytes())  # fmt: skip
    if isinstance(x, (list, tuple)):
        return (type(x).__name__, *(_describe(v, slot_of) for v in x))
    if isinstance(x, dict):
        return ("D", *((k, _describe(v, slot_of)) for k, v in sorted(x.items())))
    return (type(x).__name__, repr(x))


def _call_key(call) -> str:
    ov, a, kw, tensors = call
    slot_of = {id(t): i for i, t in enumerate(tensors.values())}
    return repr((str(ov), _describe(a, slot_of), _describe(kw, slot_of)))


def meta_output_bytes(st: OpStep, recs: dict, call=None) -> int | None:
    """Bytes of new storage `st` allocates, computed on the meta device; None when unknown.
    `call`: its `_meta_call`, when already built."""
    call = call if call is not None else _meta_call(st, recs)
    if call is None:
        return None
    ov, a, kw, tensors = call
    try:
        res = ov(*a, **kw)
    except Exception:  # noqa: BLE001 -- no meta kernel, data-dependent shapes: the recorded sizes stand
        return None
    inputs = {t.untyped_storage()._cdata for t in tensors.values()}
    total = 0
    for t in res if isinstance(res, (list, tuple)) else (res,):
        if isinstance(t, torch.Tensor) and t.device.type == "meta" and t.untyped_storage()._cdata not in inputs:
            total += t.untyped_storage().nbytes()
    return total


def _checked(st: OpStep) -> bool:
    """An op the meta check covers: resolved to an overload, runnable, not a prepared call (a
    collective, a rebuilt FBGEMM op)."""
    return st.runnable and st.call is None and st.resolved is not None


def meta_sizes(plan: Plan) -> dict[int, int | None]:
    """Per checked op (resolved, runnable, not a collective), the bytes of new storage it
    allocates on the meta device; None where the meta device cannot tell. What a distributed
    launcher computes once per recorded rank (engine.replay.budget) and hands to its ranks."""
    recs = {e.slot: e.rec for e in plan.externals.values()}
    for st in plan.steps:
        for _, _, slot, rec in st.outs:
            recs[slot] = rec
    calls = {int(st.op_id): (st, _meta_call(st, recs)) for st in plan.steps if _checked(st)}
    keys = {op_id: _call_key(call) if call is not None else None for op_id, (_, call) in calls.items()}
    h = hashlib.sha256(f"{META_VERSION}|{torch.__version__}".encode())
    for op_id, key in keys.items():
        h.update(f"|{op_id}:{key}".encode())
    memo = _memo_path(h.hexdigest())
    known = _read_memo(memo, set(calls))
    if known is not None:
        return known
    # a step repeats a few calls (every layer, every parameter): each distinct call, as the key
    # describes it (overload, values, tensor geometry and sharing), runs on the meta device once
    by_key: dict[str, int | None] = {}
    sizes: dict[int, int | None] = {}
    for op_id, (st, call) in calls.items():
        key = keys[op_id]
        if key is not None and key not in by_key:
            by_key[key] = meta_output_bytes(st, recs, call)
        sizes[op_id] = by_key[key] if key is not None else None
    _write_memo(memo, sizes)
    return sizes


def _memo_path(key: str):
    from engine.trace.cache import cache_root

    return cache_root() / "meta-sizes" / f"{key[:40]}.json"


def _read_memo(path, op_ids: set[int]) -> dict[int, int | None] | None:
    from engine import jsonio

    try:
        d = jsonio.loads(path.read_bytes())
        sizes = {int(k): (None if v is None else int(v)) for k, v in d["sizes"].items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    return sizes if set(sizes) == op_ids else None


def _write_memo(path, sizes: dict[int, int | None]) -> None:
    from engine import jsonio
    from engine.errors import TraceError
    from engine.outdir import atomic_write

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, jsonio.dumps({"sizes": {str(k): v for k, v in sizes.items()}}))
    except (OSError, TraceError):
        pass  # a read-only or full cache: computed again next time


def skip_over_meta(plan: Plan, available: int, sizes: dict[int, int | None] | None = None) -> int:
    """Mark resolved ops whose meta-computed outputs exceed the recorded outputs (beyond FACTOR
    and SLACK_BYTES) as skipped; returns how many. Once the recorded sizes are known to hold,
    the budget (`available`) is applied by engine.replay.memory as before: eager, lazy, or
    skipping the ops that alone exceed it.

    `sizes`: `meta_sizes` of the same plan computed elsewhere (a distributed launcher, which
    imports what torch's Python meta kernels pull in, torch._dynamo and sympy, ~1.8 s of CPU,
    once instead of in every rank); an op it lacks is computed here."""
    if sizes is None or any(int(st.op_id) not in sizes for st in plan.steps if _checked(st)):
        sizes = {**meta_sizes(plan), **(sizes or {})}
    n = 0
    for st in plan.steps:
        if not _checked(st):
            continue
        got = sizes.get(int(st.op_id))
        if got is None:
            continue
        recorded = sum(rec.nbytes() for _, _, _, rec in st.outs)
        if got > max(FACTOR * recorded, recorded + SLACK_BYTES):
            st.reason = SkipReason.MEMORY_OVER_RECORD
            st.detail = (
                f"op {st.op_id} {st.name} would allocate {got / 2**20:,.1f} MiB (its arguments, on the meta "
                f"device) against {recorded / 2**20:,.1f} MiB recorded and {available / 2**20:,.0f} MiB available"
            )
            n += 1
    return n
