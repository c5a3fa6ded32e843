"""One recogniser of FBGEMM table-batched embedding (TBE) lookups, from an ET op's own name and arguments.

Why one home: compose's embedding sharding (engine/compose/shard) and the what-if `sharding`
edit (engine/simulate) both need "which ops are TBE lookups, and what tables do they hold".
Production TorchRec runs record many forms of the same lookup: every optimizer
(`split_embedding_codegen_lookup_{sgd,adagrad,rowwise_adagrad,adam,lamb,...}_function`), the
`_pt2` / `_cpu` suffixes, with or without the `fbgemm::` namespace, and the dense TBE
(`dense_embedding_codegen_lookup_function`); pooled (sum/mean) or sequence (pooling NONE).
Their argument lists differ, so arguments are found by name in the recorded `op_schema` when
the ET has one, else by the form's known positions (FBGEMM's signatures). Torch-free.

`why_not` answers for every embedding-like op that was not taken, so a refusal can say why.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass

MAX_COUNT = 2**62  # a count or dimension of a recorded TBE argument (beyond: a corrupt or hostile ET)


class TbeForm(enum.Enum):
    SPLIT_PT2 = "split_pt2"  # split_embedding_codegen_lookup_<opt>_function_pt2
    SPLIT = "split"  # split_embedding_codegen_lookup_<opt>_function[_cpu]
    DENSE = "dense"  # dense_embedding_codegen_lookup_function


class Pooling(enum.Enum):
    SUM = 0
    MEAN = 1
    NONE = 2  # sequence embeddings: one row per lookup, no bags


_LOOKUP = re.compile(
    r"^(?:fbgemm::)?(?:split_embedding_codegen_lookup_(?P<opt>\w+?)_function(?P<pt2>_pt2)?(?:_cpu)?"
    r"|(?P<dense>dense_embedding_codegen_lookup_function)(?:_cpu)?)$"
)
# names that look like embeddings but are not a lookup form above: listed when no table is found
_EMBEDDING_LIKE = re.compile(r"embedding|fbgemm::|permute_2D_sparse|asynchronous_complete_cumsum", re.I)

# argument positions per form (FBGEMM's signatures), used when the ET records no op_schema
_POSITIONS: dict[TbeForm, dict[str, int]] = {
    # (placeholder, weights[], D_offsets, total_D, max_D, hash_size_cumsum, total_hash_size_bits,
    #  indices, offsets, pooling_mode, ...)
    TbeForm.SPLIT_PT2: {
        "weights": 1,
        "D_offsets": 2,
        "total_D": 3,
        "max_D": 4,
        "indices": 7,
        "offsets": 8,
        "pooling_mode": 9,
    },
    # (placeholder, dev_weights, uvm_weights, lxu_cache_weights, weights_placements, weights_offsets,
    #  D_offsets, total_D, max_D, hash_size_cumsum, total_hash_size_bits, indices, offsets, pooling_mode, ...)
    TbeForm.SPLIT: {
        "weights": 1,
        "D_offsets": 6,
        "total_D": 7,
        "max_D": 8,
        "indices": 11,
        "offsets": 12,
        "pooling_mode": 13,
    },
    # (dev_weights, weights_offsets, D_offsets, total_D, max_D, hash_size_cumsum, total_hash_size_bits,
    #  indices, offsets, pooling_mode, ...)
    TbeForm.DENSE: {
        "weights": 0,
        "D_offsets": 2,
        "total_D": 3,
        "max_D": 4,
        "indices": 7,
        "offsets": 8,
        "pooling_mode": 9,
    },
}
_SCHEMA_NAMES = {"weights": ("weights", "dev_weights")}


@dataclass(frozen=True, kw_only=True, slots=True)
class TbeKind:
    """What a lookup's name says: its form and optimizer ("" for dense)."""

    form: TbeForm
    optimizer: str


@dataclass(frozen=True, kw_only=True, slots=True)
class TbeArgs:
    """A TBE lookup's arguments as recorded: positions (for rewriting) and counts."""

    kind: TbeKind
    pos: dict[str, int]
    weight: list  # the weights tensor record [id, storage, offset, numel, itemsize, device]
    weight_numel: int
    tables: int  # len(D_offsets) - 1
    total_d: int
    max_d: int
    indices: list
    lookups: int  # len(indices)
    offsets: list
    offsets_len: int
    pooling: Pooling


class TbeUnreadable(ValueError):
    """A recognised lookup whose arguments cannot be read (the message names what is missing)."""


def tbe_kind(name: str) -> TbeKind | None:
    """The TBE lookup form a node name names, else None (backward and forward-only kernels are
    not lookups: the lookup op is the one whose arguments hold the tables)."""
    m = _LOOKUP.match(name or "")
    if m is None:
        return None
    if m.group("dense"):
        return TbeKind(form=TbeForm.DENSE, optimizer="")
    return TbeKind(form=TbeForm.SPLIT_PT2 if m.group("pt2") else TbeForm.SPLIT, optimizer=m.group("opt"))


def embedding_like(name: str) -> bool:
    return bool(_EMBEDDING_LIKE.search(name or ""))


def _schema_positions(schema: str | None) -> dict[str, int]:
    """Argument name -> position from a recorded op_schema string ("" or None: {})."""
    if not schema or "(" not in schema:
        return {}
    body = schema[schema.index("(") + 1 : schema.rfind(") ->") if ") ->" in schema else len(schema)]
    out = {}
    for i, arg in enumerate(body.split(",")):
        words = arg.split("=")[0].split()
        if len(words) >= 2:
            out[words[-1]] = i
    return out


schema_positions = _schema_positions


def _tensor(v) -> bool:
    return isinstance(v, list) and len(v) >= 5 and isinstance(v[0], int) and isinstance(v[1], int) and v[3] is not None


def read_tbe(name: str, inputs: dict, schema: str | None = None) -> TbeArgs | None:
    """The TBE arguments of a node (`inputs`: its {"values", "shapes", ...}); None when the name is
    no TBE lookup form; TbeUnreadable (one line: the op and what is missing) when it is one but
    its arguments cannot be read."""
    kind = tbe_kind(name)
    if kind is None:
        return None
    pos = dict(_POSITIONS[kind.form])
    named = _schema_positions(schema)
    for key in pos:
        for alias in _SCHEMA_NAMES.get(key, (key,)):
            if alias in named:
                pos[key] = named[alias]
                break
    vals, shapes = inputs.get("values") or [], inputs.get("shapes") or []

    def arg(key: str):
        i = pos[key]
        if i >= len(vals) or i >= len(shapes):
            raise TbeUnreadable(f"{name}: argument {key} (position {i}) not recorded ({len(vals)} arguments)")
        return vals[i], shapes[i]

    w, w_shape = arg("weights")
    if isinstance(w, list) and w and isinstance(w[0], list):  # pt2: a list of tensors, dev_weights first
        w, w_shape = w[0], (w_shape[0] if isinstance(w_shape, list) and w_shape else [])
    if not _tensor(w) or (w[1] == 0 and w[3] == 0):  # no record, or an undefined tensor
        raise TbeUnreadable(f"{name}: no weights tensor recorded (argument {pos['weights']})")
    d_off = arg("D_offsets")[1]
    total_d, max_d = arg("total_D")[0], arg("max_D")[0]
    idx, idx_shape = arg("indices")
    off, off_shape = arg("offsets")
    pm = arg("pooling_mode")[0] if pos["pooling_mode"] < len(vals) else 0
    counts = {
        "weights numel": w_shape[0] if isinstance(w_shape, list) and w_shape else w[3],
        "D_offsets length": d_off[0] if isinstance(d_off, list) and d_off else None,
        "indices length": idx_shape[0] if isinstance(idx_shape, list) and idx_shape else None,
        "offsets length": off_shape[0] if isinstance(off_shape, list) and off_shape else None,
        "total_D": total_d,
        "max_D": max_d,
    }
    for what, v in counts.items():
        if v is None:
            raise TbeUnreadable(f"{name}: no {what} recorded")
        lo = 1 if what in ("total_D", "max_D", "D_offsets length", "offsets length") else 0
        if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= MAX_COUNT:
            raise TbeUnreadable(f"{name}: {what} is {v!r}; it must be an integer between {lo} and 2**62")
    if counts["D_offsets length"] < 2:
        raise TbeUnreadable(f"{name}: D_offsets of length {counts['D_offsets length']} holds no table")
    try:
        pooling = Pooling(pm)
    except ValueError:
        raise TbeUnreadable(f"{name}: pooling_mode {pm!r} is none of sum (0), mean (1), none (2)") from None
    return TbeArgs(
        kind=kind,
        pos=pos,
        weight=w,
        weight_numel=int(counts["weights numel"]),
        tables=int(counts["D_offsets length"]) - 1,
        total_d=int(total_d),
        max_d=int(max_d),
        indices=idx,
        lookups=int(counts["indices length"]),
        offsets=off,
        offsets_len=int(counts["offsets length"]),
        pooling=pooling,
    )


@dataclass(frozen=True, kw_only=True, slots=True)
class TbeTable:
    """One table of a TBE lookup: the even split its arguments allow (module docstring of
    engine.compose.shard.tbe: the ET records shapes, not D_offsets' contents)."""

    table: int  # index within its TBE
    rows: int
    dim: int
    lookups: int
    batch: int
    exact_dims: bool


def tbe_tables(a: TbeArgs) -> list[TbeTable]:
    T = a.tables
    dim = max(1, a.total_d // T)
    rows = a.weight_numel // max(1, T * dim)
    batch = (a.offsets_len - 1) // T
    lookups = a.lookups // T
    exact = a.max_d * T == a.total_d
    return [TbeTable(table=t, rows=rows, dim=dim, lookups=lookups, batch=batch, exact_dims=exact) for t in range(T)]


def why_not(names_inputs: list[tuple[str, dict, str | None]], limit: int = 6) -> str:
    """'; '-joined reasons why the embedding-like ops seen were not taken as tables ("" if none)."""
    seen: dict[str, str] = {}
    for name, inputs, schema in names_inputs:
        if name in seen or not embedding_like(name):
            continue
        try:
            a = read_tbe(name, inputs, schema)
        except TbeUnreadable as e:
            seen[name] = str(e).split(": ", 1)[1]
            continue
        if a is not None:
            seen[name] = "a readable TBE lookup"
        elif "backward" in name:
            seen[name] = "a backward kernel, not a lookup"
        elif "forward" in name:
            seen[name] = "a forward kernel inside a lookup, not the lookup"
        elif "embedding" in name:
            seen[name] = "no known lookup form: neither embedding_bag nor a TBE lookup"
        else:
            seen[name] = "KJT/collective plumbing, no table"
    items = [f"{k} ({v})" for k, v in seen.items()]
    more = f"; and {len(items) - limit} more" if len(items) > limit else ""
    return "; ".join(items[:limit]) + more


__all__ = [
    "Pooling",
    "TbeArgs",
    "TbeForm",
    "TbeKind",
    "TbeTable",
    "TbeUnreadable",
    "read_tbe",
    "schema_positions",
    "tbe_kind",
    "tbe_tables",
    "why_not",
]
