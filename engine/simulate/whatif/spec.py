"""The what-if spec: versioned JSON, a list of edits applied in order.

    {"version": 1, "edits": [
        {"kind": "speedup", "factor": 2.0, "category": "gemm"},
        {"kind": "layers", "module": "blocks\\.1$", "copies": 2},
        {"kind": "batch", "scale": 2.0, "size": 3, "multiples": [128]},
        {"kind": "data_parallel", "ranks": 1024}
    ]}

Why a registry of edit dataclasses: each edit is one small module that declares its fields
(typed, each with its rules: `Annotated[int, Between(1, 1000)]`, see engine/rules.py) and documents its
assumptions; the parser looks the kind up instead of branching on it, and every error names the
offending field (`edits[2].scale`).
"""

from __future__ import annotations

import dataclasses
import sys
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

if sys.version_info >= (3, 11):
    from typing import dataclass_transform
else:  # pragma: no cover -- Python 3.10
    from typing_extensions import dataclass_transform

from engine.errors import TraceError
from engine.jsonio import BigInt, DocumentError, loads_document
from engine.rules import Rule, bounds, field_rules, problem_with

if TYPE_CHECKING:
    from engine.simulate.whatif.context import EditContext

SPEC_VERSION = 1


class SpecError(TraceError):
    """A what-if spec problem; `field` is the dotted path of the offending field."""

    def __init__(self, field_path: str, problem: str, path: str | None = None):
        self.field = field_path
        self.detail = problem
        super().__init__(f"what-if spec field '{field_path}': {problem}", path)


class Edit:
    """Base of all edits. Subclasses are kw_only slotted dataclasses registered with @register(kind).

    `stage`: "events" edits rewrite the events table before the graph is built (structure);
    "graph" edits change the built graph's segment lengths or edges (cost); "result" edits
    read the scheduled prediction (analytic models such as the 1F1B pipeline).
    """

    kind: ClassVar[str] = ""
    stage: ClassVar[str] = "graph"
    assumptions: ClassVar[str] = ""
    rules: ClassVar[dict[str, tuple[Rule, ...]]] = {}  # field -> its declared rules (set by @register)

    def __post_init__(self) -> None:
        """Every edit, however made (parsed spec or Python), passes its fields' rules, then `check`."""
        for name, rules in self.rules.items():
            for rule in rules:
                problem = problem_with(rule, getattr(self, name))
                if problem is not None:
                    raise bad(name, problem)
        self.check()

    def check(self) -> None:
        """Rules that join several fields (override where an edit has one); `raise bad(field, problem)`."""

    def apply(self, ctx: EditContext) -> None:  # pragma: no cover - abstract
        raise NotImplementedError


EDITS: dict[str, type[Edit]] = {}
E = TypeVar("E", bound=Edit)


@dataclass_transform(kw_only_default=True)
def register(kind: str, stage: str = "graph") -> Callable[[type[E]], type[E]]:
    """Class decorator: make an edit a keyword-only slotted dataclass (the one shape every edit
    has, so it is set here once) and enter it in `EDITS` as `kind`, applied at `stage`.

    Its `assumptions` are the last paragraph of its module's docstring, after "Assumptions: ":
    the module documents the model once, for readers and for the simulation report alike."""

    def enter(cls: type[E]) -> type[E]:
        if any("__post_init__" in vars(k) for k in cls.__mro__ if k is not Edit):
            raise TypeError(f"edit {kind!r}: declare field rules (engine.rules) or override check(), not __post_init__")
        cls = dataclass(kw_only=True, slots=True)(cls)
        hints = typing.get_type_hints(cls, include_extras=True)
        declared = {
            name: field_rules(hint)
            for name, hint in hints.items()
            if name in {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]  # cls was just made a dataclass
        }
        cls.rules = {name: rules for name, rules in declared.items() if rules}
        doc = sys.modules[cls.__module__].__doc__ or ""
        if "Assumptions: " not in doc:
            raise TypeError(f"{cls.__module__} docstring lacks the 'Assumptions: ' paragraph of edit {kind!r}")
        cls.kind, cls.stage = kind, stage
        cls.assumptions = doc.split("Assumptions: ", 1)[1].strip().replace("\n", " ")
        EDITS[kind] = cls
        return cls

    return enter


def _check_type(value: Any, tp: Any, where: str) -> Any:
    origin = typing.get_origin(tp)
    if tp is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        errs = []
        for a in args:
            if a is type(None):
                continue
            try:
                return _check_type(value, a, where)
            except SpecError as exc:
                errs.append(exc)
        raise errs[0] if errs else SpecError(where, f"unexpected value {value!r}")
    if origin in (list, tuple):
        if not isinstance(value, (list, tuple)):
            raise SpecError(where, f"expected a list, got {type(value).__name__}")
        (inner,) = typing.get_args(tp)[:1] or (Any,)
        return tuple(_check_type(v, inner, f"{where}[{i}]") for i, v in enumerate(value))
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise SpecError(where, f"expected a number, got {value!r}")
        try:
            return float(value) if not isinstance(value, BigInt) else value
        except OverflowError:  # an integer past float range: Finite names the field
            return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise SpecError(where, f"expected an integer, got {value!r}")
        return value
    if tp is str:
        if not isinstance(value, str):
            raise SpecError(where, f"expected a string, got {value!r}")
        return value
    if tp is bool:
        if not isinstance(value, bool):
            raise SpecError(where, f"expected true/false, got {value!r}")
        return value
    return value


def _loads(text: str, path: str | None) -> Any:
    """JSON text -> objects (engine.jsonio.loads_document), every failure a SpecError."""
    try:
        return loads_document(text, "a what-if spec")
    except DocumentError as exc:
        raise SpecError("(document)", str(exc), path) from None


def parse_edit(data: Any, where: str) -> Edit:
    if not isinstance(data, dict):
        raise SpecError(where, f"an edit must be an object, got {type(data).__name__}")
    kind = data.get("kind")
    if kind not in EDITS:
        raise SpecError(f"{where}.kind", f"unknown edit kind {kind!r}; choose one of {sorted(EDITS)}")
    cls = EDITS[kind]
    hints = typing.get_type_hints(cls)
    flds = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]  # cls is a dataclass type (the registry holds only those)
    unknown = sorted(set(data) - set(flds) - {"kind"})
    if unknown:
        raise SpecError(f"{where}.{unknown[0]}", f"unknown field for edit {kind!r}; known: {sorted(flds)}")
    kwargs = {}
    for name, f in flds.items():
        if name in data:
            kwargs[name] = _check_type(data[name], hints[name], f"{where}.{name}")
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise SpecError(f"{where}.{name}", f"required field missing for edit {kind!r}")
    try:
        return cls(**kwargs)
    except SpecError as exc:
        raise SpecError(f"{where}.{exc.field}", exc.detail) from None
    except (ValueError, TypeError) as exc:
        msg = str(exc)
        fld = msg.split(":", 1)[0] if ":" in msg and msg.split(":", 1)[0] in flds else "?"
        raise SpecError(f"{where}.{fld}", msg.split(": ", 1)[-1] if fld != "?" else msg) from None


def bad(field_name: str, problem: str) -> ValueError:
    """Raised inside an edit's __post_init__: `field: problem` (the parser adds the edit path)."""
    return ValueError(f"{field_name}: {problem}")


def field_bounds(kind: str, field_name: str) -> tuple[float | None, float | None]:
    """(min, max) that edit `kind` allows for `field_name` (None: open), for the page's number widgets."""
    return bounds(EDITS[kind].rules.get(field_name, ()))


@dataclass(kw_only=True, slots=True)
class WhatIfSpec:
    version: int = SPEC_VERSION
    edits: list[Edit] = field(default_factory=list)
    raw: list[dict] = field(default_factory=list)
    path: str | None = None  # the spec file, named by errors found while applying it

    @classmethod
    def parse(cls, data: Any, path: str | None = None) -> WhatIfSpec:
        """From a dict, a JSON string or a file path; every problem is a SpecError naming the field."""
        if isinstance(data, (str, Path)) and not (isinstance(data, str) and data.lstrip().startswith("{")):
            from engine.trace.safe_io import read_spec_bytes

            path = str(data)
            raw = read_spec_bytes(data, "what-if spec")
            try:
                data = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise SpecError(
                    "(document)", f"not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset {exc.start})", path
                ) from None
        if isinstance(data, str):
            data = _loads(data, path)
        if not isinstance(data, dict):
            raise SpecError("(document)", "a what-if spec must be a JSON object", path)
        unknown = sorted(set(data) - {"version", "edits", "description"})
        if unknown:
            raise SpecError(unknown[0], "unknown top-level field; known: version, edits, description", path)
        version = data.get("version")
        if type(version) is not int or version != SPEC_VERSION:  # `true == 1` in Python
            raise SpecError(
                "version", f"unsupported version {version!r}; this build reads version {SPEC_VERSION}", path
            )
        raw = data.get("edits", [])
        if not isinstance(raw, list):
            raise SpecError("edits", "must be a list of edit objects", path)
        try:
            edits = [parse_edit(e, f"edits[{i}]") for i, e in enumerate(raw)]
        except SpecError as exc:
            raise SpecError(exc.field, exc.detail, path) from None
        return cls(version=version, edits=edits, raw=list(raw), path=path)

    def to_json(self) -> dict:
        return {"version": self.version, "edits": list(self.raw)}

    def assumptions(self) -> list[str]:
        return [f"{e.kind}: {type(e).assumptions}" for e in self.edits]
