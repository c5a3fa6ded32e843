"""Crafted execution traces that ask replay to touch files (shared by the op-policy tests).

The ET is the real MLP capture (sample_traces/mlp) with hostile nodes appended under its
profiler step, shaped like its own recorded nodes: `aten::from_file(victim, shared=True)` then
`aten::fill_` (overwrites the victim through the shared mapping), `from_file` on a path that
does not exist (creates it), optionally on a relative path, `aten::save`, `aten::load`,
`aten::_load_from_file`, `image::` and torchvision's file ops, and one node for every
registered op whose schema has a path-like string argument, each aimed at its own target in a
folder outside any `--out`.
"""

from __future__ import annotations

import copy
import gzip
import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path

import torch
from clirun import MLP_ET

_PATH_LIKE = re.compile(r"(file|path|dir|folder|url|uri|name|location|root|dest|src|prefix)", re.IGNORECASE)
_REVIEWED = {"group_name", "post_op_name", "api_name"}  # see test_replay_policy_scan.py
FILL = 7.0  # what the crafted fill_ writes
FILLED = torch.full((16,), FILL, dtype=torch.float32).numpy().tobytes()  # a victim after fill_


def snapshot(root: Path, skip: tuple[Path, ...] = ()) -> dict[str, tuple]:
    """{relative path: (kind, size, mtime_ns, sha256)} of everything under `root` but `skip`."""
    out: dict[str, tuple] = {}
    for p in sorted(root.rglob("*")):
        if any(p == s or s in p.parents for s in skip):
            continue
        st = p.lstat()
        digest = hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() and not p.is_symlink() else ""
        out[str(p.relative_to(root))] = ("dir" if p.is_dir() else "file", st.st_size, st.st_mtime_ns, digest)
    return out


class _Builder:
    """Appends nodes to the MLP ET, shaped like its own recorded nodes."""

    def __init__(self) -> None:
        self.doc = json.loads(gzip.decompress(MLP_ET.read_bytes()))
        self.tmpl = next(n for n in self.doc["nodes"] if n["name"] == "aten::relu")
        self.step = next(n["id"] for n in self.doc["nodes"] if n["name"].startswith("ProfilerStep"))
        self.next_id = max(n["id"] for n in self.doc["nodes"]) + 1
        self.next_tensor = 900_000
        self.hostile: dict[int, str] = {}  # node id -> op name

    def tensor(self, numel: int = 16) -> list:
        self.next_tensor += 2
        return [self.next_tensor, self.next_tensor + 1, 0, numel, 4, "cpu"]

    def add(self, name: str, schema: str, ins: list[tuple], outs: list[tuple], hostile: bool = True) -> int:
        n = copy.deepcopy(self.tmpl)
        n["id"], n["name"], n["ctrl_deps"] = self.next_id, name, self.step
        n["inputs"] = {k: [x[i] for x in ins] for i, k in enumerate(("values", "types", "shapes", "strides"))}
        n["outputs"] = {k: [x[i] for x in outs] for i, k in enumerate(("values", "types", "shapes", "strides"))}
        for a in n["attrs"]:
            if a["name"] == "op_schema":
                a["value"] = schema
        self.doc["nodes"].append(n)
        self.next_id += 1
        if hostile:
            self.hostile[n["id"]] = name
        return n["id"]

    def value(self, t, target: str) -> tuple | None:
        """(value, ET type, shape, strides) for an argument of JIT type `t`, or None."""
        k, text = t.kind(), str(t)
        if k == "OptionalType":
            return self.value(t.getElementType(), target)
        if k == "StringType":
            return (target, "String", [], [])
        if k in ("TensorType", "AnyType", "VarType"):
            return (self.tensor(), "Tensor(float)", [16], [1])
        if k == "ListType" and str(t.getElementType()) in ("int", "SymInt"):
            return ([16], "GenericList[Int]", [[]], [[]])
        if k == "ListType" and str(t.getElementType()) == "str":
            return ([target], "GenericList[String]", [[]], [[]])
        leaf = {
            "bool": (True, "Bool"),
            "int": (16, "Int"),
            "SymInt": (16, "Int"),
            "float": (1.0, "Double"),
            "Scalar": (1.0, "Double"),
            "ScalarType": (6, "Int"),
            "Layout": (0, "Int"),
            "MemoryFormat": (0, "Int"),
            "Device": ("cpu", "Device"),
        }.get(text)
        return (*leaf, [], []) if leaf else None

    def from_schema(self, s, target: str) -> int | None:
        ins = []
        for a in s.arguments:
            v = self.value(a.type, target)
            if v is None:
                if not str(a.type).startswith("Optional"):
                    return None
                v = ("<None>", "None", [], [])
            ins.append(v)
        outs = [(self.tensor(), "Tensor(float)", [16], [1]) for r in s.returns if r.type.kind() == "TensorType"]
        name = s.name  # the recorded name has no overload: the schema string carries it
        return self.add(name, str(s), ins, outs)


OUTSIZED_MIB = (381.5, 244.1, 244.1)
"""MiB that `outsized_factories`' three ops allocate by their arguments (hand count: arange(50e6)
in int64 50e6 x 8 B; eye(8000) and the outer product of two 8000-vectors in float32, 8000 x 8000
x 4 B each)."""


def outsized_factories(b: _Builder) -> list[int]:
    """`arange(end=N)`, `eye(n)` and `outer(a, b)` recorded with 16-element outputs while their
    arguments make them allocate hundreds of MiB (issue 31): their node ids."""
    none = ("<None>", "None", [], [])
    factory = "*, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor"
    long_out = b.tensor()
    long_out[4] = 8  # int64
    return [
        b.add("aten::arange", f"aten::arange(Scalar end, {factory}",
              [(50_000_000, "Int", [], []), none, none, ("cpu", "Device", [], []), none],
              [(long_out, "Tensor(long int)", [16], [1])]),
        b.add("aten::eye", f"aten::eye(SymInt n, {factory}",
              [(8000, "Int", [], []), (6, "Int", [], []), none, ("cpu", "Device", [], []), none],
              [(b.tensor(), "Tensor(float)", [16], [1])]),
        b.add("aten::outer", "aten::outer(Tensor self, Tensor vec2) -> Tensor",
              [(b.tensor(8000), "Tensor(float)", [8000], [1]), (b.tensor(8000), "Tensor(float)", [8000], [1])],
              [(b.tensor(), "Tensor(float)", [16], [1])]),
    ]  # fmt: skip


def _path_like_schemas() -> list:
    from engine.replay.standins import substitution

    found = []
    for s in torch._C._jit_get_all_schemas():
        if substitution(s.name):  # our own vLLM stand-ins (a test before may have defined them): no I/O
            continue
        if any(
            ("str" in str(a.type) or str(a.type) in ("Any", "t"))
            and _PATH_LIKE.search(a.name)
            and a.name not in _REVIEWED
            for a in s.arguments
        ):
            found.append(s)
    return found


FROM_FILE = (
    "aten::from_file(str filename, bool? shared=None, int? size=0, *, ScalarType? dtype=None, "
    "Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor"
)


@dataclass(frozen=True, kw_only=True)
class Crafted:
    et: Path  # the crafted ET
    victim: Path  # an existing file the trace maps and fills
    created: Path  # a path the trace would create
    hostile: dict[int, str]  # node id -> op name of every node that must be refused


def craft(tmp_path: Path, *, relative: bool = True) -> Crafted:
    """The crafted MLP ET in `tmp_path/traces`, its targets in `tmp_path/outside` (and, with
    `relative`, one relative path that lands in the reader's working folder)."""
    outside = tmp_path / "outside"
    outside.mkdir()
    victim = outside / "victim.bin"
    victim.write_bytes(bytes(range(64)))  # 16 float32
    (outside / "keep.txt").write_text("nothing may change me\n")
    created = outside / "created.bin"
    b = _Builder()

    def from_file(target: str) -> list:
        t = b.tensor()
        b.add(
            "aten::from_file",
            FROM_FILE,
            [
                (target, "String", [], []),
                (True, "Bool", [], []),
                (16, "Int", [], []),
                (6, "Int", [], []),
                (0, "Int", [], []),
                ("cpu", "Device", [], []),
                (False, "Bool", [], []),
            ],
            [(t, "Tensor(float)", [16], [1])],
        )
        return t

    for target in (str(victim), str(created), *(["relative_victim.bin"] if relative else [])):
        t = from_file(target)
        b.add(
            "aten::fill_",
            "aten::fill_.Scalar(Tensor(a!) self, Scalar value) -> Tensor(a!)",
            [(t, "Tensor(float)", [16], [1]), (FILL, "Double", [], [])],
            [(t, "Tensor(float)", [16], [1])],
            hostile=False,
        )
    b.add(
        "aten::save",
        "aten::save(t item, str filename) -> ()",
        [(b.tensor(), "Tensor(float)", [16], [1]), (str(outside / "saved.pt"), "String", [], [])],
        [],
    )
    for name, schema in [
        ("aten::load", ""),
        ("aten::_load_from_file", ""),
        ("image::read_file", "image::read_file(str path) -> Tensor"),
        ("torchvision::read_file", "torchvision::read_file(str filename) -> Tensor"),
    ]:
        b.add(
            name, schema, [(str(outside / "victim.bin"), "String", [], [])], [(b.tensor(), "Tensor(uint8)", [16], [1])]
        )
    b.add(
        "torchvision::write_file",
        "torchvision::write_file(str filename, Tensor data) -> ()",
        [(str(outside / "written.bin"), "String", [], []), (b.tensor(), "Tensor(uint8)", [16], [1])],
        [],
    )
    scanned = []
    for i, s in enumerate(_path_like_schemas()):
        nid = b.from_schema(s, str(outside / f"scan_{i}.bin"))
        if nid is not None:
            scanned.append(s.name + (f".{s.overload_name}" if s.overload_name else ""))
    assert {"aten::from_file", "aten::from_file.out", "aten::save"} <= set(scanned)
    et = tmp_path / "traces" / "crafted_et.json.gz"
    et.parent.mkdir()
    et.write_bytes(gzip.compress(json.dumps(b.doc).encode()))
    return Crafted(et=et, victim=victim, created=created, hostile=b.hostile)
