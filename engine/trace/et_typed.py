"""Typed fast path for chakra-layout execution traces (1.0.2-chakra.0.0.4 and later).

Why a second decoder: a 14k-node ET is ~13 MB of JSON whose bulk is per-node `attrs` lists of
`{"name", "type", "value"}` objects. Decoding into plain dicts (orjson) allocates ~200k small
dicts that are thrown away at once; msgspec decodes straight into typed structs, skips the keys
we never read (`type`), and re-encodes each node's inputs/outputs to the model's JSON text
without walking dicts. Together that is about 1.5-2x faster than the dict path on the shared
resnet ET (benchmarks/load_speed.py).

The path is taken only for documents that are unambiguously chakra-layout and well-formed:
anything it does not accept (flat 1.0.1 nodes, odd value types, unknown keys in inputs/outputs,
msgspec missing) returns None and the caller uses the general orjson path in `et.py`, which
owns every error message. So this module never decides whether a trace is valid, only how fast
a valid one loads.
"""
from __future__ import annotations

from typing import Any

try:  # optional: GPU machines may lack it; the orjson path covers everything
    import msgspec
except ImportError:  # pragma: no cover - exercised only where msgspec is absent
    msgspec = None

_HEAD = 4096  # bytes looked at to decide whether a document can be a chakra ET at all

if msgspec is not None:
    class _Attr(msgspec.Struct, gc=False):
        name: str
        value: Any = None

    class _IO(msgspec.Struct, forbid_unknown_fields=True, gc=False):
        values: list = []
        shapes: list = []
        types: list = []
        strides: Any = msgspec.UNSET  # omitted from the re-encoded text when the file has none

    class _Node(msgspec.Struct, gc=False):
        id: int
        name: str
        ctrl_deps: int
        inputs: _IO
        outputs: _IO
        attrs: list[_Attr] = []

    class ChakraDoc(msgspec.Struct, gc=False):
        schema: str
        nodes: list[_Node]

    _DECODER = msgspec.json.Decoder(ChakraDoc)
    _ENCODE = msgspec.json.Encoder().encode
else:  # pragma: no cover
    class ChakraDoc:  # never instantiated: decode_chakra returns None without msgspec
        pass


def decode_chakra(data: bytes):
    """A `ChakraDoc` when `data` is a well-formed chakra-layout ET, else None (use orjson)."""
    if msgspec is None:
        return None
    head = data[:_HEAD]
    if b'"nodes"' not in head or b'"ctrl_deps"' not in head:
        return None
    try:
        doc = _DECODER.decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None
    if not doc.nodes:
        return None
    return doc


def chakra_columns(doc, walk, trows: list):
    """(ids, names, parents, inputs text, outputs text, attrs dicts) of a typed document,
    appending tensor rows to `trows` through `walk` (et._walk) on the way."""
    n = len(doc.nodes)
    ids = [0] * n
    names = [""] * n
    parents = [0] * n
    ins = [""] * n
    outs = [""] * n
    attrs = [None] * n
    enc = _ENCODE
    unset = msgspec.UNSET
    for i, nd in enumerate(doc.nodes):
        iv, ov = nd.inputs, nd.outputs
        nid = nd.id
        ids[i] = nid
        names[i] = nd.name
        parents[i] = nd.ctrl_deps
        if iv.types:
            walk(trows, nid, "in", iv.values, iv.shapes, iv.types, None if iv.strides is unset else iv.strides)
        if ov.types:
            walk(trows, nid, "out", ov.values, ov.shapes, ov.types, None if ov.strides is unset else ov.strides)
        ins[i] = enc(iv).decode()
        outs[i] = enc(ov).decode()
        attrs[i] = {a.name: a.value for a in nd.attrs}
    return ids, names, parents, ins, outs, attrs
