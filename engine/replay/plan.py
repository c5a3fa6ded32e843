"""Replay plan: which ops run, how each is called, where every tensor comes from and when it dies.

Everything that can be decided before running is decided here, once, so the timed loop only
indexes lists: each `OpStep` holds its resolved `OpOverload`, argument templates with the
positions where tensors are patched in ("fix-ups"), the slots its outputs go to, and the slots
to drop after it ran (refcount by last use, so memory behaves like the original's allocator).

Tensor flow follows recorded tensor ids: an input whose id was produced by an earlier replayed
op reads that op's real output (in-place ops return the same tensor, views stay views, so
aliasing is the real one); any other input is *external* and synthesized (`tensors.py`).
Ops that cannot run are decided here too (unknown operator, collective, bad tensor record,
trace code) with a reason; their outputs become external inputs of their consumers.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from engine.replay.collectives import CollectiveCall, CollKind, collective_call
from engine.replay.dispatch import convert_scalar, is_collective, resolve
from engine.replay.placement import Placement
from engine.replay.reasons import SkipReason
from engine.replay.resolved import DispatchError, Resolved
from engine.replay.tensors import Constraint, External, TensorRec, index_constraints
from engine.trace.dtypes import dtype_of, split_list_type

TRACE_CODE_REASON = SkipReason.TRACE_CODE


@dataclass(slots=True)
class OpStep:
    index: int
    op_id: int
    name: str
    category: str
    phase: str
    k_ts_us: float = float("nan")
    k_dur_us: float = float("nan")
    reason: SkipReason | str = ""  # non-empty: skipped (not run)
    detail: str = ""
    resolved: Resolved | None = None
    call: Any = None  # a prepared closure (collectives, custom rebuilders) instead of `resolved`
    coll: CollectiveCall | None = None  # the recorded collective, for collective steps
    waits: list = field(default_factory=list)  # collective step indices whose async work completes first
    pos: list = field(default_factory=list)
    kw: dict = field(default_factory=dict)
    fixups: list = field(default_factory=list)  # (where "p"/"k", key, sub|None, slot)
    outs: list = field(default_factory=list)  # (result position, sub|None, slot, TensorRec)
    release: list = field(default_factory=list)  # slots dropped after this op
    in_slots: list = field(default_factory=list)
    stream: int | None = None
    wait_streams: list = field(default_factory=list)
    substituted: str = ""  # a prepared `call` that runs a stand-in (engine.replay.custom without its library)

    @property
    def substitution(self) -> str:
        """ "" or "recorded op -> what ran instead": a device substitution (dispatch, accel) or a
        library op's stand-in (custom); counted as "substituted" in the coverage."""
        return (self.resolved.substituted if self.resolved is not None else "") or self.substituted

    @property
    def runnable(self) -> bool:
        return not self.reason


@dataclass(slots=True)
class Plan:
    steps: list[OpStep]
    externals: dict[int, External]  # slot -> External
    n_slots: int
    produced_bytes: dict[int, int]  # slot -> bytes newly allocated by producing it
    warnings: list[str] = field(default_factory=list)
    # bytes held for the whole run outside the recorded tensor flow: library modules rebuilt by
    # custom rebuilders (FBGEMM TBE weights, optimizer state, batch) and collective buffers
    resident_bytes: int = 0
    placement: Placement | None = None
    """Where each recorded device's tensors and factory calls go (engine.replay.placement)."""


def _is_tensor_type(t: str) -> bool:
    return isinstance(t, str) and t.startswith("Tensor")


def _tensor_rec(value: Any, shape: Any, type_str: str, strides: Any) -> TensorRec | None:
    """TensorRec of one recorded tensor value; None for undefined tensors (nullptr)."""
    if not (isinstance(value, list) and len(value) >= 5):
        return None
    if "nullptr" in type_str or (len(value) > 3 and value[3] == 0 and value[1] == 0 and value[4] == 0):
        return None
    if not all(isinstance(v, int) for v in value[:5]):
        return None
    st = (
        tuple(int(s) for s in strides)
        if isinstance(strides, list) and all(isinstance(s, int) for s in strides)
        else None
    )
    shp = tuple(shape) if isinstance(shape, list) else ()
    return TensorRec(
        tensor_id=value[0],
        storage_id=value[1],
        offset=value[2],
        numel=value[3],
        itemsize=value[4],
        dtype=dtype_of(type_str),
        shape=shp,
        strides=st,
        device=value[5] if len(value) > 5 and isinstance(value[5], str) else "",
    )


def _iter_tensors(io: dict):
    """(arg, sub|None, TensorRec|None, type) for every tensor (or tensor-list element) of io."""
    values, shapes, types = io.get("values", []), io.get("shapes", []), io.get("types", [])
    strides = io.get("strides") or []
    for i, t in enumerate(types):
        v = values[i] if i < len(values) else None
        s = shapes[i] if i < len(shapes) else None
        st = strides[i] if i < len(strides) else None
        if _is_tensor_type(t):
            yield i, None, _tensor_rec(v, s, t, st), t
        elif isinstance(t, str) and t.startswith("GenericList[") and isinstance(v, list):
            el_types = split_list_type(t)
            for j, et in enumerate(el_types):
                if _is_tensor_type(et) and j < len(v):
                    sj = s[j] if isinstance(s, list) and j < len(s) else None
                    stj = st[j] if isinstance(st, list) and j < len(st) else None
                    yield i, j, _tensor_rec(v[j], sj, et, stj), et


def _empty_index_range(constraints: list, ins: dict) -> str | None:
    """An index argument with entries that must index an empty range ([0, 0)), or None.

    Why: no value is valid there, and ATen's CPU kernels do not all check: the
    `_embedding_bag_backward` of a shard with no rows (num_weights 0) wrote out of bounds and
    killed the replay with SIGSEGV (issue 31 item 18). Such an op is skipped with its reason."""
    recs = {(arg, sub): rec for arg, sub, rec, _t in _iter_tensors(ins) if rec is not None}
    for arg, sub, cons in constraints:
        rec = recs.get((arg, sub))
        if cons is not None and cons.high is not None and cons.high <= 0 and rec is not None:
            n = math.prod(int(x) for x in rec.shape)
            if n > 0:
                return f"argument {arg} holds {n} indices into a range of {cons.high} (no valid index)"
    return None


def _size_problem(res: Resolved, values: list, outs: dict) -> str | None:
    """A `size` list argument that contradicts the recorded output, or None.

    Why: factory/resize ops (aten::zeros, empty, new_empty, resize_, ...) allocate what their
    `size` argument says, not what the trace records for the output; a hand-edited or corrupt
    `size` would allocate memory the budget in memory.py never saw (an OOM kill on CPU)."""
    schema = getattr(res.overload, "_schema", None)
    for j, a in enumerate(schema.arguments if schema is not None else ()):
        if a.name != "size" or not str(a.type).startswith(("List[", "Optional[List[")):
            continue
        src = res.positional[j] if j < len(res.positional) else res.keywords.get(a.name)
        if not src or src[0] != "rec" or src[1] >= len(values):
            return None
        v = values[src[1]]
        if not (isinstance(v, list) and all(type(x) is int and x >= 0 for x in v)):
            return None  # symbolic / -1 (view-style) sizes: nothing to compare
        out = next((rec for arg, sub, rec, _ in _iter_tensors(outs) if arg == 0 and sub is None), None)
        n = math.prod(v)
        if out is not None and out.numel >= 0 and n != out.numel:
            return f"size argument {v} has {n} elements but the output records numel {out.numel}"
        return None
    return None


def _trace_code_ops(ops: pd.DataFrame, replay_ids: set[int]) -> list[int]:
    """Ops that run code shipped in the trace (PT2 Triton kernels), outside replayed ops."""
    attrs = ops["attrs"].astype(str)
    mask = (
        attrs.str.contains(r'"kernel_file"\s*:\s*"[^"]+', regex=True)
        | attrs.str.contains(r'"kernel_backend"\s*:\s*"triton', regex=True)
        | ops["name"].astype(str).str.startswith("triton_")
    )
    cand = ops.loc[mask, "id"].astype(int).tolist()
    if not cand:
        return []
    parent = dict(zip(ops["id"].astype(int), ops["parent"].astype(int)))
    out = []
    for i in cand:
        p, ok = parent.get(i, -1), True
        while p >= 0 and p in parent:
            if p in replay_ids:
                ok = False
                break
            p = parent[p] if parent[p] != p else -1
        if ok:
            out.append(i)
    return out


def build_plan(
    ops: pd.DataFrame,
    replay_ids: list[int],
    *,
    device: str,
    allow_trace_code: bool,
    progress=None,
    collectives=None,
    custom=None,
) -> Plan:
    """The replay plan for `replay_ids` (ET node ids of one rank) on `device`.

    `collectives`: a `CollectiveBackend` (default: skip them, single-process replay).
    `custom`: a `CustomOps` (engine.replay.custom) rebuilding library ops such as FBGEMM's TBE.

    Each op, in id order, is one step (`_plan_op`): code shipped in the trace is skipped, a
    collective goes to the backend, a library op to `custom`, anything else is resolved against
    the live op registry, its tensor records are checked, its inputs bound to the slots that
    produced them (or to new externals), its recorded values turned into call templates and its
    outputs given new slots."""
    if collectives is None:
        from engine.replay.comm_backend import SkipCollectives

        collectives = SkipCollectives()
    ids = {int(i) for i in replay_ids}
    code_ids = _trace_code_ops(ops, ids)
    ids.update(code_ids)
    sel = ops[ops["id"].isin(ids)].sort_values("id", kind="stable")
    ctx = _PlanContext(
        device=device,
        placement=Placement.for_trace(device, _recorded_devices(ops)),  # the whole rank: where the job ran
        allow_trace_code=allow_trace_code,
        collectives=collectives,
        custom=custom,
        child_attrs=param_comms_by_parent(ops),
        code_ids=set(code_ids),
    )
    steps: list[OpStep] = []
    cols = ["id", "name", "category", "phase", "schema", "inputs", "outputs", "k_ts_us", "k_dur_us", "attrs"]
    rows = sel[[c for c in cols if c in sel.columns]].itertuples(index=False)
    total = max(len(sel), 1)
    for k, r in enumerate(rows):
        st = OpStep(
            index=k,
            op_id=int(r.id),
            name=str(r.name),
            category=str(r.category),
            phase=str(r.phase),
            k_ts_us=float(getattr(r, "k_ts_us", np.nan)),
            k_dur_us=float(getattr(r, "k_dur_us", np.nan)),
        )
        steps.append(st)
        if progress is not None and k % 500 == 0:
            progress(k / total, f"planning op {k}/{total}")
        _plan_op(st, r, ctx)
    lifetimes(steps, ctx.externals)
    _async_waits(steps, sel, ctx.externals, ctx.slot_rec)
    resident = custom.resident_bytes() if custom is not None else 0
    resident += sum(_coll_bytes(st.coll) for st in steps if st.coll is not None and st.runnable)
    return Plan(
        steps=steps,
        externals=ctx.externals,
        n_slots=ctx.n_slots,
        produced_bytes=ctx.produced_bytes,
        resident_bytes=resident,
        placement=ctx.placement,
    )


_TENSOR_DEVICE = re.compile(r'\[\s*-?\d+\s*,\s*-?\d+\s*,\s*-?\d+\s*,\s*-?\d+\s*,\s*-?\d+\s*,\s*"([^"]*)"\s*\]')
"""A six-element tensor record's device, in an op's raw inputs/outputs JSON."""


def _recorded_devices(ops: pd.DataFrame):
    """The devices of the tensors `ops` record, in op order (a generator, read lazily: the raw
    JSON is searched, not parsed)."""
    for col in ("inputs", "outputs"):
        if col in ops.columns:
            for io in ops[col]:
                if isinstance(io, str):
                    for m in _TENSOR_DEVICE.finditer(io):
                        yield m.group(1)


@dataclass(kw_only=True, slots=True)
class _PlanContext:
    """What planning carries from op to op: the settings, and the slots handed out so far."""

    device: str
    placement: Placement
    allow_trace_code: bool
    collectives: Any
    custom: Any
    child_attrs: dict
    code_ids: set[int]
    externals: dict[int, External] = field(default_factory=dict)
    ext_by_tid: dict[tuple, int] = field(default_factory=dict)
    produced: dict[tuple, int] = field(default_factory=dict)  # (tensor_id, storage_id) -> slot (latest producer)
    slot_rec: dict[int, TensorRec] = field(default_factory=dict)
    produced_bytes: dict[int, int] = field(default_factory=dict)
    n_slots: int = 0

    def new_output(self, rec: TensorRec, nbytes: int) -> int:
        """A new slot for an op's output `rec` (its latest producer from now on)."""
        slot = self.n_slots
        self.n_slots += 1
        self.produced[(rec.tensor_id, rec.storage_id)] = slot
        self.slot_rec[slot] = rec
        self.produced_bytes[slot] = nbytes
        return slot


def _plan_op(st: OpStep, r: Any, ctx: _PlanContext) -> None:
    """Plan one op (build_plan's docstring); a skipped op gets its `reason` and `detail`."""
    name = st.name
    if st.op_id in ctx.code_ids:
        st.reason = TRACE_CODE_REASON if not ctx.allow_trace_code else SkipReason.TRACE_CODE_UNSUPPORTED
        st.detail = f"op {st.op_id} {name} runs code shipped in the trace"
        return
    try:
        ins = json.loads(r.inputs) if isinstance(r.inputs, str) and r.inputs else {}
        outs = json.loads(r.outputs) if isinstance(r.outputs, str) and r.outputs else {}
    except ValueError as e:
        st.reason, st.detail = SkipReason.UNREADABLE_RECORD, str(e)
        return
    if is_collective(name):
        _plan_collective(st, r, ins, outs, ctx)
        return
    if ctx.custom is not None and ctx.custom.handles(name):
        _plan_custom(st, r, ins, outs, ctx)
        return
    types = list(ins.get("types", []))
    values = list(ins.get("values", []))
    try:
        res = resolve(name, str(r.schema or ""), types, ctx.device, allow_trace_code=ctx.allow_trace_code)
    except DispatchError as e:
        st.reason, st.detail = e.reason, f"op {st.op_id}: {e}"
        return
    if _bad_records(st, ins, outs):  # validate tensor records before touching any state
        return
    size_problem = _size_problem(res, values, outs)
    if size_problem:
        st.reason = SkipReason.BAD_NUMEL
        st.detail = f"op {st.op_id} {name}: {size_problem}"
        return
    constraints = index_constraints(name, values, list(ins.get("shapes", [])))
    empty = _empty_index_range(constraints, ins)
    if empty:
        st.reason = SkipReason.EMPTY_INDEX_RANGE
        st.detail = f"op {st.op_id} {name}: {empty}"
        return
    st.resolved = res
    fix_rec = _bind_inputs(st, ins, ctx)
    _constrain_indices(constraints, fix_rec, ctx.externals)
    _fill_templates(st, res, types, values, fix_rec, ctx.placement)
    _bind_outputs(st, res, outs, ctx)


def _plan_collective(st: OpStep, r: Any, ins: dict, outs: dict, ctx: _PlanContext) -> None:
    row = {"id": st.op_id, "name": st.name, "schema": getattr(r, "schema", ""), "inputs": ins, "outputs": outs}
    row["attrs"] = getattr(r, "attrs", None)
    call = collective_call(row, ctx.child_attrs.get(st.op_id))
    if call is None:
        st.reason, st.detail = (
            SkipReason.COLLECTIVE_UNSUPPORTED,
            f"op {st.op_id} {st.name}: not a modelled collective",
        )
        return
    st.coll = call
    try:
        st.call = ctx.collectives.prepare(call, st.index)
    except DispatchError as e:
        st.reason, st.detail = e.reason, str(e)


def _plan_custom(st: OpStep, r: Any, ins: dict, outs: dict, ctx: _PlanContext) -> None:
    """A self-contained rebuild (its own realistic inputs); returns the recorded outputs."""
    try:
        st.call = ctx.custom.prepare(st.op_id, st.name, getattr(r, "schema", ""), ins, outs, ctx.device)
    except DispatchError as e:
        st.reason, st.detail = e.reason, str(e)
        return
    st.substituted = str(getattr(st.call, "substituted", ""))
    for arg, sub, rec, _t in _iter_tensors(outs):
        if rec is None or rec.check():
            continue
        st.outs.append((arg, sub, ctx.n_slots, rec))
        ctx.new_output(rec, rec.nbytes())


def _bad_records(st: OpStep, ins: dict, outs: dict) -> bool:
    """True (and the step skipped with its reason) when a tensor record cannot be rebuilt."""
    bad = None
    for io_name, io in (("input", ins), ("output", outs)):
        for arg, sub, rec, t in _iter_tensors(io):
            if rec is None:
                if "nullptr" in t or t == "Tensor":
                    continue
                problem = f"unreadable tensor value {io.get('values', [None])[arg]!r}"[:120]
            else:
                problem = rec.check()
                if problem and not rec.dtype:
                    problem = f"unknown dtype name {t!r}"
            if problem:
                where = f"{io_name} {arg}" + (f"[{sub}]" if sub is not None else "")
                bad = (problem, where)
                break
        if bad:
            break
    if not bad:
        return False
    problem, where = bad
    st.reason = (
        SkipReason.BAD_DTYPE
        if "dtype" in problem
        else SkipReason.BAD_NUMEL
        if "numel" in problem
        else SkipReason.BAD_TENSOR
    )
    st.detail = f"op {st.op_id} {st.name}: {where}: {problem}"
    return True


def _bind_inputs(st: OpStep, ins: dict, ctx: _PlanContext) -> dict[int, list]:
    """Each input tensor's slot: its producer's, an external's already seen, or a new external;
    returns arg -> [(sub, slot)], the fix-ups of the call templates."""
    k = st.index
    fix_rec: dict[int, list] = {}
    for arg, sub, rec, _t in _iter_tensors(ins):
        if rec is None:
            continue
        # tensor ids (and storage ids) are recycled once a tensor dies: match on the full
        # identity and require the recorded shape/dtype to agree with the producer's
        tid = (rec.tensor_id, rec.storage_id)
        prev = ctx.produced.get(tid)
        if prev is not None and (ctx.slot_rec[prev].shape != rec.shape or ctx.slot_rec[prev].dtype != rec.dtype):
            prev = None
        tid_e = (rec.tensor_id, rec.storage_id, rec.offset, rec.shape, rec.dtype)
        if prev is not None:
            slot = prev
        elif tid_e in ctx.ext_by_tid:
            slot = ctx.ext_by_tid[tid_e]
            ctx.externals[slot].last_use = k
        else:
            slot = ctx.n_slots
            ctx.n_slots += 1
            ctx.ext_by_tid[tid_e] = slot
            ctx.externals[slot] = External(slot=slot, rec=rec, first_use=k, last_use=k)
        fix_rec.setdefault(arg, []).append((sub, slot))
        st.in_slots.append(slot)
    return fix_rec


def _constrain_indices(constraints: list, fix_rec: dict[int, list], externals: dict[int, External]) -> None:
    """Index arguments of an external input get the value range the op needs (realistic indices)."""
    for arg, sub, cons in constraints:
        for s2, slot in fix_rec.get(arg, []):
            if s2 == sub and slot in externals and cons is not None:
                ext = externals[slot]
                if ext.constraint is None:
                    ext.constraint = Constraint()
                ext.constraint.merge(cons)


def _fill_templates(
    st: OpStep, res: Resolved, types: list, values: list, fix_rec: dict[int, list], placement: Placement
) -> None:
    """The call's positional and keyword templates: recorded values converted, tensors as fix-ups."""
    rec_val: dict[int, Any] = {}
    for i, t in enumerate(types):
        v = values[i] if i < len(values) else None
        if _is_tensor_type(t):
            rec_val[i] = None
        elif isinstance(v, list) and i in fix_rec:
            rec_val[i] = [None if (isinstance(x, str) and x == "<None>") or isinstance(x, list) else x for x in v]
        else:
            rec_val[i] = convert_scalar(
                v, t, res.arg_types.get(i), placement.of(v) if t == "Device" else placement.target
            )
    for p, (kind, x) in enumerate(res.positional):
        if kind == "rec":
            st.pos.append(_copy(rec_val.get(x)))
            for sub, slot in fix_rec.get(x, []):
                st.fixups.append(("p", p, sub, slot))
        else:
            st.pos.append(x)
    for key, (kind, x) in res.keywords.items():
        if kind == "rec":
            st.kw[key] = _copy(rec_val.get(x))
            for sub, slot in fix_rec.get(x, []):
                st.fixups.append(("k", key, sub, slot))
        else:
            st.kw[key] = x


def _bind_outputs(st: OpStep, res: Resolved, outs: dict, ctx: _PlanContext) -> None:
    """A new slot per output tensor; an output that shares an input's storage (a view, an
    in-place op) adds no bytes."""
    in_storages = {ctx.slot_rec[s].storage_id for s in st.in_slots if s in ctx.slot_rec}
    in_storages |= {ctx.externals[s].rec.storage_id for s in st.in_slots if s in ctx.externals}
    out_map = res.out_map
    for arg, sub, rec, _t in _iter_tensors(outs):
        if rec is None:
            continue
        pos = out_map[arg] if out_map is not None and arg < len(out_map) else arg
        st.outs.append((pos, sub, ctx.n_slots, rec))
        ctx.new_output(rec, 0 if rec.storage_id in in_storages else rec.nbytes())


def _coll_bytes(call: CollectiveCall) -> int:
    """Buffers a collective backend allocates for one call at plan time (comm_backend: its
    recorded inputs and outputs; all_to_all/gather take up to world x the input, bounded here by
    the recorded outputs, which hold what arrives)."""
    try:
        return sum(b.nbytes() for b in call.inputs) + sum(b.nbytes() for b in call.outputs)
    except (TypeError, ValueError, OverflowError):
        return 0


def param_comms_by_parent(ops: pd.DataFrame) -> dict[int, dict]:
    """{c10d op id: attrs of its record_param_comms child (+ `seq`)}: NCCL-era traces put the
    process group, split sizes and sequence number there."""
    if "attrs" not in ops.columns or len(ops) == 0:
        return {}
    sub = ops[ops["name"].astype(str) == "record_param_comms"]
    out: dict[int, dict] = {}
    for pid, attrs, ins in zip(sub["parent"].astype(int), sub["attrs"], sub["inputs"]):
        try:
            a = json.loads(attrs) if isinstance(attrs, str) and attrs else {}
            v = json.loads(ins).get("values", []) if isinstance(ins, str) and ins else []
        except ValueError:
            continue
        if not isinstance(a, dict):
            continue
        seq = next((x for x in v[:2] if isinstance(x, int) and not isinstance(x, bool)), None)
        if seq is not None:
            a = {**a, "seq": seq}
        out.setdefault(int(pid), a)
    return out


def _async_waits(steps: list[OpStep], sel: pd.DataFrame, externals: dict, slot_rec: dict) -> None:
    """Where the trace waits on async collective work: an explicit `wait` record, else the first
    later op that reads one of the collective's tensors (what the original's Work.wait() guarded),
    else the end of the iteration (the backend drains)."""
    storages: dict[int, int] = {s: e.rec.storage_id for s, e in externals.items()}
    storages.update({s: r.storage_id for s, r in slot_rec.items()})
    pending: dict[int, set] = {}
    if "inputs" not in sel.columns:
        return
    ins_by_id = dict(zip(sel["id"].astype(int), sel["inputs"]))
    for st in steps:
        if st.call is not None and st.coll is not None and st.coll.async_op and st.coll.kind != CollKind.WAIT:
            try:
                io = json.loads(ins_by_id.get(st.op_id) or "{}")
            except ValueError:
                io = {}
            sids = {rec.storage_id for _, _, rec, _ in _iter_tensors(io) if rec is not None}
            if sids:
                pending[st.index] = sids
            continue
        if not pending or not st.runnable:
            continue
        mine = {storages.get(s) for s in st.in_slots}
        for c in [c for c, sids in pending.items() if sids & mine]:
            st.waits.append(c)
            del pending[c]


def _copy(v):
    return list(v) if isinstance(v, list) else v


def lifetimes(steps: list[OpStep], externals: dict[int, External]) -> None:
    """Release each produced slot after its last reader (or right after its producer)."""
    last: dict[int, int] = {}
    for st in steps:
        if not st.runnable:
            continue
        for _, _, slot, _ in st.outs:
            last[slot] = st.index
        for slot in st.in_slots:
            if slot not in externals:
                last[slot] = st.index
    by_step: dict[int, list[int]] = {}
    for slot, k in last.items():
        by_step.setdefault(k, []).append(slot)
    for st in steps:
        st.release = by_step.get(st.index, [])
