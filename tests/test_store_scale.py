"""The store's fast ingestion at scale (issue 22): typed-Struct blocks equal the loader, memory stays flat.

The store decodes each run of `traceEvents` items into typed msgspec Structs and builds Arrow
columns from them (engine/trace/store/rows.py); a run whose values have unusual types is parsed
by the loader's own parser instead. These tests check, against `engine.trace.load` column by
column, a trace tiled in time over many blocks (the fast path everywhere) and a trace whose
blocks mix both paths (odd values in some blocks only); and that a store build's peak memory
does not grow with the file (a 1M-event trace against a one-copy one, in fresh processes).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, SAMPLES
from test_store import _check_equal

from engine.testing.tiled import make_tiled
from engine.trace.store import rows, stream

TILE_SOURCE = SAMPLES / "resnet_tv" / "resnet_tv_kineto.json.gz"


def _block_kinds(path: Path) -> list[str]:
    """'typed' or 'plain' for each decoded run of items, as the store's ingestion sees them."""
    kinds = []
    for got in stream.scan(stream.iter_blocks(path), str(path), rows.DECODER):
        if isinstance(got, list) and got:
            kinds.append("typed" if type(got[0]) is rows.Item else "plain")
    return kinds


def test_tiled_trace_over_many_blocks_equals_loader(tmp_path, cache_dir, monkeypatch):
    """A sample trace tiled 4x in time, read in 64 KiB blocks: every block takes the typed path."""
    monkeypatch.setattr(stream, "BLOCK", 64 << 10)
    facts = make_tiled(TILE_SOURCE, tmp_path / "tiled.json", 4 * 5000)
    assert facts["copies"] >= 2
    kinds = _block_kinds(tmp_path / "tiled.json")
    assert len(kinds) > 20 and set(kinds) == {"typed"}
    _check_equal(tmp_path / "tiled.json")


@pytest.mark.slow
def test_tiled_shared_trace_with_steps_equals_loader(shared_traces, tmp_path, cache_dir, monkeypatch):
    """The benchmark's input (a real MI300 trace's ProfilerStep window tiled twice) in 1 MiB blocks."""
    monkeypatch.setattr(stream, "BLOCK", 1 << 20)
    src = shared_traces / "tracelens_mi300_resnet_ckpt" / "resnet_act_checkpoint.json.gz"
    out = tmp_path / "tiled.json"
    facts = make_tiled(src, out, 100_000)
    assert facts["copies"] == 2 and facts["steps_per_copy"] >= 2
    _check_equal(out)
    from engine.trace.store import query

    steps = query(out, "SELECT count(*) AS n FROM events WHERE name LIKE 'ProfilerStep#%' AND cat = 'user_annotation'")
    assert int(steps["n"][0]) == facts["copies"] * facts["steps_per_copy"]  # renumbered, not collapsed


ODD = [
    {"ph": "X", "cat": "kernel", "name": "k", "pid": 1.0, "tid": 7, "ts": 5, "dur": None, "args": {"stream": 7}},
    3,
    {"ph": "X", "cat": None, "name": 12, "pid": "p", "tid": True, "ts": 6.5, "dur": 1},
    {"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 1, "ts": 7, "dur": 2, "args": [1, 2]},
    {"ph": "s", "id": "0x1f", "cat": "ac2g", "pid": 1, "tid": 1, "ts": 8},
]
ROCM = [  # typed path: text streams ("0x0" on ROCm) and ids beyond int64 go through the loader's conversion
    {"ph": "X", "cat": "cuda_runtime", "name": "hipLaunch", "pid": 1, "tid": 1, "ts": 9, "dur": 1,
     "args": {"stream": "0x0", "correlation": 1 << 70, "External id": 4, "device": None}},
    {"ph": "X", "cat": "kernel", "name": "k2", "pid": 2, "tid": 3, "ts": 10, "dur": 1,
     "args": {"stream": 3, "correlation": 5, "device": "1"}},
    {"ph": "X", "cat": "gpu_memcpy", "name": "m", "pid": 4, "tid": 3, "ts": 11, "dur": 1, "args": {"stream": 3}},
    {"ph": "M", "name": "process_name", "pid": 4, "args": {"name": "GPU 4"}},
    {"ph": "M", "name": "thread_name", "pid": 4, "tid": 3, "args": {"name": 17}},
    {"ph": "f", "id": 5, "cat": "ac2g", "pid": 2, "tid": 3, "ts": 10, "bp": "e"},
    # collective metadata: a process group (or "pg_name") makes seq/comms_id count; else they are null
    {"ph": "X", "cat": "kernel", "name": "ncclAllReduce", "pid": 2, "tid": 3, "ts": 12, "dur": 1,
     "args": {"Process Group Name": "0", "Collective name": "allreduce", "seq": 3, "comms_id": 1 << 40}},
    {"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": 1, "tid": 1, "ts": 13, "dur": 1,
     "args": {"pg_name": 5, "Collective name": None, "seq": "7"}},
    {"ph": "X", "cat": "cpu_op", "name": "no_group", "pid": 1, "tid": 1, "ts": 14, "dur": 1,
     "args": {"seq": 9, "comms_id": 2}},
]  # fmt: skip


def _normal(i: int) -> dict:
    return {"ph": "X", "cat": "cpu_op", "name": f"aten::op{i % 7}", "pid": 10, "tid": 11, "ts": 100 + i,
            "dur": 0.5, "args": {"External id": i, "Sequence number": i, "Fwd thread id": 1, "Input Dims": [[3, 4]]}}  # fmt: skip


def test_blocks_mixing_odd_values_and_typed_runs_equal_loader(tmp_path, cache_dir, monkeypatch):
    """Odd values in some blocks only: those blocks take the loader's parser, the others the
    typed path, and the stored tables still equal the loader's, value for value."""
    monkeypatch.setattr(stream, "BLOCK", 4 << 10)
    items = [_normal(i) for i in range(300)] + ODD + [_normal(i) for i in range(300, 600)] + ROCM
    items += [_normal(i) for i in range(600, 900)]
    p = tmp_path / "odd.json"
    p.write_text(json.dumps({"traceEvents": items, "distributedInfo": {"rank": 2, "world_size": 4}}))
    kinds = _block_kinds(p)
    assert "plain" in kinds and kinds.count("typed") > 10
    _check_equal(p)


_BUILD = r"""
import json, sys
from pathlib import Path
from engine.trace.store import build
store = build(Path(sys.argv[1]), use_cache=False, scheduler="serial")
rows = json.loads((store / "manifest.json").read_text())["sources"][0]["rows"]["events"]
hwm = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM:"))
print(json.dumps({"rows": rows, "peak_mib": hwm / 1024}))
"""


def _peak(path: Path, cache: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MYSTIQUE_CACHE_DIR": str(cache)}
    r = subprocess.run([sys.executable, "-c", _BUILD, str(path)], capture_output=True, text=True, env=env, check=True)
    return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.mark.slow
@pytest.mark.alone
def test_store_build_memory_does_not_grow_with_the_file(tmp_path):
    """A ~1M-event trace (~300 MB of JSON) builds in the memory of a 150k-event one (several
    blocks already: the peak is one block's, whatever the file's size), plus slack."""
    small = tmp_path / "small.json"
    big = tmp_path / "big.json"
    make_tiled(TILE_SOURCE, small, 150_000)
    facts = make_tiled(TILE_SOURCE, big, 1_000_000)
    assert facts["items"] >= 1_000_000 and facts["json_bytes"] > 150 << 20
    one, many = _peak(small, tmp_path / "c1"), _peak(big, tmp_path / "c2")
    assert many["rows"] > 6 * one["rows"]
    # measured: 231 MiB at 150k events, 246 MiB at 1M (323 MB of JSON)
    assert many["peak_mib"] < one["peak_mib"] + 64, (one, many)
    assert many["peak_mib"] < 512, many


def test_streamed_files_are_bounded_by_disk_not_ram(monkeypatch, tmp_path):
    """The store streams a file in bounded memory, so its per-file cap is 8x the free disk (the
    Parquet copy is far smaller than its JSON), not RAM's share; an explicit MYSTIQUE_MAX_BYTES
    still caps everything, and a tarball (expanded in memory) keeps RAM's cap."""
    import shutil

    from engine.trace import safe_io

    monkeypatch.delenv("MYSTIQUE_MAX_BYTES", raising=False)
    free = shutil.disk_usage(tmp_path).free
    assert safe_io.max_stream_bytes(tmp_path / "not" / "yet") >= 8 * free * 0.99
    assert safe_io.max_stream_bytes(tmp_path) >= safe_io.max_bytes()
    monkeypatch.setenv("MYSTIQUE_MAX_BYTES", "1000")
    assert safe_io.max_stream_bytes(tmp_path) == 1000
