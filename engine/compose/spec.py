"""`BenchmarkSpec`: the versioned JSON a user writes (or the UI saves) to compose a benchmark.

Why a typed, validated dataclass behind the JSON: specs are hand-edited files; every mistake
(unknown field, negative repeat, bad dtype) must become one `TraceError` naming the spec file
and the field, before any trace is loaded. The spec and its segments are engine settings
(engine.settings.Settings: frozen, each field's rules declared on it, checked however the spec
was made); a mistake reads `spec FIELD: problem` (`spec segments[0].repeat: must be >= 1, got
0`), and `load_spec` puts the file's path before it. A changed spec is a new one
(`dataclasses.replace`), checked like the first.

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
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Annotated, Any

from engine import jsonio
from engine.compose.shard.kinds import EMBEDDING_PLANS, Sharding, sharding_from_dict
from engine.errors import TraceError, reject_unknown_fields
from engine.rules import MAX_FACTOR, Between, Matches, NonEmpty, OneOf, Positive
from engine.settings import FieldError, Settings

SPEC_VERSION = 1
DTYPES = ("fp32", "bf16", "fp16")  # a dtype to change the floating tensors to (null: as traced)


MAX_NAME_CHARS = 200
MAX_DEVICES = 1024  # cuda:N beyond any machine's device count (a typo or a 20-digit number)
NAME = Matches(rf"[^\x00-\x1f\x7f]{{1,{MAX_NAME_CHARS}}}", f"1 to {MAX_NAME_CHARS} printable characters")
DEVICE = Matches(
    r"cpu|cuda(:(0|[1-9][0-9]{0,2}|10[01][0-9]|102[0-3]))?", f"'cpu', 'cuda' or 'cuda:N' (N < {MAX_DEVICES})"
)


@dataclass(frozen=True, kw_only=True, slots=True)
class Segment(Settings):
    """One ordered piece of the benchmark: a Selection on a source trace, repeated `repeat` times.

    `selection` stays the JSON object the user wrote (engine.graph.selection_from_dict checks it),
    so a saved spec reads back as written."""

    WHAT = "segment"
    selection: dict = field(default_factory=dict)
    source: Annotated[int, Between(0)] = 0  # an index into the spec's sources (the spec checks the range)
    repeat: Annotated[int, Between(1)] = 1
    label: str = ""

    def validate(self) -> None:
        from engine.graph import selection_from_dict

        try:
            selection_from_dict(self.selection)
        except TraceError as e:
            raise self.bad("selection", e.problem) from None


@dataclass(frozen=True, kw_only=True, slots=True)
class BenchmarkSpec(Settings):
    """A validated benchmark spec (JSON layout in the module docstring); `from_dict` reads the
    JSON object (segments and sharding as objects), the constructor takes their dataclasses."""

    WHAT = "spec"
    version: int = SPEC_VERSION
    name: Annotated[str, NAME] = "benchmark"
    sources: Annotated[tuple[str, ...], NonEmpty()]
    segments: Annotated[tuple[Segment, ...], NonEmpty()]
    device: Annotated[str, DEVICE] = "cpu"
    dtype: Annotated[str | None, OneOf(DTYPES)] = None
    batch_scale: Annotated[float, Positive(), Between(1 / MAX_FACTOR, MAX_FACTOR)] = 1.0
    batch_size: Annotated[int | None, Between(1)] = None  # the traced batch B
    warmup: Annotated[int, Between(0)] = 1
    iters: Annotated[int, Between(1)] = 5
    sharding: Sharding | None = None
    base_dir: str | None = None  # where relative sources resolve (the spec file's folder); not saved

    def validate(self) -> None:
        if self.version != SPEC_VERSION:
            raise self.bad("version", f"must be {SPEC_VERSION}, got {self.version}")
        for i, s in enumerate(self.segments):
            if s.source >= len(self.sources):
                raise self.bad(
                    f"segments[{i}].source", f"must be < {len(self.sources)} (the number of sources), got {s.source}"
                )
        self._set("batch_scale", float(self.batch_scale))  # saved as a number with a point: 2 -> 2.0

    @classmethod
    def from_dict(cls, d: Any, base_dir: str | os.PathLike | None = None) -> BenchmarkSpec:
        """Validate a JSON object (TraceError names the field); relative sources resolve against
        `base_dir`, then the cwd."""
        if not isinstance(d, dict):
            raise TraceError("a benchmark spec must be a JSON object")
        reject_unknown_fields(d, {f.name for f in fields(cls)} - {"base_dir"}, cls.WHAT)
        for req in ("sources", "segments"):
            if req not in d:
                raise TraceError(f"spec needs a '{req}' field")
        kw = dict(d)
        if isinstance(kw["segments"], list):
            kw["segments"] = tuple(_segment(s, i) for i, s in enumerate(kw["segments"]))
        if kw.get("sharding") is not None:
            kw["sharding"] = sharding_from_dict(kw["sharding"])
        return cls(**kw, base_dir=None if base_dir is None else os.fspath(base_dir))

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

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in Settings.to_dict(self).items() if k != "base_dir"}


def _segment(d: Any, i: int) -> Segment:
    """The spec's segments[i] from its JSON object; an error names `segments[i].field`."""
    where = f"segments[{i}]"
    if not isinstance(d, dict):
        raise FieldError(BenchmarkSpec.WHAT, where, f"expected an object, got {d!r}")
    reject_unknown_fields(d, {f.name for f in fields(Segment)}, where)
    try:
        return Segment(**d)
    except FieldError as e:
        raise FieldError(BenchmarkSpec.WHAT, f"{where}.{e.field}", e.detail) from None


def spec_from_dict(d: Any, base_dir: str | os.PathLike | None = None) -> BenchmarkSpec:
    """Validate a JSON object into a BenchmarkSpec (TraceError names the field)."""
    return BenchmarkSpec.from_dict(d, base_dir)


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
    from engine.outdir import atomic_write

    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    return atomic_write(p, jsonio.dumps(spec.to_dict(), option=jsonio.OPT_INDENT_2))


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
