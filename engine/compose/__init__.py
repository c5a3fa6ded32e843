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

import importlib
from typing import TYPE_CHECKING, Any

# `export` is both a public function and the submodule that defines it: importing the submodule
# later (engine.compose.build does) would rebind the package attribute to the module, so the
# function is bound eagerly (export.py is torch-free) and stays the package's `export`.
from engine.compose.export import export

# Names load on first use (PEP 562), so the torch-free parts (spec, shard.kinds, marker) import
# without the meta-tensor machinery that needs torch.
_HOME = {
    "Benchmark": "build",
    "compose": "build",
    "propagate": "meta_check",
    "BenchmarkSpec": "spec",
    "Segment": "spec",
    "Sharding": "spec",
    "load_spec": "spec",
    "save_spec": "spec",
    "spec_from_dict": "spec",
    "validate_et": "validate",
}

if TYPE_CHECKING:
    from engine.compose.build import Benchmark, compose
    from engine.compose.meta_check import propagate
    from engine.compose.spec import BenchmarkSpec, Segment, Sharding, load_spec, save_spec, spec_from_dict
    from engine.compose.validate import validate_et


def __getattr__(name: str) -> Any:
    if name not in _HOME:
        raise AttributeError(f"module 'engine.compose' has no attribute {name!r}")
    return getattr(importlib.import_module(f"engine.compose.{_HOME[name]}"), name)


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
