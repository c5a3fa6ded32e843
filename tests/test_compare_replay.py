"""compare(): an original sample capture vs a replay result built from the capture's own numbers.

The replay dicts here follow the replay.json contract (engine/compare/replay.py) and their
numbers are derived from the real sample trace, so every expected error is known exactly.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.capture.meta import read_meta
from engine.cli.main import main
from engine.compare import compare
from engine.replay import ReplayResult

SAMPLE = Path(__file__).resolve().parents[1] / "sample_traces" / "mlp"


@pytest.fixture(scope="module")
def original(tmp_path_factory):
    from engine.trace import load

    with pytest.MonkeyPatch.context() as mp:  # a private parse cache, never the developer's
        mp.setenv("MYSTIQUE_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
        meta = read_meta(SAMPLE)
        yield load(meta["et_path"], meta["kineto_path"]), meta


def _replay_from(trace, meta, *, fwd_scale=1.1, other_scale=1.0, e2e_scale=1.05, extra=()):
    ops = trace.ops
    sel = ops[(ops["category"] == "compute") & ops["k_dur_us"].notna()]
    per_op = [
        {
            "op_id": int(r.id),
            "name": str(r.name),
            "category": "compute",
            "phase": str(r.phase),
            "dur_us": float(r.k_dur_us) * (fwd_scale if r.phase == "forward" else other_scale),
        }
        for r in sel.itertuples()
    ]
    per_op += list(extra)
    return ReplayResult.from_json(
        {
            "iteration_ms": [meta["median_ms"] * e2e_scale] * 5,
            "median_ms": meta["median_ms"] * e2e_scale,
            "per_op": per_op,
            "coverage": {
                "selected": len(per_op),
                "replayed": len(per_op),
                "substituted": 0,
                "skipped": 0,
                "by_reason": {},
            },
            "metrics": meta["metrics"],
            "kineto_path": None,
            "device": "cpu",
        }
    ), sel


def test_errors_are_exact_for_scaled_replay(original):
    trace, meta = original
    replay, sel = _replay_from(trace, meta)
    assert len(sel) > 10  # the sample has linked compute ops
    cmp = compare(trace, replay, original_meta=meta)
    assert cmp.e2e["original_ms"] == pytest.approx(meta["median_ms"])
    assert cmp.e2e["error"] == pytest.approx(0.05, abs=1e-9)
    assert cmp.matching["matched"] == len(sel) and cmp.matching["unknown_ids"] == 0
    phases = cmp.by_phase.set_index("phase")
    assert phases.loc["forward", "error"] == pytest.approx(0.1, abs=1e-9)
    assert phases.loc["backward", "error"] == pytest.approx(0.0, abs=1e-12)
    fwd = sel[sel["phase"] == "forward"]
    assert phases.loc["forward", "original_us"] == pytest.approx(fwd["k_dur_us"].sum())
    assert phases.loc["forward", "count"] == len(fwd)
    names = cmp.by_name.set_index("name")
    addmm = sel[sel["name"] == "aten::addmm"]
    assert names.loc["aten::addmm", "original_us"] == pytest.approx(addmm["k_dur_us"].sum())
    # same metric samples on both sides -> identical curves, zero error
    assert cmp.metrics["shared"]["cpu_util_pct"]["error"] == pytest.approx(0.0, abs=1e-12)
    assert len(cmp.curves) == 50 and {"u", "rss_mb_original", "rss_mb_replay"} <= set(cmp.curves)
    assert cmp.metrics["starved"] == {"original": False, "replay": False}
    doc = cmp.to_json()
    json.dumps(doc, allow_nan=False)  # strict JSON: NaN became null
    assert doc["e2e"]["error"] == pytest.approx(0.05, abs=1e-9)


def test_cpu_starved_replay_is_flagged(original):
    """A replay whose process got half the CPU on a saturated machine is called out."""
    trace, meta = original
    replay, _ = _replay_from(trace, meta, e2e_scale=2.0)
    samples = dict(meta["metrics"]["samples"])
    samples["cpu_util_pct"] = [None if v is None else v * 0.5 for v in samples["cpu_util_pct"]]
    samples["sys_cpu_util_pct"] = [100.0] * len(samples["t_s"])
    replay.metrics = {**meta["metrics"], "samples": samples}
    cmp = compare(trace, replay, original_meta=meta)
    shared = cmp.metrics["shared"]["cpu_util_pct"]
    assert shared["replay_mean"] == pytest.approx(0.5 * shared["original_mean"])
    assert cmp.metrics["starved"] == {"original": False, "replay": True}
    assert any("replay was CPU-starved" in w for w in cmp.warnings)


def test_unknown_ids_are_reported_not_matched(original):
    trace, meta = original
    bogus = {"op_id": 10**9, "name": "aten::mm", "category": "compute", "phase": "forward", "dur_us": 5.0}
    replay, sel = _replay_from(trace, meta, extra=[bogus])
    cmp = compare(trace, replay, original_meta=meta)
    assert cmp.matching["unknown_ids"] == 1 and cmp.matching["matched"] == len(sel)
    assert any("not ET node ids" in w for w in cmp.warnings)


def test_without_meta_uses_profiled_iterations(original):
    trace, meta = original
    replay, _ = _replay_from(trace, meta, e2e_scale=1.0)
    cmp = compare(trace, replay)
    it = trace.meta["iterations"]
    assert len(it) == 1 and it[0]["name"] == "ProfilerStep#1"
    assert cmp.e2e["original_ms"] == pytest.approx(it[0]["dur_us"] / 1e3)
    assert "profiled" in cmp.e2e["original_source"]
    assert cmp.curves.empty  # no original metrics without the capture meta


def test_cli_compare_capture_folder_vs_replay_folder(original, tmp_path, capsys):
    trace, meta = original
    replay, _ = _replay_from(trace, meta, e2e_scale=0.9)
    replay.write(tmp_path)
    assert main(["compare", str(SAMPLE), str(tmp_path), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["kind"] == "replay" and doc["e2e"]["error"] == pytest.approx(0.1, abs=1e-9)
    assert main(["compare", str(SAMPLE), str(tmp_path)]) == 0
    assert "error 10.0%" in capsys.readouterr().out


def test_cli_compare_bad_replay_is_exit_2(tmp_path, capsys):
    (tmp_path / "replay.json").write_text(json.dumps({"median_ms": 1.0}))
    assert main(["compare", str(SAMPLE), str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "replay.json" in err and "lacks" in err


def test_gpu_replay_compares_kernel_time_of_a_gpu_trace(tmp_path, monkeypatch):
    """On a cuda replay of a GPU original, the original per-op time is the ET-linked kernel time
    (a GPU-shaped trace from engine.testing: the sample capture with its device side added)."""
    from engine.testing import write_gpu_run
    from engine.trace import load

    monkeypatch.setenv("MYSTIQUE_CACHE_DIR", str(tmp_path / "cache"))
    ((et, kin, _),) = write_gpu_run(SAMPLE, tmp_path / "gpu")
    trace = load(et, kin)
    ops = trace.ops
    sel = ops[(ops["category"] == "compute") & (ops["gpu_dur_us"] > 0)]
    assert len(sel) > 10
    per_op = [
        {
            "op_id": int(r.id),
            "name": str(r.name),
            "category": "compute",
            "phase": str(r.phase),
            "dur_us": float(r.gpu_dur_us) * 2.0,
        }
        for r in sel.itertuples()
    ]
    raw = {
        "iteration_ms": [10.0],
        "median_ms": 10.0,
        "per_op": per_op,
        "device": "cuda:0",
        "coverage": {"selected": len(per_op), "replayed": len(per_op), "substituted": 0, "skipped": 0, "by_reason": {}},
    }
    cmp = compare(trace, ReplayResult.from_json(raw))
    assert cmp.time_basis == "gpu"
    assert cmp.matching["original_sum_us"] == pytest.approx(sel["gpu_dur_us"].sum())
    assert cmp.matching["sum_error"] == pytest.approx(1.0)
    assert cmp.by_category["error"].tolist() == pytest.approx([1.0] * len(cmp.by_category))
    # the same replay run on a CPU compares with host (cpu_op) time instead
    cmp_cpu = compare(trace, ReplayResult.from_json({**raw, "device": "cpu"}))
    assert cmp_cpu.time_basis == "cpu"
    host = sel["k_dur_us"].dropna()
    assert cmp_cpu.matching["matched"] == len(host)
    assert cmp_cpu.matching["original_sum_us"] == pytest.approx(host.sum())


def test_an_et_alone_pairs_every_op_and_says_its_times_are_unknown(original, tmp_path, capsys):
    """Issue 32: "0 / 640 ops matched" while the per-op table paired every op: an ET alone has no
    original times, so its pairs are counted as pairs and told apart as times unknown."""
    from engine.trace import load

    trace, meta = original
    replay, sel = _replay_from(trace, meta)
    cmp = compare(load(meta["et_path"]), replay)
    m = cmp.matching
    assert m["paired"] == len(sel) and m["matched"] == 0 and m["times_unknown"] == len(sel)
    assert cmp.per_op["original_name"].notna().sum() == len(sel)  # the table pairs them too
    both = compare(trace, replay, original_meta=meta).matching  # with Kineto: every pair timed
    assert both["paired"] == both["matched"] == len(sel) and both["times_unknown"] == 0
    replay.write(tmp_path)
    assert main(["compare", str(meta["et_path"]), str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert f"{len(sel)}/{len(sel)} replayed ops paired by node id, 0 with original times" in out
    assert f"{len(sel)} times unknown (ET only" in out
    assert "coverage: selected" in out and "{" not in out.split("coverage:")[1].splitlines()[0]
