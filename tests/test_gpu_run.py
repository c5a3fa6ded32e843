"""The GPU run's dry run: `benchmarks/gpu_run.py --device cpu --quick` end to end (about 40 s,
the tests marked slow), and its stream-overlap measure on a hand-written Kineto trace.

Why: the GPU run waits, unused, until a GPU is lent, and must then work at the first try. This
runs its code path on CPU at tiny sizes and checks what each step wrote against counts read from
the files it produced (raw ET / Kineto JSON), not against the script's own figures.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import subprocess
import sys
import tarfile
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("MYSTIQUE_SHARED_TRACES", ROOT.parent / "shared" / "traces"))
STEPS = ("captures", "fidelity", "coverage", "streams", "lumos", "bound", "gpu_tests", "compare")


def _json_gz(path: Path):
    return json.loads(gzip.decompress(path.read_bytes()))


def _events(doc) -> list[dict]:
    return doc["traceEvents"] if isinstance(doc, dict) else doc


def _host_steps(doc) -> int:
    return sum(
        1
        for e in _events(doc)
        if str(e.get("name", "")).startswith("ProfilerStep#") and e.get("cat") != "gpu_user_annotation"
    )


def _top_level_aten(et: dict) -> int:
    """ET nodes named aten::* with no aten::* ancestor: what a top-mode replay selects."""
    nodes = {n["id"]: n for n in et["nodes"]}

    def top(n: dict) -> bool:
        seen: set[int] = set()
        p = nodes.get(n.get("ctrl_deps"))
        while p is not None and p["id"] not in seen:
            seen.add(p["id"])
            if p["name"].startswith("aten::"):
                return False
            p = nodes.get(p.get("ctrl_deps"))
        return True

    return sum(1 for n in et["nodes"] if n["name"].startswith("aten::") and top(n))


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("gpu_run")
    out, work = tmp / "out", tmp / "work"
    cmd = [sys.executable, str(ROOT / "benchmarks" / "gpu_run.py"), "--device", "cpu", "--quick"]
    cmd += ["--out", str(out), "--work", str(work)]
    # always named: the run's default would also find a staged .gpu_carry/traces
    cmd += ["--traces", str(SHARED if SHARED.is_dir() else tmp / "no_shared_traces")]
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    doc = json.loads((out / "gpu_run.json").read_text())
    return doc, out, work


@pytest.mark.slow
def test_every_step_recorded_and_the_output_fits_what_comes_back(run):
    doc, out, _ = run
    assert list(doc["steps"]) == list(STEPS)
    bad = {k: v.get("error") for k, v in doc["steps"].items() if v["status"] == "error"}
    assert not bad
    assert doc["steps"]["streams"]["result"] == {"skipped": "skipped: no CUDA"}
    files = [p for p in out.rglob("*") if p.is_file()]
    assert len(files) <= 8 and all(len(p.relative_to(out).parts) <= 3 for p in files)
    log = (out / "gpu_run.log").read_text()
    assert all(f"-- {s}" in log for s in STEPS)


@pytest.mark.slow
def test_captures_hold_the_steps_asked_for(run):
    doc, _, work = run
    res = doc["steps"]["captures"]["result"]
    for m in ("mlp", "transformer"):
        folder = work / m
        meta = json.loads((folder / f"{m}_meta.json").read_text())
        assert _host_steps(_json_gz(folder / f"{m}_kineto.json.gz")) == 2  # --quick records 2 steps
        assert len(meta["step_ms"]) == 3 and res[m]["median_ms"] > 0
    assert res["ddp"]["dist_backend"] == "gloo" and (work / "ddp" / "ddp_rank0_et.json.gz").is_file()


@pytest.mark.slow
def test_fidelity_replays_every_top_level_op_of_the_capture(run):
    doc, _, work = run
    recs = [r for r in doc["steps"]["fidelity"]["result"]["records"] if "coverage" in r]
    assert {r["model"] for r in recs} >= {"mlp", "transformer"}
    for r in recs:
        n = _top_level_aten(_json_gz(work / r["model"] / f"{r['model']}_et.json.gz"))
        assert r["coverage"]["selected"] == n and r["coverage"]["replayed"] == n
        assert r["original_ms"] > 0 and r["replay_ms"] > 0 and r["metrics"]["original"]["samples"]


@pytest.mark.slow
def test_coverage_replays_each_small_shared_et(run):
    doc, _, _ = run
    res = doc["steps"]["coverage"]["result"]
    if not SHARED.is_dir():
        assert "skipped" in res
        return
    small = {
        p.parent.name
        for p in SHARED.rglob("*.gz")
        if re.search(r"(_et\.json|\.json\.tar|chakra\.0\.0\.4\.json)\.gz$", p.name) and p.stat().st_size < 16 * 1024
    }
    assert {r["trace"] for r in res["records"]} == small
    assert all(0 <= r["replayed"] <= r["selected"] for r in res["records"])


@pytest.mark.slow
def test_what_if_ground_truths_are_the_base_model_changed_once(run):
    doc, _, work = run
    w = doc["steps"]["lumos"]["result"]["whatifs"]
    base = {m: json.loads((work / m / f"{m}_meta.json").read_text())["model_config"] for m in ("mlp", "transformer")}
    for name, key in (
        ("mlp_batch_x2", "batch"),
        ("transformer_batch_x2", "batch"),
        ("transformer_layers_x2", "layers"),
    ):
        model = name.split("_")[0]
        var = json.loads((work / name / f"{model}_meta.json").read_text())["model_config"]
        assert var[key] == 2 * base[model][key]
        assert {k: v for k, v in var.items() if k != key} == {k: v for k, v in base[model].items() if k != key}
        assert w[name]["predicted_ms"] > w[name]["base_predicted_ms"]

    def blocks(folder: Path) -> int:
        names = {n["name"] for n in _json_gz(folder / "transformer_et.json.gz")["nodes"]}
        return sum(1 for s in names if re.fullmatch(r"nn\.Module: blocks\.\d+", s))

    assert blocks(work / "transformer_layers_x2") == 2 * blocks(work / "transformer")

    def gemms(folder: Path) -> int:
        c = Counter(n["name"] for n in _json_gz(folder / "mlp_et.json.gz")["nodes"])
        return c["aten::addmm"] + c["aten::mm"]

    assert gemms(work / "mlp_gemm_x2_slower") >= 2 * gemms(work / "mlp")
    assert w["mlp_gemm_x2_slower"]["predicted_ms"] > w["mlp_gemm_x2_slower"]["base_predicted_ms"]


@pytest.mark.slow
def test_bound_batches_differ_and_pytest_gpu_ran(run):
    doc, _, _ = run
    b = doc["steps"]["bound"]["result"]
    assert b["category"] == "compute" and b["large"]["median_ms"] > 2 * b["small"]["median_ms"]
    t = doc["steps"]["gpu_tests"]["result"]
    assert t["returncode"] == 0 and "skipped" in t["summary"], t["tail"]


@pytest.mark.slow
def test_compare_archive_holds_one_step_of_each_side(run):
    doc, out, work = run
    res = doc["steps"]["compare"]["result"]
    with tarfile.open(out / res["archive"]) as tar:
        names = set(tar.getnames())
        assert names == {
            "original/mlp_et.json.gz",
            "original/mlp_kineto.json.gz",
            "original/mlp_meta.json",
            "replay/replay.json",
            "replay/replay_kineto.json.gz",
        }
        orig = json.loads(gzip.decompress(tar.extractfile("original/mlp_kineto.json.gz").read()))
        rep = json.loads(gzip.decompress(tar.extractfile("replay/replay_kineto.json.gz").read()))
    assert _host_steps(orig) == 1 and _host_steps(_json_gz(work / "mlp" / "mlp_kineto.json.gz")) == 2
    labels = {e["name"] for e in _events(rep) if str(e.get("name", "")).startswith("et:")}
    assert len(labels) == res["replayed_ops"] > 0


def test_stream_overlap_of_a_hand_written_trace(tmp_path, monkeypatch):
    """Kernels on stream 7 at 10-110 us and stream 8 at 80-130 us, 1 step: 30 us overlap, 120 us busy."""
    # for the test only: left on sys.path, benchmarks/distributed.py would shadow Dask's
    # `distributed` in every later test of this worker (spawned Dask workers inherit sys.path)
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    import engine.trace as T
    from benchmarks.gpurun.steps import _stream_overlap

    def kernel(name, ts, dur, stream, corr):
        args = {"stream": stream, "correlation": corr, "device": 0}
        return {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": stream, "ts": ts, "dur": dur, "args": args}

    doc = {
        "traceEvents": [
            {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#0", "pid": 1, "tid": 1, "ts": 0, "dur": 200},
            kernel("gemm_a", 10, 100, 7, 1),
            kernel("gemm_b", 80, 50, 8, 2),
        ]
    }
    path = tmp_path / "two_streams_kineto.json.gz"
    path.write_bytes(gzip.compress(json.dumps(doc).encode()))
    got = _stream_overlap(T.load(path, use_cache=False).events)
    assert got["streams"] == 2 and got["iterations"] == 1
    assert got["overlap_us"] == pytest.approx(30.0) and got["kernel_busy_us"] == pytest.approx(120.0)
    assert got["overlap_frac"] == pytest.approx(0.25)


@pytest.mark.slow
def test_a_spent_budget_skips_every_step_with_its_reason(tmp_path):
    cmd = [sys.executable, str(ROOT / "benchmarks" / "gpu_run.py"), "--device", "cpu", "--quick", "--budget-s", "0"]
    p = subprocess.run(cmd + ["--out", str(tmp_path)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    steps = json.loads((tmp_path / "gpu_run.json").read_text())["steps"]
    assert list(steps) == list(STEPS)
    assert all(s["status"] == "skipped" and s["reason"].startswith("budget: 0 s left") for s in steps.values())
