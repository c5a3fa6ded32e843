"""A crafted trace cannot make replay touch a file outside `--out` (issue 26 item 1).

The ET is the real MLP capture (sample_traces/mlp) with hostile nodes appended under its
profiler step: `aten::from_file(victim, shared=True)` then `aten::fill_` (overwrites the victim
through the shared mapping), `from_file` on a path that does not exist (creates it), `from_file`
on a path relative to the working folder, `aten::save`, `aten::load`, torchvision's and
`image::` file ops, and one node for every registered op whose schema has a path-like string
argument (the same scan as tests/test_replay_policy_scan.py), each pointing at its own target in
a folder outside `--out`. Replay through the CLI in a fresh process, single-process and with
`--mirror-rank` (two ranks), must leave that folder, the working folder and everything else
under the test's temporary folder byte-for-byte and mtime-for-mtime as they were, and list each
hostile node as skipped with the policy's reason. With `--allow-trace-code` the same trace
rewrites the victim and creates the new file: the gate really gates.
"""

from __future__ import annotations

import copy
import gzip
import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from clirun import MLP_ET
from conftest import ROOT

from engine.replay.reasons import SkipReason

UNSAFE = SkipReason.UNSAFE_OP.value
_PATH_LIKE = re.compile(r"(file|path|dir|folder|url|uri|name|location|root|dest|src|prefix)", re.IGNORECASE)
_REVIEWED = {"group_name", "post_op_name", "api_name"}  # see test_replay_policy_scan.py
FILL = 7.0


def _snapshot(root: Path, skip: tuple[Path, ...] = ()) -> dict[str, tuple]:
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


def _path_like_schemas() -> list:
    found = []
    for s in torch._C._jit_get_all_schemas():
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


@pytest.fixture()
def crafted(tmp_path):
    """(trace path, victim, new-file path, hostile node ids); the targets lie in `tmp_path/outside`."""
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

    for target in (str(victim), str(created), "relative_victim.bin"):
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
    (tmp_path / "cwd").mkdir()
    return et, victim, created, b.hostile


def _replay(et: Path, out: Path, tmp_path: Path, *extra: str) -> dict:
    """`python -m engine.cli.main replay ET --out OUT` in a fresh process whose working folder is
    `tmp_path/cwd` (where a relative path in the trace would land)."""
    cmd = [sys.executable, "-m", "engine.cli.main", "replay", str(et), "--out", str(out)]
    cmd += ["--iters", "1", "--warmup", "0", "--no-profile", "--json", *extra]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MYSTIQUE_CACHE_DIR": str(tmp_path / "cache")}
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=tmp_path / "cwd", env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "Traceback" not in r.stderr
    return json.loads((out / "replay.json").read_text())


@pytest.mark.parametrize("mirror", [False, True], ids=["single-process", "mirror-rank"])
def test_crafted_trace_touches_no_file_outside_out(crafted, tmp_path, mirror):
    et, victim, created, hostile = crafted
    out = tmp_path / "out"
    before = _snapshot(tmp_path, skip=(out, tmp_path / "cache"))
    extra = ("--world-size", "2", "--mirror-rank", "0") if mirror else ()
    doc = _replay(et, out, tmp_path, *extra)
    after = _snapshot(tmp_path, skip=(out, tmp_path / "cache"))
    changed = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
    assert not changed, f"created, removed or changed outside --out: {changed}"  # bytes and mtimes
    assert victim.read_bytes() == bytes(range(64)) and not created.exists()
    assert list((tmp_path / "cwd").iterdir()) == []
    ranks = 2 if mirror else 1
    skipped = [s for s in _skips(doc, out) if s["op_id"] in hostile]
    assert len(skipped) == ranks * len(hostile)
    assert {s["reason"] for s in skipped} == {UNSAFE}
    assert all("--allow-trace-code" in s["detail"] for s in skipped)
    assert doc["coverage"]["by_reason"][UNSAFE] == ranks * len(hostile)
    assert doc["coverage"]["replayed"] > 0  # the rest of the MLP still replays


def _skips(doc: dict, out: Path) -> list[dict]:
    """Skipped ops of a single-process result, or of every rank of a distributed one."""
    if doc.get("world_size", 1) > 1:
        return [s for p in sorted(out.glob("rank*/replay.json")) for s in json.loads(p.read_text())["skipped_ops"]]
    return doc["skipped_ops"]


def test_allow_trace_code_really_runs_the_op(crafted, tmp_path):
    et, victim, created, _ = crafted
    doc = _replay(et, tmp_path / "out", tmp_path, "--allow-trace-code")
    # the opt-in is what the gate holds back: from_file + fill_ rewrote the victim, made a file
    filled = torch.full((16,), FILL, dtype=torch.float32).numpy().tobytes()
    assert victim.read_bytes() == filled
    assert created.read_bytes() == filled
    assert (tmp_path / "cwd" / "relative_victim.bin").read_bytes() == filled
    assert UNSAFE not in doc["coverage"]["by_reason"]
