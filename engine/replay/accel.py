"""Ops that ask for an accelerator, remapped when the replay runs without one (and streams).

Why: a CUDA trace replayed on CPU records ops whose CPU call raises "Cannot access accelerator
device when none is available" or needs a real stream object, although what they cost on the
host is known: `aten::record_stream` (tell the caching allocator a stream uses the tensor)
becomes a no-op on CPU and binds the *current* stream on CUDA (the recorded Stream is an id
that means nothing in another process); `aten::pin_memory`/`_pin_memory` (copy into page-locked
memory) become a plain copy (`aten::clone`) on CPU; `aten::is_pinned` answers False. Each counts
as "substituted" in coverage, with the mapping in the per-op record. Factory ops' `pin_memory`
argument is forced to False on CPU (done in dispatch.resolve).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from engine.replay.resolved import Resolved


@dataclass(slots=True)
class _Schema:
    name: str
    returns: list = field(default_factory=list)
    arguments: list = field(default_factory=list)


class HostOp:
    """A callable standing in for an OpOverload (the executor reads `_schema.returns`)."""

    def __init__(self, name: str, fn, n_returns: int):
        self._schema = _Schema(name=name, returns=[None] * n_returns)
        self._fn = fn

    def __call__(self, *a: Any, **kw: Any) -> Any:
        return self._fn(*a, **kw)


def _record_stream_cuda(t, *_):
    import torch

    t.record_stream(torch.cuda.current_stream(t.device))


def remap(name: str, on_gpu: bool):
    """A `Resolved` for an accelerator-asking op, or None when `name` is not one."""
    import torch

    if name == "aten::record_stream":
        fn = _record_stream_cuda if on_gpu else (lambda *a, **k: None)
        how = "current CUDA stream" if on_gpu else "no-op (no streams on CPU)"
        return Resolved(
            overload=HostOp(name, fn, 0),
            positional=[("rec", 0)],
            keywords={},
            arg_types={},
            substituted=f"{name} -> {how}",
        )
    if on_gpu:
        return None
    if name in ("aten::pin_memory", "aten::_pin_memory"):
        return Resolved(
            overload=torch.ops.aten.clone.default,
            positional=[("rec", 0)],
            keywords={},
            arg_types={},
            substituted=f"{name} -> aten::clone (no pinned memory without an accelerator)",
        )
    if name == "aten::is_pinned":
        return Resolved(
            overload=HostOp(name, lambda *a, **k: False, 1),
            positional=[("rec", 0)],
            keywords={},
            arg_types={},
            substituted=f"{name} -> False (CPU replay)",
        )
    return None


ACCELERATOR_OPS = ("aten::record_stream", "aten::pin_memory", "aten::_pin_memory", "aten::is_pinned")
