"""Typed fast path for chakra-layout execution traces (1.0.2-chakra.0.0.4 and later).

Why a second decoder: a 14k-node ET is ~13 MB of JSON whose bulk is per-node `attrs` lists of
`{"name", "type", "value"}` objects. Decoding into plain dicts (orjson) allocates ~200k small
dicts that are thrown away at once; msgspec decodes straight into typed structs, skips the keys
we never read (`type`), and re-encodes each node's inputs/outputs to the model's JSON text
without walking dicts. Attribute names the profiler writes (`KNOWN_ATTRS`) are struct classes
tagged by name, so no string is allocated for them and a node's attribute layout is a tuple of
classes; a document with a newer name takes a second, generic typed decoder. `chakra_columns`
then visits each node once. Together that is about 2x faster than the dict path on the shared
resnet ET (benchmarks/load_speed.py).

Tried and measured slower on that ET (so not done): keeping inputs/outputs as `msgspec.Raw` and
decoding them again in one batch; column-wise tensor and attribute extraction with numpy index
picks; decoding the argument texts in one join/split; grouping attribute layouts column-wise
after the loop (every attribute struct is a cache miss by then); dropping each node from the
document as soon as it is read, to free it while in cache (faster alone, slower in the whole
load); encoding all inputs into one buffer (`encode_into`) and slicing it, or after the loop
with `encode_lines` (cold structs: much slower); per-signature plans of tensor positions keyed
on the argument type list (hashing the types costs what it saves); `msgspec.Raw` for
argument values and shapes (the text would keep the file's spacing, not match orjson's). On a
2-core VM each extra pass over 30k scattered Python objects costs 5-10 ms, so one pass per node
that touches everything wins, and the tensor columns come from strided slices of one flat list.

The path is taken only for documents that are unambiguously chakra-layout and well-formed:
anything it does not accept (flat 1.0.1 nodes, odd value types, unknown keys in inputs/outputs,
msgspec missing) returns None and the caller uses the general orjson path in `et.py`, which
owns every error message. So this module never decides whether a trace is valid, only how fast
a valid one loads.
"""

from __future__ import annotations

from operator import attrgetter, itemgetter
from types import GenericAlias
from typing import Any, Union, cast

import numpy as np

try:  # optional: GPU machines may lack it; the orjson path covers everything
    import msgspec
except ImportError:  # pragma: no cover - exercised only where msgspec is absent
    msgspec = None  # type: ignore[assignment]  # checked before use

_HEAD = 4096  # bytes looked at to decide whether a document can be a chakra ET at all
_STR_OR_NONE = frozenset((str, type(None)))

# Attribute names PyTorch's ExecutionTraceObserver writes (chakra 0.0.4 schemas up to 1.1.1).
# Each gets its own struct class, tagged by "name": msgspec then matches the name in C and
# allocates no string for it, and a node's layout is the tuple of its attributes' classes.
KNOWN_ATTRS = (
    "rf_id",
    "fw_parent",
    "seq_id",
    "scope",
    "tid",
    "fw_tid",
    "op_schema",
    "kernel_backend",
    "kernel_file",
    "tensor_range",
    "collective_name",
    "dtype",
    "in_msg_nelems",
    "out_msg_nelems",
    "in_split_size",
    "out_split_size",
    "global_rank_start",
    "global_rank_stride",
    "pg_name",
    "pg_desc",
    "pg_size",
    "pg_id",
)

if msgspec is not None:

    class _Attr(msgspec.Struct, gc=False):
        name: str
        value: Any = None

    _TAGGED = tuple(
        msgspec.defstruct(f"_Attr_{name}", [("value", Any, None)], tag_field="name", tag=name, gc=False)
        for name in KNOWN_ATTRS
    )

    class _IO(msgspec.Struct, forbid_unknown_fields=True, gc=False):
        values: list = []  # noqa: RUF012 -- msgspec copies defaults per instance
        shapes: list = []  # noqa: RUF012 -- msgspec copies defaults per instance
        types: list = []  # noqa: RUF012 -- msgspec copies defaults per instance
        strides: Any = msgspec.UNSET  # omitted from the re-encoded text when the file has none

    def _doc_type(attr_type, label):
        node = msgspec.defstruct(
            f"_Node{label}",
            [
                ("id", int),
                ("name", str),
                ("ctrl_deps", int),
                ("inputs", _IO),
                ("outputs", _IO),
                ("attrs", GenericAlias(list, (attr_type,)), []),  # list[attr_type], built at run time
            ],
            gc=False,
        )
        return msgspec.defstruct(
            f"ChakraDoc{label}", [("schema", str), ("nodes", GenericAlias(list, (node,)))], gc=False
        )

    # Tried in order: known attribute names only (fast), then any attribute name.
    # Union[...] (not X | Y): it unpacks a runtime tuple of member types.
    _TAGGED_UNION = Union[_TAGGED]  # type: ignore[valid-type]  # noqa: UP007 -- a runtime tuple, see above
    _DECODERS = tuple(
        msgspec.json.Decoder(_doc_type(t, label)) for t, label in ((_TAGGED_UNION, "Tagged"), (_Attr, ""))
    )
    # the document classes (msgspec types `Decoder.type` as a type form; these are Struct classes)
    TYPED_DOCS: tuple[type, ...] = tuple(cast(type, d.type) for d in _DECODERS)
    _ENCODE = msgspec.json.Encoder().encode
else:  # pragma: no cover
    TYPED_DOCS: tuple[type, ...] = ()  # type: ignore[no-redef]


def decode_chakra(data: bytes):
    """A typed document (an instance of one of `TYPED_DOCS`) when `data` is a well-formed
    chakra-layout ET, else None (use orjson)."""
    if msgspec is None:
        return None
    head = data[:_HEAD]
    if b'"nodes"' not in head or b'"ctrl_deps"' not in head:
        return None
    for dec in _DECODERS:
        try:
            doc = dec.decode(data)
        except msgspec.ValidationError:  # e.g. an attribute name newer than KNOWN_ATTRS: next decoder
            continue
        except msgspec.DecodeError:
            return None
        return doc if doc.nodes else None
    return None


def _attr_name(cls) -> str:
    return cls.__struct_config__.tag


def chakra_columns(doc):
    """(ids, names, parents, inputs text, outputs text, attribute layouts, attribute values,
    flat tensor list, ends, tensor types) of a typed document, or None when a tensor record does
    not have the usual six elements (the general path decides then).

    Tensors go into one flat list, `et_tensors.FLAT_WIDTH` elements per tensor (`et_tensors.FLAT_FIELDS`, then
    the record), in the general path's row order; `ends[i]` is the list's length after node i.
    io is 0/1 and the type is its index in the returned tensor types (first-seen order), so
    those columns need no hashing afterwards.

    Why one loop: every node's structs are visited once, while they are still in cache, and the
    usual tensor argument (lists of equal length, a plain tensor) is handled inline rather than
    by a call per argument list; anything else goes through `et_tensors.walk_tensors` / `et_tensors.walk_list`, so the
    rows are the same as the general path's. Attribute names are grouped by layout (the tuple of
    names in order): nearly every node shares one, and `attr_columns` reads values per layout.
    """
    from engine.trace.et_tensors import list_tensors, tensor_kind, walk_tensors

    nodes = doc.nodes
    n = len(nodes)
    ids = [0] * n
    names = [""] * n
    parents = [0] * n
    ins = [""] * n
    outs = [""] * n
    values: list[list[Any] | None] = [None] * n
    ends = [0] * n
    layouts: dict[tuple, list[int]] = {}
    enc = _ENCODE
    unset = msgspec.UNSET
    flat: list = []
    ext = flat.extend
    kinds: dict = {}
    tcode: dict = {}  # tensor type -> code, in order of first appearance (the dtype column's order)
    prev: tuple | None = None
    cur: list[int] = []  # the run of nodes of layout `prev` (set on the first node)
    tagged = isinstance(doc, TYPED_DOCS[0])
    layout_key = type if tagged else attrgetter("name")  # tagged: attribute classes stand for names
    get_value = attrgetter("value")
    for i, nd in enumerate(nodes):
        nid = nd.id
        ids[i] = nid
        names[i] = nd.name
        parents[i] = nd.ctrl_deps
        iv, ov = nd.inputs, nd.outputs
        for io, a in ((0, iv), (1, ov)):
            types = a.types
            if not types:
                continue
            vals, shapes, st = a.values, a.shapes, a.strides
            if st is unset:
                st = None
            nt = len(types)
            if len(vals) != nt or len(shapes) != nt or (st is not None and len(st) != nt):
                rows: list = []
                walk_tensors(rows, nid, _IO_NAMES[io], vals, shapes, types, st)
                if not _flatten(rows, ext, tcode):
                    return None
                continue
            for j, t in enumerate(types):
                entry = kinds.get(t)
                if entry is None:
                    entry = kinds[t] = (tensor_kind(t), t)
                k, t = entry  # one str object per distinct type: its hash is computed once
                if k == 1:
                    v = vals[j]
                    if type(v) is list and len(v) >= 5:
                        if len(v) != 6:
                            return None
                        c = tcode.get(t)
                        if c is None:
                            c = tcode[t] = len(tcode)
                        sh = shapes[j]
                        ext((io, j, 0, c, tuple(sh) if type(sh) is list else (), None if st is None else st[j]))
                        ext(v)
                elif k:
                    for sub, ev, et, esh, est in list_tensors(vals[j], t, shapes[j], None if st is None else st[j]):
                        if len(ev) != 6:
                            return None
                        c = tcode.get(et)
                        if c is None:
                            c = tcode[et] = len(tcode)
                        ext((io, j, sub, c, tuple(esh) if type(esh) in (list, tuple) else (), est))
                        ext(ev)
        ends[i] = len(flat)
        ins[i] = enc(iv).decode()
        outs[i] = enc(ov).decode()
        at = nd.attrs
        lay = tuple(map(layout_key, at))
        if lay != prev:  # runs of one layout: compare the tuple instead of hashing it
            prev = lay
            cur = layouts.setdefault(lay, [])
        cur.append(i)
        values[i] = list(map(get_value, at))
    if tagged:
        layouts = {tuple(map(_attr_name, k)): v for k, v in layouts.items()}
    return ids, names, parents, ins, outs, layouts, values, flat, ends, list(tcode)


_IO_NAMES = ("in", "out")


def _flatten(rows: list, ext, tcode: dict) -> bool:
    """Append `et_tensors.walk_tensors` rows to the flat tensor list (io and type as codes, shapes as tuples,
    () when not a list); False when a record does not have six elements."""
    for _, io, arg, sub, v, t, sh, st in rows:
        if len(v) != 6:
            return False
        c = tcode.get(t)
        if c is None:
            c = tcode[t] = len(tcode)
        ext((0 if io == "in" else 1, arg, sub, c, tuple(sh) if type(sh) in (list, tuple) else (), st))
        ext(v)
    return True


def attr_columns(layouts: dict, values: list, scalar_names: tuple[str, ...], std_names: frozenset, extra_json):
    """(int64 scalar columns, op_schema strings, extra-attrs JSON text) from attribute layouts
    and per-node values (`chakra_columns`), or None when a value has an odd type (the general
    path decides then).

    Why by layout: names are compared once per distinct layout and values are scattered
    column-wise, instead of building and probing a dict per node (2x faster on 14k nodes).
    """
    from engine.trace.et_tensors import as_ints

    n = len(values)
    scal = {k: np.full(n, -1, dtype=np.int64) for k in scalar_names}
    schemas = [""] * n
    extra = ["{}"] * n
    for names, idx in layouts.items():
        pos = {name: j for j, name in enumerate(names)}  # a repeated name: the last one wins
        every = len(idx) == n  # one layout for all nodes: no gather, no scatter
        rows = values if every else list(map(values.__getitem__, idx))
        where = None if every else as_ints(idx, "q")
        for col in scalar_names:
            j = pos.get(col)
            if j is not None:
                try:  # array.array takes ints (and bools, as 0/1 like the general path) only
                    ints = as_ints(list(map(itemgetter(j), rows)), "q")
                except (TypeError, OverflowError):  # float, str, None, out of range: general path
                    return None
                if every:
                    scal[col] = ints
                else:
                    scal[col][where] = ints
        j = pos.get("op_schema")
        if j is not None:
            vals = list(map(itemgetter(j), rows))
            if not set(map(type, vals)) <= _STR_OR_NONE:
                return None
            if every and None not in vals:
                schemas = vals
            else:
                for i, v in zip(idx, vals):
                    schemas[i] = v or ""
        special = not pos.keys() <= std_names
        kb, kf = pos.get("kernel_backend"), pos.get("kernel_file")
        if special or kb is not None or kf is not None:
            for i, r in zip(idx, rows):
                if special or (kb is not None and r[kb]) or (kf is not None and r[kf]):
                    extra[i] = extra_json(dict(zip(names, r)))
    return scal, schemas, extra
