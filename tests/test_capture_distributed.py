"""Multi-rank samples and the multi-process capture: one process per rank, files per rank."""

from __future__ import annotations

import glob
import json

import pytest
from conftest import SAMPLES

DIST = ("ddp", "dlrm_a2a", "dlrm_tbe")
# collectives each rank's recorded step issues (c10d ops, by name), from the committed samples
GOLDEN_COLLECTIVES = {
    "ddp": {"c10d::allreduce_"},
    "dlrm_a2a": {"c10d::alltoall_base_", "c10d::allreduce_", "c10d::broadcast_"},
    "dlrm_tbe": {"c10d::alltoall_base_", "c10d::allreduce_", "c10d::broadcast_"},
}


def _load(folder, cache_dir=None):
    from engine.trace import load

    files = sorted(glob.glob(str(folder / "*_et.json.gz")) + glob.glob(str(folder / "*_kineto.json.gz")))
    return load(*files)


@pytest.mark.parametrize("name", DIST)
def test_multi_rank_sample_loads_as_two_ranks(name, cache_dir):
    folder = SAMPLES / name
    trace = _load(folder)
    assert trace.meta["ranks"] == [0, 1]
    ops = trace.ops
    per_rank = {}
    for r in (0, 1):
        meta = json.loads((folder / f"{name}_rank{r}_meta.json").read_text())
        assert meta["rank"] == r and meta["world_size"] == 2 and meta["dist_backend"] == "gloo"
        assert len(meta["step_ms"]) == meta["timing_steps"] and meta["median_ms"] > 0
        assert meta["command"].startswith(f"mystique capture {name} --world-size 2")
        names = ops[(ops["rank"] == r) & ops["name"].astype(str).str.startswith("c10d::")]["name"].astype(str)
        assert set(names) == GOLDEN_COLLECTIVES[name]
        per_rank[r] = names.tolist()
        for f in folder.glob(f"{name}_rank{r}_*.gz"):
            assert 1_000 < f.stat().st_size < 300_000
    # both ranks issue the same collectives in the same order (SPMD)
    assert per_rank[0] == per_rank[1]
    assert trace.meta["link"]["link_rate"] >= 0.99


def test_tbe_sample_records_fbgemm_ops(cache_dir):
    trace = _load(SAMPLES / "dlrm_tbe")
    names = set(trace.ops["name"].astype(str))
    assert "fbgemm::split_embedding_codegen_lookup_sgd_function_pt2" in names
    assert "fbgemm::split_embedding_backward_codegen_sgd_unweighted_pt2_wrapper" in names
    assert "fbgemm::bounds_check_indices" in names


@pytest.mark.slow
def test_capture_distributed_two_ranks(tmp_path, cache_dir):
    """The multi-process capture itself: 2 gloo ranks, per-rank ET/Kineto/meta, job time = slowest."""
    import psutil

    from engine.capture.distributed import capture_distributed

    before = {p.pid for p in psutil.Process().children(recursive=True)}
    res = capture_distributed("ddp", world_size=2, out_dir=tmp_path, name="d", warmup=1, timing_steps=2)
    assert [r["rank"] for r in res["ranks"]] == [0, 1]
    assert res["job_median_ms"] == max(r["median_ms"] for r in res["ranks"])
    for r in (0, 1):
        for suffix in ("et.json.gz", "kineto.json.gz", "meta.json"):
            assert (tmp_path / f"d_rank{r}_{suffix}").exists()
    assert {p.pid for p in psutil.Process().children(recursive=True)} <= before
    trace = _load(tmp_path)
    assert trace.meta["ranks"] == [0, 1]


def test_capture_distributed_bad_builder_fails_before_launch(tmp_path):
    import psutil

    from engine.capture.distributed import capture_distributed
    from engine.errors import TraceError

    # children already there (a multiprocessing resource tracker left by an earlier test of this
    # worker, e.g. one that started a Dask cluster) are not this call's
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    with pytest.raises(TraceError, match="unknown multi-rank builder 'nope'"):
        capture_distributed("nope", world_size=2, out_dir=tmp_path, warmup=1, timing_steps=1)
    assert {p.pid for p in psutil.Process().children(recursive=True)} <= before
