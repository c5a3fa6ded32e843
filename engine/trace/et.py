"""Execution-trace (ET) parsing: every schema from 1.0.1 to 1.1.1-chakra.0.0.4, and newer.

Two layouts exist:
* flat (1.0.1): node keys `parent`, `inputs` (values list), `input_shapes`, `input_types`,
  `outputs`, `output_shapes`, `output_types`, plus rf_id/seq_id/scope/tid/fw_parent/fw_tid/
  op_schema at the node's top level;
* chakra (1.0.2-chakra.0.0.4 and later): `ctrl_deps` is the parent, `inputs`/`outputs` are
  dicts {values, shapes, types[, strides]}, and the scalar fields live in `attrs`, a list of
  {name, type, value}.
The layout is chosen from the structure (dict inputs -> chakra), so an unknown or newer schema
string loads through the nearest layout with a warning instead of being refused.

Why columns are built with plain lists in one pass: 14k nodes must parse in tens of ms; pandas
is only touched once per column at the end (categoricals for names/schemas).

Validation: every parent must exist, except the profiler's implicit roots 0 and 1 (the
"[pytorch|profiler|execution_trace|process]" node, id 1, names itself as its own parent and
may be absent); a cycle is a `TraceError`. Parents that are roots (self-parent, negative, or an
absent 0/1) are stored as -1, and so is a parent the file does not hold (torch writes such
files: see `_tree`), with a warning that counts those nodes.
"""

from __future__ import annotations

import warnings
from itertools import chain
from operator import itemgetter
from typing import Any

import numpy as np
import pandas as pd

from engine import jsonio
from engine.errors import TraceError, malformed_as_trace_error
from engine.trace.columns import fast_cat, sorted_positions
from engine.trace.et_tensors import FLAT_WIDTH, as_ints, tensor_frame, tensor_frame_flat, walk_tensors

KNOWN_SCHEMAS = (
    "1.0.1",
    "1.0.2-chakra.0.0.4",
    "1.0.3",
    "1.0.3-chakra.0.0.4",
    "1.0.4",
    "1.0.4-chakra.0.0.4",
    "1.1.0-chakra.0.0.4",
    "1.1.1-chakra.0.0.4",
)
_SCALAR_ATTRS = ("rf_id", "seq_id", "scope", "tid", "fw_parent", "fw_tid", "op_schema")
_FLAT_KNOWN = frozenset(
    (
        "id",
        "name",
        "parent",
        "inputs",
        "input_shapes",
        "input_types",
        "outputs",
        "output_shapes",
        "output_types",
        "input_strides",
        "output_strides",
        *_SCALAR_ATTRS,
    )
)
_STD_ATTRS = frozenset((*_SCALAR_ATTRS, "kernel_backend", "kernel_file"))
_ROOT_IDS = (0, 1)


def is_et(doc) -> bool:
    return isinstance(doc, dict) and "schema" in doc and "nodes" in doc


def _int(v, default: int = -1) -> int:
    if v is None or v == "":
        return default
    if isinstance(v, bool):
        return int(v)
    return int(v)


# (io, types, values, shapes, strides) keys of a flat-layout node's inputs and outputs
_FLAT_IO_KEYS = (
    ("in", "input_types", "inputs", "input_shapes", "input_strides"),
    ("out", "output_types", "outputs", "output_shapes", "output_strides"),
)


def _io_json(nodes: list, types: str, values: str, shapes: str, strides: str) -> list[str]:
    """Per node, the JSON of its inputs or outputs (the keys of one `_FLAT_IO_KEYS` row) as the
    ops table stores them: values, shapes, types, and strides when the trace has them."""
    dumps = jsonio.dumps
    return [
        dumps(
            {
                "values": n[values],
                "shapes": n[shapes],
                "types": n[types],
                **({"strides": n[strides]} if strides in n else {}),
            }
        ).decode()
        for n in nodes
    ]


def parse_et(doc: dict, path: str, rank: int, warn: list[str]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(ops without phase/module/link columns, tensors) of one ET document."""
    with malformed_as_trace_error("execution trace", path):
        return _parse_et(doc, path, rank, warn)


def _parse_et(doc: dict, path: str, rank: int, warn: list[str]):
    schema = str(doc.get("schema", ""))
    nodes = doc["nodes"]
    if not isinstance(nodes, list):
        raise TraceError("execution trace 'nodes' is not a list", path)
    chakra = (
        bool(nodes)
        and isinstance(nodes[0], dict)
        and (isinstance(nodes[0].get("inputs"), dict) or "ctrl_deps" in nodes[0] or "attrs" in nodes[0])
    )
    _check_schema(schema, chakra, path, warn)
    trows: list = []
    cols: Any = _fast_columns(nodes, chakra, trows)
    if cols is None:
        cols, trows = _generic_columns(nodes, chakra, path)
        return _ops_frame(cols, rank, path, warn), tensor_frame(trows, rank)
    if not chakra:  # the chakra fast path walks tensors in its own loop
        for node in nodes:
            for io, t_key, v_key, sh_key, st_key in _FLAT_IO_KEYS:
                types = node.get(t_key)
                if types:
                    values = node.get(v_key) or []
                    walk_tensors(trows, int(node["id"]), io, values, node.get(sh_key), types, node.get(st_key))
    return _ops_frame(cols, rank, path, warn), tensor_frame(trows, rank)


def _check_schema(schema: str, chakra: bool, path: str, warn: list[str]) -> None:
    if schema not in KNOWN_SCHEMAS:
        msg = (
            f"{path}: unknown ET schema {schema!r}; loaded through the nearest known layout "
            f"({'1.1.1-chakra.0.0.4' if chakra else '1.0.1'})"
        )
        warn.append(msg)
        warnings.warn(msg, stacklevel=4)


def parse_et_typed(doc, path: str, rank: int, warn: list[str]):
    """(ops, tensors) of a typed chakra document (`et_typed.decode_chakra`), or None when a value
    needs the general path (the caller then re-decodes with orjson and calls `parse_et`)."""
    from engine.trace.et_typed import attr_columns, chakra_columns

    try:
        cols = chakra_columns(doc)
        if cols is None:
            return None
        ids, names, parents, ins, outs, layouts, values, flat, ends, types = cols
        attrs = attr_columns(layouts, values, _SCALAR_COLS, _STD_ATTRS, _extra_json)
        ids, parents, ends = as_ints(ids, "q"), as_ints(parents, "q"), as_ints(ends, "q")
    except (KeyError, TypeError, ValueError, AttributeError, OverflowError):
        return None
    if attrs is None:
        return None
    scal, schemas, extra = attrs
    _check_schema(doc.schema, True, path, warn)
    try:  # a record element that is not an int in range (float, str, huge): the general path decides
        tensors = tensor_frame_flat(flat, np.repeat(ids, np.diff(ends, prepend=0) // FLAT_WIDTH), types, rank)
    except (TypeError, ValueError, OverflowError):
        return None
    return _ops_frame((ids, names, parents, scal, schemas, ins, outs, extra), rank, path, warn), tensors


def _chakra_rows(nodes: list, trows: list) -> list | None:
    """(id, name, parent, inputs text, outputs text, attrs dict) per node, walking tensors on the
    way: one pass, so each node's containers are visited while they are in cache."""
    rows: list = []
    app = rows.append
    dumps = jsonio.dumps
    walk = walk_tensors
    for n in nodes:
        iv, ov = n["inputs"], n["outputs"]
        if type(iv) is not dict or type(ov) is not dict:
            return None
        nid = n["id"]
        if type(nid) is not int:
            return None
        ity, oty = iv.get("types"), ov.get("types")
        if ity:
            walk(trows, nid, "in", iv.get("values") or [], iv.get("shapes"), ity, iv.get("strides"))
        if oty:
            walk(trows, nid, "out", ov.get("values") or [], ov.get("shapes"), oty, ov.get("strides"))
        app(
            (
                nid,
                n["name"],
                n["ctrl_deps"],
                dumps(iv).decode(),
                dumps(ov).decode(),
                {x["name"]: x["value"] for x in n["attrs"]},
            )
        )
    return rows


_SCALAR_COLS = ("tid", "fw_tid", "fw_parent", "rf_id", "seq_id", "scope")


def _fast_columns(nodes: list, chakra: bool, trows: list):
    """Column lists for the common, well-formed case; None (and `trows` emptied) to fall back."""
    try:
        return _fast_columns_or_none(nodes, chakra, trows)
    except (KeyError, TypeError, ValueError, AttributeError, OverflowError):
        trows.clear()
        return None


def _fast_columns_or_none(nodes: list, chakra: bool, trows: list):
    """Body of `_fast_columns`; raises on any malformed value (the caller falls back)."""
    dumps = jsonio.dumps
    if chakra:
        rows = _chakra_rows(nodes, trows)
        if not rows:
            trows.clear()
            return None
        ids_l, names, par_l, ins, outs, attrs = map(list, zip(*rows))
        del rows
        ids = np.asarray(ids_l, dtype=np.int64)
        parents = np.asarray(par_l, dtype=np.int64)
        extra = [
            "{}"
            if (a.keys() <= _STD_ATTRS and not a.get("kernel_backend") and not a.get("kernel_file"))
            else _extra_json(a)
            for a in attrs
        ]
    else:
        ids = np.asarray([n["id"] for n in nodes], dtype=np.int64)
        names = [n["name"] for n in nodes]
        attrs = nodes
        parents = np.asarray([n["parent"] for n in nodes], dtype=np.int64)
        ins, outs = (_io_json(nodes, *keys[1:]) for keys in _FLAT_IO_KEYS)
        extra = [
            dumps(r).decode() if r else "{}"
            for r in ({k: v for k, v in n.items() if k not in _FLAT_KNOWN} for n in nodes)
        ]
    try:  # one C-level pass when every node has every scalar attribute (the usual case)
        grid = np.fromiter(
            chain.from_iterable(map(itemgetter(*_SCALAR_COLS), attrs)),
            dtype=np.int64,
            count=len(attrs) * len(_SCALAR_COLS),
        ).reshape(-1, len(_SCALAR_COLS))
        scal = {k: grid[:, j].copy() for j, k in enumerate(_SCALAR_COLS)}
    except KeyError:
        scal = {k: np.asarray([a.get(k, -1) for a in attrs], dtype=np.int64) for k in _SCALAR_COLS}
    schemas = [a.get("op_schema") or "" for a in attrs]
    if not (all(type(x) is str for x in names) and all(type(x) is str for x in schemas)):
        trows.clear()
        return None
    return ids, names, parents, scal, schemas, ins, outs, extra


def _extra_json(a: dict) -> str:
    """JSON text of the non-scalar attributes, empty strings dropped (most nodes have none)."""
    rest = {k: v for k, v in a.items() if k not in _SCALAR_ATTRS and v != ""}
    return jsonio.dumps(rest).decode() if rest else "{}"


def _generic_columns(nodes: list, chakra: bool, path: str) -> tuple[tuple, list]:
    """Node-by-node column building that tolerates missing keys and odd value types."""
    n = len(nodes)
    ids = [0] * n
    names = [""] * n
    parents = [0] * n
    cols = {k: [-1] * n for k in ("tid", "fw_tid", "fw_parent", "rf_id", "seq_id", "scope")}
    schemas = [""] * n
    ins: list[str | None] = [None] * n
    outs: list[str | None] = [None] * n
    extra: list[str | None] = [None] * n
    trows: list = []
    dumps = jsonio.dumps
    scalar = ("tid", "fw_tid", "fw_parent", "rf_id", "seq_id", "scope")
    lists = [cols[k] for k in scalar]
    for i, node in enumerate(nodes):
        nid = node["id"]
        if type(nid) is not int:
            nid = int(nid)
        ids[i] = nid
        nm = node.get("name", "")
        names[i] = nm if type(nm) is str else str(nm)
        if chakra:
            p = node.get("ctrl_deps", -1)
            parents[i] = p if type(p) is int else _int(p, -1)
            a = {x["name"]: x.get("value") for x in (node.get("attrs") or ())}
            get = a.get
            iv = node.get("inputs") or {}
            ov = node.get("outputs") or {}
            if type(iv) is not dict or type(ov) is not dict:
                raise TraceError(f"node {nid}: inputs/outputs are not objects in a chakra-layout trace", path)
            ins[i] = dumps(iv).decode()
            outs[i] = dumps(ov).decode()
            ity, oty = iv.get("types"), ov.get("types")
            if ity:
                walk_tensors(trows, nid, "in", iv.get("values") or [], iv.get("shapes"), ity, iv.get("strides"))
            if oty:
                walk_tensors(trows, nid, "out", ov.get("values") or [], ov.get("shapes"), oty, ov.get("strides"))
            rest = {k: v for k, v in a.items() if k not in _SCALAR_ATTRS and v != ""}
        else:
            p = node.get("parent", -1)
            parents[i] = p if type(p) is int else _int(p, -1)
            get = node.get
            iv, ish, ity = node.get("inputs") or [], node.get("input_shapes"), node.get("input_types")
            ov, osh, oty = node.get("outputs") or [], node.get("output_shapes"), node.get("output_types")
            ist, ost = node.get("input_strides"), node.get("output_strides")
            ins[i] = dumps(
                {"values": iv, "shapes": ish or [], "types": ity or [], **({"strides": ist} if ist is not None else {})}
            ).decode()
            outs[i] = dumps(
                {"values": ov, "shapes": osh or [], "types": oty or [], **({"strides": ost} if ost is not None else {})}
            ).decode()
            if ity:
                walk_tensors(trows, nid, "in", iv, ish, ity, ist)
            if oty:
                walk_tensors(trows, nid, "out", ov, osh, oty, ost)
            rest = {k: v for k, v in node.items() if k not in _FLAT_KNOWN}
        for k, col in zip(scalar, lists):
            v = get(k, -1)
            col[i] = v if type(v) is int else _int(v, -1)
        sc = get("op_schema")
        schemas[i] = sc if type(sc) is str else ("" if sc is None else str(sc))
        extra[i] = dumps(rest).decode() if rest else "{}"

    scal = {k: np.asarray(cols[k], dtype=np.int64) for k in scalar}
    return (
        np.asarray(ids, dtype=np.int64),
        names,
        np.asarray(parents, dtype=np.int64),
        scal,
        schemas,
        ins,
        outs,
        extra,
    ), trows


def _ops_frame(cols: tuple, rank: int, path: str, warn: list[str]) -> pd.DataFrame:
    """The ops table from the column tuple `_fast_columns`/`_generic_columns` build."""
    ids, names, parents, scal, schemas, ins, outs, extra = cols
    n = len(ids)
    parents, depth, n_children = _tree(ids, parents, path, warn)
    ops = pd.DataFrame(
        {
            "id": ids,
            "rank": np.full(n, rank, dtype=np.int32),
            "name": fast_cat(names),
            "parent": parents,
            "depth": depth,
            **{k: scal[k] for k in ("tid", "fw_tid", "fw_parent", "rf_id", "seq_id", "scope")},
            "schema": fast_cat(schemas),
            "inputs": pd.Series(ins, dtype=object),
            "outputs": pd.Series(outs, dtype=object),
            "attrs": pd.Series(extra, dtype=object),
            "n_children": n_children,
        }
    )
    return ops


def _tree(ids: np.ndarray, parents: np.ndarray, path: str, warn: list[str]):
    """Validated parent ids (-1 = root), depth and child counts, all vectorized.

    A parent the file does not hold (torch's observer writes a node when its op ends, so an op
    still open when the observer stopped, e.g. DDP's reducer finishing a bucket on another
    thread, is never written while its children are) makes its children top-level ops, with
    a warning that counts them: the trace is torch's own, and its other ops are whole.
    """
    n = len(ids)
    if n == 0:
        return parents, np.empty(0, np.int32), np.empty(0, np.int32)
    if n > 1 and (ids[1:] > ids[:-1]).all():  # ascending ids (the usual ET): unique, binary search
        pos = sorted_positions(ids, parents)
    else:
        index = pd.Index(ids)
        if not index.is_unique:
            dup = ids[index.duplicated()][0]
            raise TraceError(f"duplicate ET node id {int(dup)}", path)
        pos = index.get_indexer(parents)
    is_root = (parents < 0) | (parents == ids)
    absent_root = (pos < 0) & np.isin(parents, _ROOT_IDS)
    dangling = (pos < 0) & ~is_root & ~absent_root
    if dangling.any():
        k = int(np.flatnonzero(dangling)[0])
        missing = np.unique(parents[dangling])
        msg = (
            f"{path}: {int(dangling.sum())} ET nodes point to {len(missing)} parent(s) the file "
            f"does not hold (first: node {int(ids[k])} -> missing node {int(parents[k])}); "
            "they load as top-level ops"
        )
        warn.append(msg)
        warnings.warn(msg, stacklevel=5)
    root = is_root | absent_root | dangling
    parents = np.where(root, -1, parents)
    ppos = np.where(root, -1, pos).astype(np.int64)
    # Pointer doubling: (ancestor, distance) pairs; sentinel n is the fixed point "above the roots".
    anc = np.append(np.where(ppos >= 0, ppos, n), n)
    dist = np.append((ppos >= 0).astype(np.int64), 0)
    for _ in range(64):
        if (anc == n).all():
            break
        dist = dist + dist[anc]
        anc = anc[anc]
    if not (anc == n).all():
        k = int(np.flatnonzero(anc[:n] != n)[0])
        raise TraceError(f"cycle in parent links (through node {int(ids[k])})", path)
    depth = dist[:n]
    # Children of the profiler's process root are depth 0 whether or not that root is present.
    proc = (ids == 1) & root
    if proc.any():
        depth = np.where(proc, 0, np.maximum(depth - 1, 0))
    n_children = np.bincount(ppos[ppos >= 0], minlength=n).astype(np.int32)
    return parents, depth.astype(np.int32), n_children
