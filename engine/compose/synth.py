"""Kineto-only traces -> a replayable execution trace (ET), synthesized from their `cpu_op`s.

Why: most real traces have no ET (TraceLens, HTA, TensorBoard users' files), and compose and
replay need one. A trace recorded with `record_shapes=True` carries, per `cpu_op`, "Input Dims",
"Input type", "Input Strides" and (PyTorch >= 2.1) "Concrete Inputs": enough to rebuild the call.

Rules, per host event (`cpu_op`, and `user_annotation` as labels; python_function is not a node):
* parent: the innermost host event enclosing it in time on the same pid/tid (host nesting);
  node ids follow start time, so the replayer's id order is the recorded order;
* a name that is no dispatcher operator (`namespace::op`: autograd wrappers, ProfilerStep#N,
  nn.Module labels) becomes a label node without arguments, as the real ET records it;
* an operator gets its overload picked by the recorded argument kinds (`dispatch._by_kinds`, the
  live torch registry) and that overload's schema as `op_schema`; tensors become
  `[tensor_id, storage_id, 0, numel, itemsize, device]` with the recorded shape, dtype and
  strides; scalars, lists and strings come from "Concrete Inputs". A scalar the trace does not
  give (no "Concrete Inputs" before PyTorch 2.1) takes the schema default, else a neutral value
  (1, 1.0, False), and the node lists it under `guessed`; a Stream is the replay's own, a
  torch class (ProcessGroup, ReduceOp) the "<Object>" a real ET records, a closed-set string
  (reduce_op) a neutral member (guessed); a size list the trace does not give is inferred from
  the call tree (synth_infer.py) or, for a view, from the op that reads it, else the view keeps
  its input's geometry (synth_views.py, guessed); any other list it does not give skips;
* an operator that cannot be synthesized (no "Input Dims", a name the dispatcher does not know,
  a library not installed, arguments no overload accepts, an unknown list) stays in the tree as
  a node without arguments (its children still replay) and is listed by reason (`SynthReport`);
* data dependencies (synth_flow.py): the replayed-level ops' outputs are computed on meta
  tensors, and an op reads an output of the previous replayed-level op on its thread when
  shape, dtype and strides are equal; every other tensor is a fresh input (a tensor not known
  to be produced by an earlier op is an external input, synthesized at replay);
* provenance: every node carries `mystique_kineto` {"ev", "ts_us", "dur_us", "rf_id",
  "external_id"} (ev = the event's row in the loaded events table), and `rf_id` is the event's
  "Record function id" (its "External id" where the file's record-function ids are all one
  value, as in TraceLens files), so the loader links each node to its event
  and, through `correlation`, the GPU kernels it launched (gpu_dur_us).

Refused in one line naming the file: GPU activity only (no cpu_op), no shapes recorded, the 2021
profiler's dims without types (dtypes and scalars unknown).
"""

from __future__ import annotations

import ast
import functools
import gzip
import hashlib
import math
from collections import Counter
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

from engine import jsonio
from engine.errors import TraceError
from engine.trace.categories import OP_NAME
from engine.trace.dtypes import dtype_of, itemsize_of
from engine.trace.vocab import LEGACY_CATS

SYNTH_VERSION = "s6"
PROVENANCE_KEY = "mystique_kineto"
_HOST_CATS = ("cpu_op", "user_annotation")
_NON_TENSOR = frozenset(("", "Scalar", "ScalarList", "TensorList", "GenericList", "None"))
_TOL_US = 1e-3  # float rounding of ts + dur in the file
_NO_TENSORS = "a tensor list whose tensors are not recorded"


class SynthSkip(str, Enum):
    """Why a cpu_op did not become a replayable node."""

    NO_SHAPES = "no input dims recorded"
    UNKNOWN_OPERATOR = "unknown operator"
    LIBRARY_NOT_LOADED = "operator library not installed"
    NO_MATCHING_OVERLOAD = "recorded arguments fit no overload"
    UNKNOWN_VALUE = "a list argument's value is not recorded"

    def __str__(self) -> str:
        return self.value


@dataclass(kw_only=True, slots=True)
class SynthReport:
    """What the synthesis made of one Kineto file."""

    path: str
    cpu_ops: int = 0  # cpu_op events in the file (the 2021 `Operator` category included)
    op_nodes: int = 0  # operators synthesized with their arguments
    label_nodes: int = 0  # cpu_ops that are labels (autograd wrappers, step/module names)
    annotations: int = 0  # user_annotation events, also labels (not counted in cpu_ops)
    guessed_values: int = 0  # scalars the trace did not give (schema default or neutral value)
    inferred_values: int = 0  # size lists it did not give, inferred from the call tree (synth_infer.py)
    flow: dict = field(default_factory=dict)  # synth_flow.infer_flow's counts (links, outputs, no_meta)
    skipped: dict[str, int] = field(default_factory=dict)  # reason -> count
    skipped_ops: list[dict] = field(default_factory=list)  # first 50: {name, reason, detail}
    et_path: str = ""

    @property
    def synthesized(self) -> int:
        return self.op_nodes + self.label_nodes

    @property
    def rate(self) -> float:
        return self.synthesized / self.cpu_ops if self.cpu_ops else 0.0

    def skip(self, name: str, reason: SynthSkip, detail: str) -> None:
        self.skipped[str(reason)] = self.skipped.get(str(reason), 0) + 1
        if len(self.skipped_ops) < 50:
            self.skipped_ops.append({"name": name, "reason": str(reason), "detail": detail})

    def to_dict(self) -> dict:
        return {
            "path": self.path,
            "et_path": self.et_path,
            "cpu_ops": self.cpu_ops,
            "synthesized": self.synthesized,
            "op_nodes": self.op_nodes,
            "label_nodes": self.label_nodes,
            "annotations": self.annotations,
            "guessed_values": self.guessed_values,
            "inferred_values": self.inferred_values,
            "flow": dict(self.flow),
            "rate": round(self.rate, 6),
            "skipped": dict(self.skipped),
            "skipped_ops": list(self.skipped_ops),
        }

    @classmethod
    def from_dict(cls, d: dict) -> SynthReport:
        keys = (
            "path",
            "et_path",
            "cpu_ops",
            "op_nodes",
            "label_nodes",
            "annotations",
            "guessed_values",
            "inferred_values",
        )
        rep = cls(**{k: d[k] for k in keys if k in d})
        rep.flow = dict(d.get("flow") or {})
        rep.skipped = dict(d.get("skipped") or {})
        rep.skipped_ops = list(d.get("skipped_ops") or [])
        return rep

    def line(self) -> str:
        skipped = ", ".join(f"{n} {r}" for r, n in sorted(self.skipped.items(), key=lambda kv: -kv[1])) or "none"
        return (
            f"Kineto-only trace: synthesized an execution trace from {self.synthesized} of {self.cpu_ops} "
            f"cpu_ops ({self.rate:.1%}); skipped: {skipped}"
        )


def _events(doc: Any, path: str) -> list:
    evs = doc.get("traceEvents") if isinstance(doc, dict) else doc
    if not isinstance(evs, list):
        raise TraceError("not a Kineto trace (no traceEvents)", path)
    return evs


def _dims(args: dict):
    d = args.get("Input Dims")
    return args.get("Input dims") if d is None else d


def check_synthesizable(evs: list, path: str) -> None:
    """One-line TraceError naming the file when no ET can be synthesized from these events."""
    cpu = [e for e in evs if type(e) is dict and e.get("ph") == "X" and _cat(e) == "cpu_op"]
    if not cpu:
        raise TraceError("Kineto trace has no cpu_op events (GPU activity only): no ET can be synthesized", path)
    shaped = [e for e in cpu if isinstance(e.get("args"), dict) and isinstance(_dims(e["args"]), list)]
    if not shaped:
        raise TraceError(
            "Kineto trace was recorded without shapes (no cpu_op has 'Input Dims'; record_shapes=False): "
            "no ET can be synthesized",
            path,
        )
    if not any(e["args"].get("Input type") for e in shaped):
        raise TraceError(
            "Kineto trace records input dims but no input types (2021 profiler): dtypes and scalar values "
            "are unknown, no ET can be synthesized",
            path,
        )


def _cat(e: dict) -> str:
    c = e.get("cat", "")
    return LEGACY_CATS.get(c, c) if isinstance(c, str) else ""


# ------------------------------------------------------------------------------ arguments
def _scalar(text: str) -> tuple[str, Any]:
    """ET (type, value) of one concrete scalar's text."""
    if text in ("True", "False"):
        return "Bool", text == "True"
    try:
        return "Int", int(text)
    except ValueError:
        pass
    try:
        v = float(text)
    except ValueError:
        return "String", text
    return "Double", (v if math.isfinite(v) else (1e30 if v > 0 else -1e30) if not math.isnan(v) else 0.0)


def _scalar_list(text: str) -> tuple[str, list] | None:
    try:
        v = ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None
    if not isinstance(v, (list, tuple)):
        return None
    kinds = []
    for x in v:
        if isinstance(x, bool):
            kinds.append("Bool")
        elif isinstance(x, int):
            kinds.append("Int")
        elif isinstance(x, float):
            kinds.append("Double")
        else:
            return None
    return f"GenericList[{','.join(kinds)}]", list(v)


def _is_device(text: str) -> bool:
    return text in ("cpu", "cuda", "meta") or text.startswith(("cuda:", "xpu", "hip", "mps"))


@dataclass(slots=True)
class _Ctx:
    """Per-file synthesis state: tensor ids, the device, the default dtype, match cache."""

    device: str
    default_type: str
    next_id: int = 1000
    matches: dict = field(default_factory=dict)

    def fresh(self) -> int:
        self.next_id += 1
        return self.next_id


def _tensor(ctx: _Ctx, ctype: str, shape: Any, strides: Any) -> tuple[list, str, list, list]:
    shape = list(shape) if isinstance(shape, list) and all(type(x) is int for x in shape) else []
    st = list(strides) if isinstance(strides, list) and all(type(x) is int for x in strides) else []
    if len(st) != len(shape):
        st = []
    dt = dtype_of(f"Tensor({ctype})") or "float32"
    numel = math.prod(shape) if shape else 1
    tid = ctx.fresh()
    return [tid, ctx.fresh(), 0, numel, itemsize_of(dt), ctx.device], f"Tensor({ctype})", shape, st


def _args(ctx: _Ctx, args: dict) -> tuple[list, list, list, list, list[int], str | None]:
    """(values, types, shapes, strides, indices of unknown scalars, problem) of a cpu_op's inputs."""
    dims = _dims(args) or []
    types = args.get("Input type") or []
    strides = args.get("Input Strides") or []
    conc = args.get("Concrete Inputs")
    n = max(len(dims), len(types))
    vals: list = []
    v: Any
    ets: list = []
    shapes: list = []
    sts: list = []
    unknown: list[int] = []
    tensor_types = [t for t in types if isinstance(t, str) and t not in _NON_TENSOR]
    list_type = tensor_types[0] if tensor_types else ctx.default_type
    for i in range(n):
        t = types[i] if i < len(types) and isinstance(types[i], str) else ""
        d = dims[i] if i < len(dims) else []
        s = strides[i] if i < len(strides) else []
        c = conc[i] if isinstance(conc, list) and i < len(conc) and isinstance(conc[i], str) else None
        if t not in _NON_TENSOR:
            v, et, sh, st = _tensor(ctx, t, d, s)
        elif t == "TensorList":
            if not isinstance(d, list) or not all(isinstance(x, list) for x in d):
                return [], [], [], [], [], "a tensor list without element shapes"
            if not d:  # the 2022 profiler wrote [] for every list: its tensors are not recorded
                return [], [], [], [], [], _NO_TENSORS
            parts = [
                _tensor(ctx, list_type, x, s[j] if isinstance(s, list) and j < len(s) else []) for j, x in enumerate(d)
            ]
            v = [p[0] for p in parts]
            et = f"GenericList[{','.join(p[1] for p in parts)}]"
            sh, st = [p[2] for p in parts], [p[3] for p in parts]
        elif t == "ScalarList":
            parsed = _scalar_list(c) if c else None
            if parsed is None:
                et, v, sh, st = "GenericList[]", None, [], []
                unknown.append(i)
            else:
                et, v = parsed
                sh, st = [[] for _ in v], [[] for _ in v]
        elif t == "Scalar":
            if c:
                et, v = _scalar(c)
            else:
                et, v = "Int", 1
                unknown.append(i)
            sh, st = [], []
        elif c:  # "" with a value: a string or a device
            et, v, sh, st = ("Device" if _is_device(c) else "String"), c, [], []
        elif conc is None:  # before PyTorch 2.1: "" is None or any value not recorded (a list)
            et, v, sh, st = "?", None, [], []
            unknown.append(i)
        else:
            et, v, sh, st = "None", "<None>", [], []
        vals.append(v)
        ets.append(et)
        shapes.append(sh)
        sts.append(st)
    return vals, ets, shapes, sts, unknown, None


_NEUTRAL = {"bool": False, "int": 1, "SymInt": 1, "float": 1.0, "Scalar": 1, "number": 1, "ScalarType": 6, "Layout": 0}
# str arguments with a closed set of values and no default: a neutral member (a collective's
# reduction; its process group is the default one, as a device argument is the replay's own)
_STR_NEUTRAL = {"reduce_op": "sum", "red_op": "sum", "group_name": "0"}
# per operator, where the neutral value makes the call a no-op nobody writes: transpose's
# unrecorded dims are the last two (t(), mT, attention's k.transpose(-2, -1))
_NEUTRAL_BY_OP = {("aten::transpose", "dim0"): -2, ("aten::transpose", "dim1"): -1}


def _scalar_value(d) -> tuple[Any, str] | None:
    """A schema default as an ET value and its type (Bool, Int, Double, String); None for any
    other kind of default."""
    if isinstance(d, bool):  # before int: a bool is an int
        return d, "Bool"
    if isinstance(d, int):
        return d, "Int"
    if isinstance(d, float):
        return d, "Double"
    if isinstance(d, str):
        return d, "String"
    return None


def _fill_unknown(schema, vals: list, ets: list, unknown: list[int], device: str = "cpu") -> str | None:
    """Values for arguments the trace did not give: the schema default, else a neutral value
    (scalars only; a device: the trace's own, `device`); a problem text when a list has neither."""
    args = schema.arguments
    for i in unknown:
        a = args[i] if i < len(args) else None
        by_op = _NEUTRAL_BY_OP.get((f"{schema.name}", a.name)) if a is not None else None
        if by_op is None and a is not None and a.name == "dim" and str(a.type) in ("int", "SymInt"):
            by_op = -1  # a dimension: the last one exists on every tensor with one (1 does not on 1-D)
        if by_op is not None:
            vals[i], ets[i] = by_op, "Int"
            continue
        if a is not None and a.has_default_value():
            d = a.default_value
            if d is None and ets[i] == "Int" and str(a.type) in ("Optional[number]", "Optional[Scalar]"):
                continue  # a Scalar was recorded as passed (its value not): the neutral 1, not None
            if d is None:
                vals[i], ets[i] = "<None>", "None"
            elif (scalar := _scalar_value(d)) is not None:
                vals[i], ets[i] = scalar
            elif isinstance(d, (list, tuple)) and all(type(x) is int for x in d):
                vals[i], ets[i] = list(d), f"GenericList[{','.join('Int' for _ in d)}]"
            else:
                vals[i], ets[i] = 1, "Int"
            continue
        full = str(getattr(a, "type", "int")) if a is not None else "int"
        if ets[i] == "?" and full.startswith("Optional["):
            vals[i], ets[i] = "<None>", "None"
            continue
        if ets[i].startswith("GenericList") or (ets[i] == "?" and "List" in full) or "Tensor" in full:
            return f"argument '{a.name if a is not None else i}' ({full}) is not recorded"
        st = full.replace("Optional[", "").rstrip("]")
        if st == "Device":  # the trace's device: a GPU job's replay keeps only recorded "cpu" on the host
            vals[i], ets[i] = device, "Device"
            continue
        if st == "Stream":  # the replay binds its own current stream (engine/replay/accel.py)
            vals[i], ets[i] = 0, "Int"
            continue
        if st.startswith("__torch__.torch.classes."):  # ProcessGroup, ReduceOp: a real ET records "<Object>"
            vals[i], ets[i] = "<Object>", "Object"
            continue
        if st == "str" and a is not None and a.name in _STR_NEUTRAL:
            vals[i], ets[i] = _STR_NEUTRAL[a.name], "String"
            continue
        if st not in _NEUTRAL:
            return f"argument '{a.name if a is not None else i}' ({full}) is not recorded"
        v = _NEUTRAL[st]
        vals[i], ets[i] = v, ("Bool" if isinstance(v, bool) else "Double" if isinstance(v, float) else "Int")
    return None


def _fits(ets: list[str], schema) -> bool:
    """Do the recorded kinds fit this schema? A recorded None also fits a non-optional argument
    with a default (Kineto writes a string default such as gelu's approximate="none" as "")."""
    from engine.replay.dispatch import _kind_ok

    args = schema.arguments
    required = sum(1 for a in args if not a.has_default_value() and not a.kwarg_only)
    if not (required <= len(ets) <= len(args)):
        return False
    for t, a in zip(ets, args):
        st = str(getattr(a, "real_type", a.type))
        if t != "?" and not _kind_ok(t, st) and not (t == "None" and a.has_default_value()):
            return False
    return True


def _overload(name: str, ets: list[str]):
    """The overload the recorded kinds fit: an exact argument count first, the `out=` variants
    last (Kineto records the out tensor as one more input)."""
    from engine.replay.dispatch import _packet
    from engine.replay.resolved import DispatchError

    packet = _packet(name)
    ranked = []
    for ov_name in packet.overloads():
        ov = getattr(packet, ov_name)
        if _fits(ets, ov._schema):
            is_out = ov_name == "out" or ov_name.endswith("_out")
            ranked.append((is_out, len(ets) != len(ov._schema.arguments), ov_name, ov))
    if not ranked:
        raise DispatchError(f"no overload of {name} accepts the recorded arguments ({', '.join(ets)})")
    return min(ranked, key=lambda r: r[:3])[3]


def _match(ctx: _Ctx, name: str, ets: list[str]):
    """(overload, None) or (None, (reason, detail)), cached per (name, kinds)."""
    key = (name, tuple(ets))
    hit = ctx.matches.get(key)
    if hit is None:
        from engine.replay.reasons import SkipReason
        from engine.replay.resolved import DispatchError

        try:
            hit = (_overload(name, list(ets)), None)
        except DispatchError as exc:
            reason = {
                SkipReason.UNKNOWN_OPERATOR: SynthSkip.UNKNOWN_OPERATOR,
                SkipReason.LIBRARY_NOT_LOADED: SynthSkip.LIBRARY_NOT_LOADED,
            }.get(exc.reason, SynthSkip.NO_MATCHING_OVERLOAD)
            hit = (None, (reason, str(exc)))
        ctx.matches[key] = hit
    return hit


def _defaults_for_none(schema, vals: list, ets: list) -> None:
    """A recorded None on a non-optional argument with a default takes the default."""
    for i, a in enumerate(schema.arguments[: len(ets)]):
        if (
            ets[i] == "None"
            and a.has_default_value()
            and not str(a.type).startswith("Optional[")
            and (scalar := _scalar_value(a.default_value)) is not None
        ):
            vals[i], ets[i] = scalar


# ---------------------------------------------------------------------------------- nodes
def _attrs(rf_id: int, seq: int, scope: int, tid: int, fw_tid: int, schema: str) -> list[dict]:
    return [
        {"name": "rf_id", "type": "uint64", "value": rf_id},
        {"name": "fw_parent", "type": "uint64", "value": 0},
        {"name": "seq_id", "type": "int64", "value": seq},
        {"name": "scope", "type": "uint64", "value": scope},
        {"name": "tid", "type": "uint64", "value": tid},
        {"name": "fw_tid", "type": "uint64", "value": fw_tid},
        {"name": "op_schema", "type": "string", "value": schema},
    ]


def _empty_io() -> dict:
    return {"values": [], "shapes": [], "types": [], "strides": []}


def _node(nid: int, name: str, parent: int, attrs: list, inputs=None) -> dict:
    return {
        "id": nid,
        "name": name,
        "ctrl_deps": parent,
        "inputs": inputs or _empty_io(),
        "outputs": _empty_io(),
        "attrs": attrs,
    }


def _int_arg(args: dict, key: str, default: int = -1) -> int:
    v = args.get(key)
    return v if type(v) is int and v >= 0 else default


def _host_events(evs: list) -> list[tuple[int, dict]]:
    """(X-event index, event) of host cpu_op / user_annotation events; the index counts every
    "X" event in file order, as the loader's `events.ev` does."""
    out = []
    k = 0
    for e in evs:
        if type(e) is not dict or e.get("ph") != "X":
            continue
        if _cat(e) in _HOST_CATS:
            out.append((k, e))
        k += 1
    return out


def _parents(host: list[tuple[int, dict]]) -> tuple[list[int], list[int]]:
    """Start-time order of the host events and each one's enclosing event (position, -1)."""
    ts = [float(e.get("ts", 0.0)) for _, e in host]
    dur = [float(e.get("dur", 0.0) or 0.0) for _, e in host]
    order = sorted(range(len(host)), key=lambda i: (ts[i], -dur[i], i))
    parent = [-1] * len(host)
    stacks: dict[tuple, list[int]] = {}
    for i in order:
        e = host[i][1]
        st = stacks.setdefault((str(e.get("pid", "")), str(e.get("tid", ""))), [])
        end = ts[i] + dur[i]
        while st and ts[st[-1]] + dur[st[-1]] + _TOL_US < end:
            st.pop()
        parent[i] = st[-1] if st else -1
        st.append(i)
    return order, parent


def _device(evs: list, doc: Any) -> str:
    gpu = any(type(e) is dict and _cat(e) in ("kernel", "gpu_memcpy", "gpu_memset") for e in evs)
    return "cuda:0" if gpu or (isinstance(doc, dict) and doc.get("deviceProperties")) else "cpu"


def synthesize(doc: Any, path: str, *, flow: bool = True) -> tuple[dict, SynthReport]:
    """(ET document, report) of one Kineto document (module docstring); TraceError when refused.
    `flow`: infer outputs and the tensors they feed (synth_flow.py; needs torch)."""
    evs = _events(doc, path)
    check_synthesizable(evs, path)
    host = _host_events(evs)
    rep = SynthReport(path=path)
    type_counts: Counter = Counter()
    for _, e in host:
        ea = e.get("args")
        if isinstance(ea, dict):
            type_counts.update(t for t in ea.get("Input type") or () if isinstance(t, str) and t not in _NON_TENSOR)
    ctx = _Ctx(device=_device(evs, doc), default_type=(type_counts.most_common(1) or [("float", 0)])[0][0])
    order, parent = _parents(host)
    # Record function ids link nodes to events only when they differ (TraceLens files hold 0s)
    rf_ids = (
        len({(e.get("args") or {}).get("Record function id") for _, e in host if isinstance(e.get("args"), dict)}) > 2
    )
    threads: dict[tuple, int] = {}
    for i in order:
        e = host[i][1]
        threads.setdefault((str(e.get("pid", "")), str(e.get("tid", ""))), len(threads) + 1)
    nodes: list[dict] = [_node(1, "[pytorch|profiler|execution_trace|process]", 1, _attrs(0, -1, 7, 0, 0, ""))]
    thread_node = {}
    for key, t in threads.items():
        thread_node[key] = 1 + t
        nodes.append(_node(1 + t, "[pytorch|profiler|execution_trace|thread]", 1, _attrs(0, -1, 7, t, 0, "")))
    ids: dict[int, int] = {}
    nid = 1 + len(threads)
    covered: dict[int, bool] = {}  # host position -> an operator node is on its path (itself included)
    top: list[int] = []  # node positions of the replayed-level operators (graph.replayset's rule)
    op_at: dict[int, dict] = {}  # host position -> its synthesized operator node (a child's parent)
    results: dict[int, list] = {}  # parent node id -> its results on meta (_ParentOutputs)
    handed: dict[int, int] = {}  # parent node id -> results handed to children so far
    kids: dict[int, list[int]] = {}  # host position -> its children's, in start order
    for i in order:
        if parent[i] >= 0:
            kids.setdefault(parent[i], []).append(i)
    from engine.compose.synth_infer import FILLED

    seq_of: dict[tuple, list[int]] = {}  # thread -> its host positions in start order
    at: dict[int, int] = {}  # host position -> its index there
    for i in order:
        e = host[i][1]
        lst = seq_of.setdefault((str(e.get("pid", "")), str(e.get("tid", ""))), [])
        at[i] = len(lst)
        lst.append(i)
    thread_of: dict[int, int] = {}
    for i in order:
        ev, e = host[i]
        nid += 1
        ids[i] = nid
        name = str(e.get("name", ""))
        raw = e.get("args")
        a: dict = raw if isinstance(raw, dict) else {}
        key = (str(e.get("pid", "")), str(e.get("tid", "")))
        t = threads[key]
        p = ids[parent[i]] if parent[i] >= 0 else thread_node[key]
        rf = _int_arg(a, "Record function id", -1) if rf_ids else -1
        rf = rf if rf >= 0 else _int_arg(a, "External id")
        prov = {
            "ev": ev,
            "ts_us": e.get("ts"),
            "dur_us": e.get("dur"),
            "rf_id": a.get("Record function id"),
            "external_id": a.get("External id"),
        }
        is_cpu = _cat(e) == "cpu_op"
        rep.cpu_ops += is_cpu
        seq, fw = _int_arg(a, "Sequence number"), _int_arg(a, "Fwd thread id", 0)
        if not OP_NAME.match(name) or not is_cpu:
            if is_cpu:
                rep.label_nodes += 1
            else:
                rep.annotations += 1
            node = _node(nid, name, p, _attrs(rf, seq, 7, t, fw, ""))
        else:
            outs = _ParentOutputs(op_at.get(parent[i]), results, handed) if parent[i] >= 0 else None
            fill = _descendants(i, kids, host) if name in FILLED else None
            after = functools.partial(_following, i, seq_of[key], at, host)
            node, problem = _op_node(ctx, nid, name, p, a, _attrs(rf, seq, 0, t, fw, ""), rep, outs, fill, after)
            if problem is not None:
                rep.skip(name, *problem)
                node = _node(nid, name, p, _attrs(rf, seq, 0, t, fw, ""))
                node["attrs"].append({"name": "mystique_skipped", "type": "string", "value": str(problem[0])})
            else:
                rep.op_nodes += 1
                op_at[i] = node
                if not covered.get(parent[i], False):
                    top.append(len(nodes))
                    thread_of[len(nodes)] = t
                covered[i] = True
        covered[i] = covered.get(i, False) or covered.get(parent[i], False)
        node[PROVENANCE_KEY] = prov
        nodes.append(node)
    if flow:
        from engine.compose.synth_flow import infer_flow

        rep.flow = infer_flow(nodes, top, thread_of, ctx.fresh, ctx.device)
    pid = Counter(e.get("pid") for _, e in host).most_common(1)[0][0]
    et = {
        "schema": "1.1.1-chakra.0.0.4",
        "pid": pid if type(pid) is int else 0,
        "time": "",
        "start_ts": 0,
        "finish_ts": 0,
        "mystique_synthesized": {"from": str(path), "version": SYNTH_VERSION},
        "nodes": nodes,
    }
    if isinstance(doc, dict) and isinstance(doc.get("distributedInfo"), dict):
        et["distributedInfo"] = doc["distributedInfo"]
    return et, rep


def _following(i: int, seq: list[int], at: dict[int, int], host: list) -> list[tuple[str, dict]]:
    """(name, args) of the host events after event i on its thread that start once it has
    ended (its descendants left out), at most synth_views.WINDOW."""
    from engine.compose.synth_views import WINDOW

    e = host[i][1]
    end = float(e.get("ts", 0.0)) + float(e.get("dur", 0.0) or 0.0) - _TOL_US
    out: list[tuple[str, dict]] = []
    for j in seq[at[i] + 1 :]:
        f = host[j][1]
        if float(f.get("ts", 0.0)) < end:
            continue
        a = f.get("args")
        out.append((str(f.get("name", "")), a if isinstance(a, dict) else {}))
        if len(out) >= WINDOW:
            break
    return out


def _descendants(i: int, kids: dict[int, list[int]], host: list) -> list[tuple[str, dict]]:
    """(name, args) of host event i's descendants, depth first in start order (at most 64)."""
    out: list[tuple[str, dict]] = []
    stack = list(reversed(kids.get(i, [])))
    while stack and len(out) < 64:
        j = stack.pop()
        e = host[j][1]
        a = e.get("args")
        out.append((str(e.get("name", "")), a if isinstance(a, dict) else {}))
        stack.extend(reversed(kids.get(j, [])))
    return out


class _ParentOutputs:
    """A synthesized parent operator's results on meta tensors (computed once per synthesis, on
    the first child that asks), handed to its allocation/view children in order (synth_infer.py).
    `memo` and `taken` are the synthesis's own (keyed by the parent node's id)."""

    def __init__(self, node: dict | None, memo: dict[int, list], taken: dict[int, int]):
        self.node, self.memo, self.taken = node, memo, taken

    def peek(self, back: int = 0):
        """The next result not handed yet (`back=1`: the one handed last), or None."""
        if self.node is None:
            return None
        key = id(self.node)
        if key not in self.memo:
            import torch

            from engine.compose.synth_flow import _meta_outputs

            got = _meta_outputs(self.node)
            self.memo[key] = [o for o in got[1] if isinstance(o, torch.Tensor)] if got is not None else []
        outs, k = self.memo[key], self.taken.get(key, 0) - back
        return outs[k] if 0 <= k < len(outs) else None

    def take(self) -> None:
        if self.node is not None:
            self.taken[id(self.node)] = self.taken.get(id(self.node), 0) + 1


def _op_node(
    ctx: _Ctx,
    nid: int,
    name: str,
    parent: int,
    a: dict,
    attrs: list,
    rep: SynthReport,
    outs=None,
    fill=None,
    after=None,
):
    """(node, None) or (None, (reason, detail)) for one operator event; `after()`: the (name,
    args) of the host events that follow it on its thread (synth_views.py's consumer search)."""
    if not isinstance(_dims(a), list):
        return None, (SynthSkip.NO_SHAPES, "no 'Input Dims'")
    vals, ets, shapes, sts, unknown, problem = _args(ctx, a)
    if problem is not None:
        return None, (SynthSkip.UNKNOWN_VALUE if problem == _NO_TENSORS else SynthSkip.NO_MATCHING_OVERLOAD, problem)
    ov, why = _match(ctx, name, ets)
    if why is not None and "None" in ets:  # a "" Kineto did not fill in (e.g. index's tensor list)?
        wild = ["?" if t == "None" else t for t in ets]
        ov, why2 = _match(ctx, name, wild)
        if why2 is None:
            unknown = sorted({*unknown, *(k for k, t in enumerate(ets) if t == "None")})
            ets[:] = wild
            why = None
    if why is not None:
        return None, why
    _defaults_for_none(ov._schema, vals, ets)
    inferred: list[int] = []
    guessed: list[int] = []  # size lists the views keep from their input (synth_views.py)
    attrs[-1]["value"] = str(ov._schema)
    if unknown:
        from engine.compose.synth_infer import weight_shape

        inferred = weight_shape(ov._schema, unknown, vals, ets, shapes, sts)
        unknown = [i for i in unknown if i not in inferred]
    if unknown:
        got, guess = _size_lists(
            nid, name, parent, attrs, ov._schema, unknown, vals, ets, shapes, sts, outs, fill, after
        )
        (guessed if guess else inferred).extend(got)
        unknown = [i for i in unknown if i not in got]
    if unknown:
        problem = _fill_unknown(ov._schema, vals, ets, unknown, ctx.device)
        if problem is not None:
            return None, (SynthSkip.UNKNOWN_VALUE, problem)
    node = _node(nid, name, parent, attrs, {"values": vals, "shapes": shapes, "types": ets, "strides": sts})
    rep.guessed_values += len(unknown) + len(guessed)
    rep.inferred_values += len(inferred)
    if unknown or inferred or guessed:
        node["attrs"].append(
            {
                "name": "mystique_guessed",
                "type": "string",
                "value": jsonio.dumps(sorted(unknown + inferred + guessed)).decode(),
            }
        )
    return node, None


def _size_lists(nid, name, parent, attrs, schema, unknown, vals, ets, shapes, sts, outs, fill, after):
    """Fill the size lists an allocation/view op did not record, trying in order: the parent's
    result (synth_infer.py), the op that reads the view, the view's own input (synth_views.py).
    Each try is kept only when the op then runs on meta tensors (and makes the parent's result
    where it must). (positions filled, guessed?) with vals/ets/shapes/sts updated in place."""
    from engine.compose.synth_flow import _meta_outputs
    from engine.compose.synth_infer import FILLED, FROM_PARENT, RESIZED, filled_result, from_parent
    from engine.compose.synth_views import VIEWS, from_consumer, keep_shape

    tries: list = []  # (fill function, result it must make, parent outputs to advance, guessed?)
    if name in FILLED and fill is not None and (cand := filled_result(fill)) is not None:
        tries.append((lambda u, v, e, sh, st, c=cand: from_parent(name, schema, u, v, e, sh, st, c), cand, None, False))
    if name in FROM_PARENT and outs is not None and (cand := outs.peek()) is not None:
        tries.append((lambda u, v, e, sh, st, c=cand: from_parent(name, schema, u, v, e, sh, st, c), cand, outs, False))
    if name in RESIZED and outs is not None and (cand := outs.peek(back=1)) is not None:
        tries.append((lambda u, v, e, sh, st, c=cand: from_parent(name, schema, u, v, e, sh, st, c), cand, None, False))
    if name in VIEWS:
        tries.append(
            (
                lambda u, v, e, sh, st: from_consumer(name, schema, u, v, e, sh, st, after() if after else []),
                None,
                None,
                False,
            )
        )
        tries.append((lambda *a: keep_shape(name, schema, *a), None, None, True))
    for fn, target, advance, guess in tries:
        v, e, sh, st = list(vals), list(ets), list(shapes), list(sts)
        got = fn(unknown, v, e, sh, st)
        rest = [i for i in unknown if i not in got]
        pv, pe = list(v), list(e)  # the other unknowns as _fill_unknown will give them
        if not got or (rest and _fill_unknown(schema, pv, pe, rest) is not None):
            continue
        res = _meta_outputs(_node(nid, name, parent, attrs, {"values": pv, "shapes": sh, "types": pe, "strides": st}))
        first = res[1][0] if res is not None and res[1] else None
        if first is None or (target is not None and getattr(first, "shape", None) != target.shape):
            continue
        vals[:], ets[:], shapes[:], sts[:] = v, e, sh, st
        if advance is not None:
            advance.take()
        return got, guess
    return [], False


# ---------------------------------------------------------------------------------- files
def read_kineto(path: str | Path) -> list[tuple[str, Any]]:
    """(member path, document) of every Kineto document in a file (a tarball may hold several)."""
    from engine.trace import safe_io
    from engine.trace.kineto import is_kineto
    from engine.trace.loader import _decode

    file = Path(str(path).split("!", 1)[0])
    limit = safe_io.max_bytes()
    raw = safe_io.read_raw(file, limit)
    out = []
    for blob in safe_io.expand(file, raw, limit):
        doc = _decode(blob, typed=False)
        if is_kineto(doc):
            out.append((blob.path, doc))
    if not out:
        raise TraceError("no Kineto trace in the file", file)
    return out


def synthesize_file(path: str | Path, *, flow: bool = True) -> tuple[dict, SynthReport]:
    """(ET document, report) of a Kineto file holding one trace (`flow`: see `synthesize`)."""
    docs = read_kineto(path)
    if len(docs) > 1:
        raise TraceError(f"{len(docs)} Kineto traces in one file: synthesize them one at a time", path)
    member, doc = docs[0]
    return synthesize(doc, member, flow=flow)


def synthesized_path(path: str | Path) -> Path:
    """Where the ET synthesized from a Kineto file is kept: the trace cache, keyed by the file's
    bytes, the synthesis version and the torch build."""
    import torch  # the overloads (and their schemas) come from this build's registry

    from engine.trace.cache import cache_root

    p = Path(path)
    h = hashlib.sha256(f"{SYNTH_VERSION}|{torch.__version__}".encode())
    with open(p, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    stem = p.name.split(".json")[0].removesuffix("_kineto")
    return cache_root() / "synth" / f"{stem}_{h.hexdigest()[:16]}_et.json.gz"


def _report_path(et_path: Path) -> Path:
    """The report kept beside a synthesized ET (same key)."""
    return et_path.with_name(et_path.name.removesuffix("_et.json.gz") + "_report.json")


def _cached_report(path: str | Path, out: Path) -> SynthReport | None:
    """The report kept with the cached ET `out` of `path`, its paths made this call's; None when
    either file is missing or the report does not read."""
    side = _report_path(out)
    if not (out.is_file() and side.is_file()):
        return None
    try:
        kept = jsonio.loads(side.read_bytes())
        rep = SynthReport.from_dict(kept["report"])
        src = str(kept["source"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    here = str(path)  # the same bytes under another name: the member part of the path is kept
    rep.path = here + rep.path[len(src) :] if rep.path.startswith(src) else here
    rep.et_path = str(out)
    return rep


def write_synthesized(path: str | Path) -> tuple[Path, SynthReport]:
    """Synthesize (or reuse) the ET of a Kineto file; (ET path, report). The ET and its report
    are kept in the trace cache under the file's bytes (`synthesized_path`), so a second load of
    the same file (compose, then replay or compare) reads them instead of synthesizing again."""
    from engine.outdir import atomic_write

    out = synthesized_path(path)
    rep = _cached_report(path, out)
    if rep is not None:
        return out, rep
    doc, rep = synthesize_file(path)
    rep.et_path = str(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    if not out.is_file():
        atomic_write(out, gzip.compress(jsonio.dumps(doc), compresslevel=3))
    atomic_write(_report_path(out), jsonio.dumps({"source": str(path), "report": rep.to_dict()}))
    return out, rep


def load_synthesized(path: str | Path, progress=None):
    """The Trace of a Kineto-only file with its synthesized ET linked in (`meta["synthesized"]`
    holds the report)."""
    from engine.trace import load

    et_path, rep = write_synthesized(path)
    trace = load(et_path, path, progress=progress)
    trace.meta["synthesized"] = rep.to_dict()
    return trace


__all__ = [
    "PROVENANCE_KEY",
    "SynthReport",
    "SynthSkip",
    "check_synthesizable",
    "load_synthesized",
    "synthesize",
    "synthesize_file",
    "synthesized_path",
    "write_synthesized",
]
