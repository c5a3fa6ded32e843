"""Accelerator-asking ops of a CUDA trace replayed on CPU are remapped, not skipped."""

from __future__ import annotations

from test_replay_core import _add, _node, _t, _write_et

import engine.trace as T
from engine.replay import ReplayConfig, replay


def _device_query(nid: int, name: str, returns: str, src: list, out) -> dict:
    """`name(Tensor self, Device? device=None) -> returns` on tensor `src`, recorded output `out`."""
    tensor_out = returns == "Tensor"
    return _node(
        nid,
        name,
        f"{name}(Tensor self, Device? device=None) -> {returns}",
        [src, "<None>"],
        [[4, 4], []],
        ["Tensor(float)", "None"],
        [out],
        [[4, 4] if tensor_out else []],
        ["Tensor(float)" if tensor_out else "Bool"],
    )


def test_record_stream_pin_memory_and_pinned_factories_replay_on_cpu(tmp_path, cache_dir):
    a, b = _t(1, 1, 16, [4, 4]), _t(2, 2, 16, [4, 4])
    nodes = [
        _add(10, a, b, _t(3, 3, 16, [4, 4])),
        # the recorded Stream is an id from another process: CPU has no streams -> no-op
        _node(
            11,
            "aten::record_stream",
            "aten::record_stream(Tensor(a!) self, Stream s) -> ()",
            [_t(3, 3, 16, [4, 4])[0], 7],
            [[4, 4], []],
            ["Tensor(float)", "Stream"],
        ),
        _device_query(12, "aten::_pin_memory", "Tensor", _t(3, 3, 16, [4, 4])[0], _t(4, 4, 16, [4, 4])[0]),
        _device_query(13, "aten::is_pinned", "bool", _t(4, 4, 16, [4, 4])[0], False),
        _node(
            14,
            "aten::empty",
            "aten::empty.memory_format(SymInt[] size, *, ScalarType? dtype=None, Layout? layout=None, "
            "Device? device=None, bool? pin_memory=None, MemoryFormat? memory_format=None) -> Tensor",
            [[4, 4], 6, 0, "cuda:0", True, "<None>"],
            [[[], []], [], [], [], [], []],
            ["GenericList[Int,Int]", "Int", "Int", "Device", "Bool", "None"],
            [_t(5, 5, 16, [4, 4])[0]],
            [[4, 4]],
            ["Tensor(float)"],
        ),
    ]
    res = replay(
        T.load(_write_et(tmp_path / "accel_et.json.gz", nodes)), config=ReplayConfig(warmup=0, iters=1, metrics=False)
    )
    cov = res.coverage
    assert cov["replayed"] == cov["selected"] == 5, (cov["by_reason"], res.skipped_ops)
    assert cov["substituted"] == 3  # record_stream, _pin_memory, is_pinned
