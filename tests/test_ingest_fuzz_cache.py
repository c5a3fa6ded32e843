"""Fuzzing the loaders (only TraceError or success) and the Parquet cache (equal, faster, robust)."""

from __future__ import annotations

import copy
import gzip
import json
import time

import orjson
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.errors import TraceError
from engine.trace import load
from engine.trace.cache import cache_root

SMALL = [
    "hta_simple_add/benchmark_simple_add_et.json.gz",
    "hta_simple_add/benchmark_simple_add_trace.json.gz",
    "chakra_1.0.2/1.0.2-chakra.0.0.4.json.gz",
    "hta_event_sync/event_sync_trace.json.gz",
]
_FUZZ = settings(
    max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
json_leaf = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=False), st.text(max_size=12)
)
json_value = st.recursive(
    json_leaf,
    lambda c: st.one_of(st.lists(c, max_size=4), st.dictionaries(st.text(max_size=6), c, max_size=4)),
    max_leaves=8,
)


@pytest.fixture(scope="module")
def small_docs(shared_traces):
    return [orjson.loads(gzip.decompress((shared_traces / p).read_bytes())) for p in SMALL]


def _load_bytes(tmp_path, data: bytes, suffix=".json", use_cache=False):
    f = tmp_path / f"fuzz{suffix}"
    f.write_bytes(data)
    try:
        tr = load(f, use_cache=use_cache)
    except TraceError as exc:
        assert str(f) in str(exc) and "\n" not in str(exc)
        return None
    return tr


@_FUZZ
@given(data=st.binary(min_size=0, max_size=2048))
def test_fuzz_random_bytes(tmp_path, data):
    _load_bytes(tmp_path, data)
    _load_bytes(tmp_path, gzip.compress(data), ".json.gz")


def _mutate(doc, draw_path, value, mode):
    """Replace / delete one nested element chosen by `draw_path` (indices into containers)."""
    node = doc
    for step in draw_path[:-1]:
        if isinstance(node, dict) and node:
            node = node[list(node)[step % len(node)]]
        elif isinstance(node, list) and node:
            node = node[step % len(node)]
        else:
            break
    last = draw_path[-1]
    if isinstance(node, dict) and node:
        key = list(node)[last % len(node)]
        if mode == 0:
            del node[key]
        else:
            node[key] = value
    elif isinstance(node, list) and node:
        if mode == 0:
            del node[last % len(node)]
        else:
            node[last % len(node)] = value


@_FUZZ
@given(
    which=st.integers(0, len(SMALL) - 1),
    paths=st.lists(st.lists(st.integers(0, 10_000), min_size=1, max_size=6), min_size=1, max_size=4),
    value=json_value,
    mode=st.integers(0, 1),
)
@pytest.mark.slow
def test_fuzz_mutated_real_traces(tmp_path, cache_dir, small_docs, which, paths, value, mode):
    doc = copy.deepcopy(small_docs[which])
    for p in paths:
        _mutate(doc, p, value, mode)
    try:
        data = json.dumps(doc).encode()
    except (TypeError, ValueError):
        return
    first = _load_bytes(tmp_path, data, use_cache=True)
    again = _load_bytes(tmp_path, data, use_cache=True)  # from the cache when it could be written
    if first is not None:
        assert again is not None and len(again.ops) == len(first.ops) and len(again.events) == len(first.events)


@pytest.mark.perf
def test_cache_reload_equal_and_faster(shared_traces, cache_dir):
    paths = [shared_traces / "param_resnet/resnet_et.json.gz", shared_traces / "param_resnet/resnet_kineto.json.gz"]
    t0 = time.perf_counter()
    first = load(*paths)
    t_first = time.perf_counter() - t0
    entries = list(cache_dir.iterdir())
    assert len(entries) == 1 and cache_root() == cache_dir
    t0 = time.perf_counter()
    second = load(*paths)
    t_second = time.perf_counter() - t0
    for name in ("ops", "tensors", "events", "flows"):
        pd.testing.assert_frame_equal(getattr(first, name), getattr(second, name), check_categorical=True)
    assert json.loads(json.dumps(first.meta)) == second.meta
    assert t_second < t_first / 2, (t_first, t_second)


def test_cache_corrupt_entry_is_rebuilt(shared_traces, cache_dir):
    path = shared_traces / "hta_alexnet/benchmark_result_2869224_1695835535_trace.json.gz"
    first = load(path)
    (entry,) = list(cache_dir.iterdir())
    (entry / "events.parquet").write_bytes(b"garbage")
    again = load(path)
    pd.testing.assert_frame_equal(first.events, again.events)
    assert (entry / "events.parquet").read_bytes()[:4] == b"PAR1"
    (entry / "meta.json").write_text("{not json")
    pd.testing.assert_frame_equal(first.events, load(path).events)


def test_cache_dir_unwritable_is_not_fatal(shared_traces, tmp_path, monkeypatch):
    blocker = tmp_path / "file_not_dir"
    blocker.write_text("x")
    monkeypatch.setenv("MYSTIQUE_CACHE_DIR", str(blocker / "cache"))
    tr = load(shared_traces / "hta_event_sync/event_sync_trace.json.gz")
    assert tr.meta["events"] == 149


def test_enclosing_innermost_interval_at_epoch_timestamps():
    import numpy as np

    from engine.trace.link import enclosing

    base = 1.6e15  # epoch microseconds, as in real Kineto traces
    hs = np.array([base, base + 10, base + 30, base + 12.5])
    he = np.array([base + 100, base + 20, base + 40, base + 13.5])
    hk = np.array([0, 0, 0, 0])
    q = np.array([base + 15, base + 25, base + 35, base + 200, base + 15, base + 13])
    qk = np.array([0, 0, 0, 0, 1, 0])
    assert enclosing(hs, he, hk, q, qk).tolist() == [1, 0, 2, -1, -1, 3]


def test_cache_hit_names_the_files_given_now(tmp_path, cache_dir):
    """The cache is keyed by content: a copy of a trace elsewhere hits the first load's entry, yet
    its sources (and so replay.json's provenance) must name the copy, not the first path."""
    import shutil

    from conftest import SAMPLES

    src = SAMPLES / "mlp"
    a, b = tmp_path / "a", tmp_path / "somewhere_else" / "b"
    for d in (a, b):
        shutil.copytree(src, d)
    files = ["mlp_et.json.gz", "mlp_kineto.json.gz"]
    first = load(*[a / f for f in files])
    again = load(*[b / f for f in files])
    assert len(list(cache_dir.iterdir())) == 1  # the second load was a cache hit
    assert sorted(s["path"] for s in first.meta["sources"]) == sorted(str(a / f) for f in files)
    assert sorted(s["path"] for s in again.meta["sources"]) == sorted(str(b / f) for f in files)
    assert not any(str(a) in w for w in again.meta["warnings"])
