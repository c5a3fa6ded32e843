"""`BenchmarkSpec`: the versioned JSON a user writes (or the UI saves) to compose a benchmark.

Why a typed, validated dataclass behind the JSON: specs are hand-edited files; every mistake
(unknown field, negative repeat, bad dtype) must become one `TraceError` naming the spec file
and the field, before any trace is loaded.

JSON layout (version 1)::

    {"version": 1,
     "sources": ["sample_traces/mlp/mlp_et.json.gz"],      # relative to the spec file, else cwd
     "segments": [{"selection": {...engine.graph Selection...}, "source": 0, "repeat": 1,
                   "label": "all"}],
     "device": "cpu", "dtype": null | "fp32" | "bf16" | "fp16", "batch_scale": 1.0,
     "batch_size": null,                                     # optional: the traced batch B
     "warmup": 1, "iters": 5,
     "sharding": null | {"kind": "embedding", "plan": "table"|"row"|"column"|"greedy", "ranks": N}
                      | {"kind": "dp", "degree": N} | {"kind": "tp", "degree": N}}
                                          # one dataclass per kind: engine.compose.shard.kinds
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from engine import jsonio
from engine.compose.shard.kinds import EMBEDDING_PLANS, SHARDINGS, Sharding, sharding_from_dict
from engine.errors import TraceError, reject_unknown_fields
from engine.rules import MAX_FACTOR, Between, Finite, Positive, Rule, problem_with

SPEC_VERSION = 1
DTYPES = (None, "fp32", "bf16", "fp16")


MAX_NAME_CHARS = 200
MAX_DEVICES = 1024  # cuda:N beyond any machine's device count (a typo or a 20-digit number)
_NAME = re.compile(rf"[^\x00-\x1f\x7f]{{1,{MAX_NAME_CHARS}}}")  # no NUL or other control characters
_DEVICE = re.compile(r"cpu|cuda(:(0|[1-9][0-9]{0,2}|10[01][0-9]|102[0-3]))?")


def _rules(name: str, value: Any, *rules: Rule) -> None:
    """TraceError "name: problem" from the first of the field rules (engine.rules) `value` fails."""
    for r in rules:
        problem = problem_with(r, value)
        if problem is not None:
            raise TraceError(f"{name} {problem}")


def _int(v: Any, what: str, lo: int) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < lo:
        raise TraceError(f"{what} must be an integer >= {lo}, not {v!r}")
    return v


@dataclass(kw_only=True, slots=True)
class Segment:
    """One ordered piece of the benchmark: a Selection on a source trace, repeated `repeat` times."""

    selection: dict = field(default_factory=dict)
    source: int = 0
    repeat: int = 1
    label: str = ""

    def __post_init__(self) -> None:
        from engine.graph import selection_from_dict

        if not isinstance(self.selection, dict):
            raise TraceError(f"segment selection must be an object, not {self.selection!r}")
        selection_from_dict(self.selection)  # validates (TraceError)
        self.source = _int(self.source, "segment source", 0)
        self.repeat = _int(self.repeat, "segment repeat", 1)
        if not isinstance(self.label, str):
            raise TraceError(f"segment label must be a string, not {self.label!r}")

    def to_dict(self) -> dict:
        return {"selection": dict(self.selection), "source": self.source, "repeat": self.repeat, "label": self.label}


@dataclass(kw_only=True, slots=True)
class BenchmarkSpec:
    """A validated benchmark spec (JSON layout in the module docstring)."""

    sources: list[str]
    segments: list[Segment]
    version: int = SPEC_VERSION
    name: str = "benchmark"
    device: str = "cpu"
    dtype: str | None = None
    batch_scale: float = 1.0
    batch_size: int | None = None
    warmup: int = 1
    iters: int = 5
    sharding: Sharding | None = None
    base_dir: str | None = None  # where relative sources resolve (the spec file's folder)

    def __post_init__(self) -> None:
        if self.version != SPEC_VERSION:
            raise TraceError(f"version must be {SPEC_VERSION}, not {self.version!r}")
        if not isinstance(self.sources, list) or not self.sources or not all(isinstance(s, str) for s in self.sources):
            raise TraceError("sources must be a non-empty list of trace paths")
        if not isinstance(self.segments, list) or not self.segments:
            raise TraceError("segments must be a non-empty list")
        self.segments = [s if isinstance(s, Segment) else _segment(s, i) for i, s in enumerate(self.segments)]
        for i, s in enumerate(self.segments):
            if s.source >= len(self.sources):
                raise TraceError(f"segments[{i}].source {s.source} is out of range ({len(self.sources)} sources)")
        if not isinstance(self.name, str) or not _NAME.fullmatch(self.name):
            raise TraceError(f"name must be a string of 1 to {MAX_NAME_CHARS} printable characters, not {self.name!r}")
        if not isinstance(self.device, str) or not _DEVICE.fullmatch(self.device):
            raise TraceError(f"device must be 'cpu', 'cuda' or 'cuda:N' (N < {MAX_DEVICES}), not {self.device!r}")
        if self.dtype not in DTYPES:
            raise TraceError(f"dtype must be null, 'fp32', 'bf16' or 'fp16', not {self.dtype!r}")
        if isinstance(self.batch_scale, bool) or not isinstance(self.batch_scale, (int, float)):
            raise TraceError(f"batch_scale must be a number > 0, not {self.batch_scale!r}")
        _rules("batch_scale", self.batch_scale, Finite(), Positive(), Between(1 / MAX_FACTOR, MAX_FACTOR))
        self.batch_scale = float(self.batch_scale)
        if self.batch_size is not None:
            self.batch_size = _int(self.batch_size, "batch_size", 1)
        self.warmup = _int(self.warmup, "warmup", 0)
        self.iters = _int(self.iters, "iters", 1)
        if self.sharding is not None and not isinstance(self.sharding, tuple(SHARDINGS.values())):
            self.sharding = sharding_from_dict(self.sharding)

    def source_paths(self) -> list[Path]:
        """Absolute source paths: relative ones resolve against the spec's folder, then the cwd."""
        out = []
        for s in self.sources:
            p = Path(s).expanduser()
            if not p.is_absolute():
                cands = ([Path(self.base_dir) / p] if self.base_dir else []) + [Path.cwd() / p]
                p = next((c for c in cands if c.exists()), cands[0])
            out.append(p)
        return out

    def to_dict(self) -> dict:
        return {
            "version": self.version,
            "name": self.name,
            "sources": list(self.sources),
            "segments": [s.to_dict() for s in self.segments],
            "device": self.device,
            "dtype": self.dtype,
            "batch_scale": self.batch_scale,
            "batch_size": self.batch_size,
            "warmup": self.warmup,
            "iters": self.iters,
            "sharding": self.sharding.to_dict() if self.sharding else None,
        }


def _segment(d: Any, i: int) -> Segment:
    if not isinstance(d, dict):
        raise TraceError(f"segments[{i}] must be an object")
    reject_unknown_fields(d, {f.name for f in fields(Segment)}, f"segments[{i}]")
    try:
        return Segment(**d)
    except TraceError as e:
        raise TraceError(f"segments[{i}]: {e.problem}") from None


def spec_from_dict(d: Any, base_dir: str | os.PathLike | None = None) -> BenchmarkSpec:
    """Validate a JSON object into a BenchmarkSpec (TraceError names the field)."""
    if not isinstance(d, dict):
        raise TraceError("a benchmark spec must be a JSON object")
    known = {f.name for f in fields(BenchmarkSpec)} - {"base_dir"}
    unknown = sorted(set(d) - known)
    if unknown:
        raise TraceError(f"unknown spec field(s): {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    for req in ("sources", "segments"):
        if req not in d:
            raise TraceError(f"spec needs a '{req}' field")
    return BenchmarkSpec(**d, base_dir=None if base_dir is None else os.fspath(base_dir))


def read_json_file(path: str | os.PathLike, what: str = "spec") -> Any:
    """A small JSON file read defensively (engine.trace.safe_io.read_spec_bytes: regular files
    only, bounded size); errors name the file."""
    from engine.trace.safe_io import read_spec_bytes

    p = Path(path)
    data = read_spec_bytes(p, what)
    try:
        return jsonio.loads(data)
    except jsonio.JSONDecodeError as e:
        raise TraceError(f"{what} is not valid JSON: {str(e).splitlines()[0]}", p) from None


def load_spec(path: str | os.PathLike) -> BenchmarkSpec:
    """Read and validate a spec file; errors name the file."""
    p = Path(path)
    data = read_json_file(p, "spec")
    try:
        return spec_from_dict(data, base_dir=p.resolve().parent)
    except TraceError as e:
        raise TraceError(e.problem, p) from None


def save_spec(spec: BenchmarkSpec, path: str | os.PathLike) -> Path:
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(jsonio.dumps(spec.to_dict(), option=jsonio.OPT_INDENT_2))
    return p


__all__ = [
    "EMBEDDING_PLANS",
    "SPEC_VERSION",
    "BenchmarkSpec",
    "Segment",
    "Sharding",
    "load_spec",
    "save_spec",
    "spec_from_dict",
]
