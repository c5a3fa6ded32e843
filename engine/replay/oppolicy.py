"""Which recorded operators replay may call: none that can touch files, devices or the network.

Why: an execution trace is data from someone else, but replay turns its nodes into real calls.
`aten::from_file(path, shared=True)` followed by `aten::fill_` maps a file named by the trace
and overwrites it; `aten::save` writes one; library ops (torchvision's `read_file` /
`write_file`, FBGEMM's SSD caches, debug loaders) read or write paths. A trace must never make
replay do that, so every op resolved for a call (single-process, each distributed rank, the
dashboard's worker and compose's shape check all go through `dispatch.resolve`) is checked
here first, against the *live* overload's schema (a trace cannot lie about it), and refused
with `SkipReason.UNSAFE_OP` unless the user opts in with `--allow-trace-code`.

The rule fails closed:
- an op whose name is on the IO deny-list (`DENIED`: from_file, save, load, `_load_from_*`,
  `image::*`, torchvision's file/codec ops, profiler, debug and symmetric-memory ops, ...) is
  refused whatever its arguments;
- otherwise every argument whose type can carry a string (`str`, `str?`, `str[]`, a `Dict`
  keyed by str, `Any`, a type variable `t`) must be a plain string argument whose *name* is one
  of `BENIGN_STR_ARGS`: enum-like options such as `rounding_mode`, `equation`, `approximate`,
  `reduce`, `mode`, `norm`. Any other string argument (`filename`, `path`, `name`, an
  unknown new one) refuses the op. So `aten::div(rounding_mode=)`, `einsum`, `gelu`, `pad`
  and the reductions still replay, while a new torch version's `foo(str path)` is refused
  without anyone editing this file (tests/test_op_policy.py scans every registered schema).
"""

from __future__ import annotations

import re
from typing import Any

# plain-string arguments that select an algorithm/option and never name a file (from a scan of
# every schema in torch 2.11-2.13, fbgemm_gpu, torchvision): adding one needs a look at every
# op that uses the name, which tests/test_op_policy.py lists
BENIGN_STR_ARGS = frozenset(
    {
        "UPLO",
        "activation",
        "algorithm",
        "api_name",
        "approximate",
        "assert_msg",
        "attr",
        "binary_attr",
        "binary_post_op",
        "driver",
        "equation",
        "group_name",  # a registered process group's name (collectives)
        "groups",  # fbgemm regroup_keyed_tensor feature groups
        "indexing",
        "interpolation",
        "keys",  # fbgemm regroup_keyed_tensor feature keys
        "mode",
        "norm",
        "ord",
        "p",
        "pad_mode",
        "padding",
        "padding_side",
        "post_op_algorithm",
        "post_op_name",
        "red_op",
        "reduce",
        "reduce_op",
        "rounding_mode",
        "side",
        "unary_algorithm",
        "unary_attr",
        "unary_post_op",
        "unary_post_op_algorithm",
    }
)

# op names refused whatever their schema says: they open, map, save or load files, decode media
# from files, record profiles, or reach other devices' memory / the network
DENIED_NAMESPACES = ("image", "video_reader", "profiler", "debugprims", "symm_mem", "prim")
DENIED_WORDS = re.compile(
    r"(^|_)(load|loads|save|saves|read|write|open|mmap|dump|print|file|files|path|url|download|upload"
    r"|pickle|unpickle|serialize|deserialize|socket|sox|ffmpeg|video|audio|jpeg|png|image)(_|$)"
)
DENIED_NAMES = re.compile(
    r"^(aten::(from_file|save|load|_save\w*|_load\w*)"
    r"|torchvision::(read_file|write_file|decode_\w+|encode_\w+|_read_video\w*|_probe_video\w*)"
    r"|torchaudio::\w*(sox|ffmpeg|_io_)\w*"
    r"|\w+::_?load_from_\w+)$"
)
DENIED = (
    "aten::from_file, aten::save, aten::load, aten::_save*, *::_load_from_*, image::*, video_reader::*, "
    "torchvision::read_file/write_file/decode_*/encode_*, torchaudio sox/ffmpeg ops, profiler::*, "
    "debugprims::*, symm_mem::*, prim::*, and any op whose name has a word such as load, save, read, "
    "write, open, mmap, dump, print, file, path, url"
)
HINT = "opt in with --allow-trace-code"


def denied_name(name: str) -> str | None:
    """Why the op `ns::name[.overload]` is refused by name alone, or None."""
    ns, _, rest = name.partition("::")
    op = rest.split(".", 1)[0]
    base = f"{ns}::{op}"
    if ns in DENIED_NAMESPACES:
        return f"{name}: namespace '{ns}::' may touch files, devices or the network"
    if DENIED_NAMES.match(base) or DENIED_WORDS.search(op):
        return f"{name} may open, map, save or load files"
    return None


def _can_hold_str(t: Any) -> bool:
    """Can a value of JIT type `t` be (or contain) a string?"""
    kind = t.kind()
    if kind in ("StringType", "AnyType", "VarType"):
        return True
    return any(_can_hold_str(c) for c in t.containedTypes())


def _plain_str(t: Any) -> bool:
    """`str`, `str?`, `str[]`, `str[][]`, `str[]?`: strings and nothing else (no Any, no `t`)."""
    kind = t.kind()
    if kind == "StringType":
        return True
    if kind in ("OptionalType", "ListType"):
        return all(_plain_str(c) for c in t.containedTypes())
    return False


def refusal(schema: Any, name: str | None = None) -> str | None:
    """Why the op with FunctionSchema `schema` must not run on a trace's behalf, or None.

    `name` is the recorded name (shown in the message; the schema's own name is checked too)."""
    shown = name or schema.name
    for n in dict.fromkeys((schema.name, shown)):  # the live name first, each once
        why = denied_name(n)
        if why:
            return why
    for a in schema.arguments:
        if not _can_hold_str(a.type):
            continue
        if a.name in BENIGN_STR_ARGS and _plain_str(a.type):
            continue
        return f"{shown}: argument '{a.name}' ({a.type}) may name a file, device or address"
    return None


__all__ = [
    "BENIGN_STR_ARGS",
    "DENIED",
    "DENIED_NAMES",
    "DENIED_NAMESPACES",
    "DENIED_WORDS",
    "HINT",
    "denied_name",
    "refusal",
]
