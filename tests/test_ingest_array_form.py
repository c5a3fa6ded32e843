"""The Trace Event Format's array form and the 2020-21 profiler's legacy categories (issue 30).

A top-level JSON list of events (what the 2021 profiler wrote, and what Perfetto and
chrome://tracing accept) loads like an object with `traceEvents`, through the loader and the
store alike, and the legacy categories (Operator, Kernel, Runtime, Memcpy, Memset) read as
today's. Golden values are counted from the raw JSON here, not from our parser.
"""

from __future__ import annotations

import json
from collections import Counter

import pytest
from clirun import cli
from rawjson import raw_doc

from engine.errors import TraceError
from engine.trace import load
from engine.trace.store import build, query

_RENAMED = {
    "Operator": "cpu_op",
    "Kernel": "kernel",
    "Runtime": "cuda_runtime",
    "Memcpy": "gpu_memcpy",
    "Memset": "gpu_memset",
}


def _raw(path) -> list:
    return raw_doc(path)


@pytest.mark.parametrize("name", ["nw0_worker0.pt.trace.json.gz", "nw4_worker0.pt.trace.json.gz"])
@pytest.mark.slow
def test_array_form_loads_with_legacy_categories(shared_traces, cache_dir, name):
    path = shared_traces / "kineto_resnet50_dataloader" / name
    raw = _raw(path)
    assert isinstance(raw, list)
    want = Counter(_RENAMED.get(e.get("cat"), e.get("cat")) for e in raw if e.get("ph") == "X")
    steps = sorted(e["dur"] for e in raw if e.get("ph") == "X" and e.get("name", "").startswith("ProfilerStep#"))
    tr = load(path, use_cache=False)
    got = Counter(tr.events["cat"].astype(str))
    assert got == want
    assert sorted(it["dur_us"] for it in tr.meta["iterations"]) == steps and len(steps) == 6
    # the store reads the same document, category for category
    st = query(path, "SELECT cat, count(*) AS n FROM events GROUP BY cat")
    assert dict(zip(st["cat"], st["n"], strict=True)) == dict(want)
    # runtime calls keep their lower-case legacy "external id"; kernels link by correlation
    ext = {e["args"]["correlation"]: e["args"]["external id"] for e in raw if e.get("cat") == "Runtime"}
    rt = tr.events[tr.events["cat"] == "cuda_runtime"]
    assert dict(zip(rt["correlation"].astype(int), rt["external_id"].astype(int), strict=True)) == ext


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (b"[1, 2, 3]", "no trace events"),
        (b'[{"name": "x"}]', "no trace events"),
        (b"[]", "list"),
    ],
)
def test_a_list_that_is_no_trace_is_one_line_error(tmp_path, cache_dir, text, problem):
    p = tmp_path / "list.json"
    p.write_bytes(text)
    with pytest.raises(TraceError, match=problem):
        load(p, use_cache=False)
    with pytest.raises(TraceError, match=problem):
        build(p)
    for args in (("info", str(p)), ("sql", str(p), "SELECT 1")):
        r = cli(*args, cache=cache_dir)
        assert r.returncode == 2 and str(p) in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_array_form_with_bom_and_blank_lead(tmp_path, cache_dir):
    evs = [
        {"ph": "X", "cat": "Operator", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 0, "dur": 100},
        {
            "ph": "X",
            "cat": "Runtime",
            "name": "hipLaunchKernel",
            "pid": 1,
            "tid": 1,
            "ts": 5,
            "dur": 3,
            "args": {"correlation": 7, "external id": 2},
        },
        {
            "ph": "X",
            "cat": "Kernel",
            "name": "k",
            "pid": 0,
            "tid": "stream 7",
            "ts": 10,
            "dur": 50,
            "args": {"correlation": 7, "device": 0, "stream": 7},
        },
    ]
    p = tmp_path / "legacy.json"
    p.write_bytes(b"\xef\xbb\xbf \n\n" + json.dumps(evs).encode())
    tr = load(p, use_cache=False)
    assert tr.events["cat"].astype(str).tolist() == ["cpu_op", "hip_runtime", "kernel"]
    assert tr.meta["iterations"][0]["dur_us"] == 100
    st = query(p, "SELECT cat FROM events ORDER BY ev")
    assert st["cat"].tolist() == ["cpu_op", "hip_runtime", "kernel"]
