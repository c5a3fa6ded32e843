"""Benchmark composition: specs -> per-rank ETs -> an exported folder `mystique replay` runs.

Public API:
    BenchmarkSpec, Segment, Sharding, load_spec(path), save_spec(spec, path), spec_from_dict(d)
    compose(spec, progress=None) -> Benchmark          # ranks {r: [ET node dicts]}, replay_ids, meta
    export(benchmark, out_dir) -> {"dir", "spec", "ranks", "summary"}
    validate_et(path_or_dict, meta=True, strict=True) -> report   # TraceError when invalid
    propagate(...)  (meta_check) shape propagation on meta tensors

Spec paths: `sources` resolve against the spec file's folder first, then the current
directory (examples/*.json use repo-root-relative paths, run from the repo root).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from engine.compose.benchmark import Benchmark
from engine.compose.build import compose
from engine.compose.export import export
from engine.compose.spec import BenchmarkSpec, Segment, Sharding, load_spec, save_spec, spec_from_dict
from engine.compose.validate import validate_et

if TYPE_CHECKING:
    from engine.compose.meta_check import propagate


def __getattr__(name: str) -> Any:
    """`propagate` loads on first use (PEP 562): it needs torch, and the rest of the package
    (spec, shard.kinds, build, export) imports without it."""
    if name == "propagate":
        from engine.compose.meta_check import propagate

        return propagate
    raise AttributeError(f"module 'engine.compose' has no attribute {name!r}")


__all__ = [
    "Benchmark",
    "BenchmarkSpec",
    "Segment",
    "Sharding",
    "compose",
    "export",
    "load_spec",
    "propagate",
    "save_spec",
    "spec_from_dict",
    "validate_et",
]
