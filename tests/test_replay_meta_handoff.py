"""A distributed launcher runs the meta check once per recorded rank and hands the sizes to its
ranks (engine.replay.budget -> run_spec.json -> engine.replay.dist_worker), and a single-process
replay finds the sizes of a plan it checked before in the parse cache. Why: torch's Python meta
kernels pull in torch._dynamo and sympy, ~1.5 s of CPU in every replay process; the launcher
already builds each rank's plan for the memory budget."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from clirun import MLP_ET
from conftest import ROOT

_SESSION = """
import json, sys
import engine.trace as T
from engine.replay import ReplayConfig
from engine.replay.executor import ReplaySession
sizes = json.loads(sys.argv[1])
meta = {int(k): v for k, v in sizes.items()} if sizes is not None else None
with ReplaySession(T.load(sys.argv[2]), config=ReplayConfig(warmup=0, iters=1, profile=False), meta_bytes=meta) as s:
    s.run_iteration(measured=True)
    skipped = sorted(st.op_id for st in s.plan.steps if not st.runnable)
print(json.dumps({"dynamo": "torch._dynamo" in sys.modules, "sympy": "sympy" in sys.modules, "skipped": skipped}))
"""


def _session(sizes: dict | None, et, cache) -> dict:
    """A ReplaySession of `et` in a fresh process whose parse cache is `cache`."""
    r = subprocess.run(
        [sys.executable, "-c", _SESSION, json.dumps(sizes), str(et)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
        env={**os.environ, "MYSTIQUE_CACHE_DIR": str(cache)},
    )
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def _launcher_sizes(et) -> dict:
    import engine.trace as T
    from engine.replay import ReplayConfig
    from engine.replay.budget import world_budget

    b = world_budget(T.load(et), [str(et)], {0: 0}, ReplayConfig(profile=False))
    return {str(k): v for k, v in b.meta_bytes[0].items()}


@pytest.mark.slow
def test_a_rank_given_the_launchers_sizes_imports_neither_dynamo_nor_sympy(cache_dir, tmp_path):
    sizes = _launcher_sizes(MLP_ET)
    assert len(sizes) > 20 and all(v is None or v >= 0 for v in sizes.values())
    handed = _session(sizes, MLP_ET, tmp_path / "empty-cache")
    alone = _session(None, MLP_ET, tmp_path / "another-empty-cache")  # the control: the check run here
    assert alone["dynamo"] and alone["sympy"], alone  # else this test measures nothing
    assert not handed["dynamo"] and not handed["sympy"], handed
    assert handed["skipped"] == alone["skipped"]


@pytest.mark.slow
def test_a_second_replay_of_a_plan_finds_its_sizes_in_the_cache(tmp_path):
    """The crafted arange/eye/outer: the first process computes the sizes (and imports dynamo),
    the second of the same plan reads them and still skips the three hand-counted ops; the same
    ops with larger arguments are another key, checked afresh."""
    import gzip

    from crafted_et import OUTSIZED_MIB, _Builder, outsized_factories

    b = _Builder()
    ids = outsized_factories(b)
    et = tmp_path / "big_et.json.gz"
    et.write_bytes(gzip.compress(json.dumps(b.doc).encode()))
    cache = tmp_path / "cache"
    first, second = _session(None, et, cache), _session(None, et, cache)
    assert first["dynamo"] and sorted(first["skipped"]) == sorted(ids), first
    assert not second["dynamo"] and not second["sympy"], second
    assert second["skipped"] == first["skipped"]
    (memo,) = (cache / "meta-sizes").iterdir()
    got = json.loads(memo.read_text())["sizes"]
    for i, mib in zip(ids, OUTSIZED_MIB, strict=True):
        assert got[str(i)] == pytest.approx(mib * 2**20, rel=1e-3)
    # the same ops, arange's end doubled in the raw JSON: another call, so another key
    doc = json.loads(json.dumps(b.doc))
    node = next(n for n in doc["nodes"] if n["id"] == ids[0])
    node["inputs"]["values"] = [v * 2 if isinstance(v, int) and v > 1000 else v for v in node["inputs"]["values"]]
    et2 = tmp_path / "bigger_et.json.gz"
    et2.write_bytes(gzip.compress(json.dumps(doc).encode()))
    third = _session(None, et2, cache)
    assert third["dynamo"], third  # computed, not read
    assert len(list((cache / "meta-sizes").iterdir())) == 2


@pytest.mark.slow
def test_the_launchers_sizes_skip_outsized_ops_in_every_rank(tmp_path, cache_dir):
    """The crafted arange/eye/outer (tests/crafted_et.py) on two mirrored ranks: the launcher's
    sizes hold the hand-counted MiB, and each rank skips the three with the meta check's reason
    and sizes."""
    import gzip

    from crafted_et import OUTSIZED_MIB, _Builder, outsized_factories

    from engine.replay import ReplayConfig
    from engine.replay.distributed import DistConfig, replay_distributed

    b = _Builder()
    ids = outsized_factories(b)
    et = tmp_path / "big_et.json.gz"
    et.write_bytes(gzip.compress(json.dumps(b.doc).encode()))
    sizes = _launcher_sizes(et)
    for i, mib in zip(ids, OUTSIZED_MIB, strict=True):
        assert sizes[str(i)] == pytest.approx(mib * 2**20, rel=1e-3)
    cfg = ReplayConfig(warmup=0, iters=1, profile=False)
    res = replay_distributed([et], config=cfg, dist=DistConfig(world_size=2, mirror_rank=0), out_dir=tmp_path / "o")
    spec = json.loads((tmp_path / "o" / "run_spec.json").read_text())
    assert set(spec["meta_bytes"]) == {"0"} and spec["meta_bytes"]["0"] == sizes
    for r in (0, 1):
        doc = json.loads((tmp_path / "o" / f"rank{r}" / "replay.json").read_text())
        skipped = {s["op_id"]: s for s in doc["skipped_ops"]}
        assert set(skipped) == set(ids), skipped
        for i, mib in zip(ids, OUTSIZED_MIB, strict=True):
            assert "on the meta device" in skipped[i]["reason"] and f"{mib:,.1f} MiB" in skipped[i]["detail"]
    assert res.world_size == 2


@pytest.mark.parametrize("rel", ["param_resnet/resnet_et.json.gz"])
@pytest.mark.slow
def test_each_distinct_call_runs_once_and_every_op_keeps_its_own_size(rel, shared_traces, cache_dir, monkeypatch):
    """meta_sizes runs each distinct call (its key: overload, values, tensor geometry and sharing)
    on the meta device once: other teams' ResNet ET repeats a few calls per layer. The sizes must
    equal, op by op, what each op's own meta run gives: this fails when the key leaves out
    anything the meta kernel reads."""
    import engine.trace as T
    from engine.graph import replay_ops
    from engine.replay import ReplayConfig, metacheck
    from engine.replay.custom import CustomOps
    from engine.replay.plan import build_plan

    trace = T.load(shared_traces / rel)
    ids = replay_ops(trace, ReplayConfig().mode, rank=0)
    plan = build_plan(trace.ops, ids, device="cpu", allow_trace_code=False, custom=CustomOps())
    runs = []
    real = metacheck.meta_output_bytes
    monkeypatch.setattr(
        metacheck, "meta_output_bytes", lambda st, recs, call=None: runs.append(st) or real(st, recs, call)
    )
    sizes = metacheck.meta_sizes(plan)
    assert len(sizes) > 1000 and len(runs) < 0.5 * len(sizes), (len(runs), len(sizes))
    recs = {e.slot: e.rec for e in plan.externals.values()}
    for st in plan.steps:
        for _, _, slot, rec in st.outs:
            recs[slot] = rec
    one_by_one = {int(st.op_id): real(st, recs) for st in plan.steps if int(st.op_id) in sizes}
    assert sizes == one_by_one
    assert sum(v is not None and v > 0 for v in sizes.values()) > 500  # real sizes, not all unknown
