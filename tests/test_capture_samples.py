"""The committed sample traces: small, loadable, ET linked to Kineto, labelled by phase/module."""

from __future__ import annotations

import pytest
from conftest import SAMPLES

from engine.capture.meta import read_meta
from engine.capture.models import SAMPLE_MODELS


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    from engine.trace import load

    out = {}
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MYSTIQUE_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
        for name in SAMPLE_MODELS:
            meta = read_meta(SAMPLES / name)
            out[name] = (load(meta["et_path"], meta["kineto_path"]), meta)
        yield out


@pytest.mark.parametrize("name", list(SAMPLE_MODELS))
def test_sample_files_are_small(name):
    meta = read_meta(SAMPLES / name)
    for key in ("et_path", "kineto_path", "meta_path"):
        size = (SAMPLES / name / meta[key].rsplit("/", 1)[-1]).stat().st_size
        assert 1_000 < size < 300_000, (key, size)
    assert meta["model"] == name and meta["steps"] == 1 and meta["num_threads"] == 1
    assert 5 < meta["median_ms"] < 500 and len(meta["step_ms"]) == meta["timing_steps"]
    assert meta["command"].startswith(f"mystique capture {name} --out sample_traces")


@pytest.mark.parametrize("name", list(SAMPLE_MODELS))
def test_sample_links_and_labels(loaded, name):
    trace, meta = loaded[name]
    link = trace.meta["link"]
    assert link["link_rate"] >= 0.99, link
    assert [it["name"] for it in trace.meta["iterations"]] == ["ProfilerStep#1"]
    ops = trace.ops
    assert set(ops["phase"].astype(str)) >= {"forward", "backward", "optimizer"}
    compute = ops[ops["category"] == "compute"]
    assert compute["k_dur_us"].notna().mean() >= 0.99
    modules = set(ops["module"].astype(str)) - {""}
    labels = {f"nn.Module: {m}" for m in meta["modules"]}
    assert modules & labels, sorted(modules)[:10]
    # the recorded (profiled) step is no faster than the unprofiled median, within noise
    assert trace.meta["iterations"][0]["dur_us"] / 1e3 > 0.5 * meta["median_ms"]
