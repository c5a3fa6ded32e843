"""compare() of two real Kineto traces (HTA's trace-diff pair) against numbers read straight
from the files (and MANIFEST.json), plus trace-vs-trace of two of our own captures."""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from pathlib import Path

import pytest
from rawjson import raw_events

from engine.cli.main import main
from engine.compare import TraceDiff, compare, compare_traces

SAMPLES = Path(__file__).resolve().parents[1] / "sample_traces"


def _raw_x_events(path: Path):
    counts, durs = Counter(), defaultdict(float)
    for e in raw_events(path):
        if e.get("ph") == "X":
            key = (e.get("cat", ""), e.get("name", ""))
            counts[key] += 1
            durs[key] += float(e.get("dur", 0) or 0)
    return counts, durs


@pytest.fixture(scope="module")
def diff_pair(shared_traces, tmp_path_factory):
    from engine.trace import load

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MYSTIQUE_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
        d = shared_traces / "hta_trace_diff"
        a, b = load(d / "control.json.gz"), load(d / "test.json.gz")
        yield a, b, compare(a, b), d


@pytest.mark.slow
def test_trace_diff_counts_match_manifest(diff_pair, manifest):
    _, _, diff, _ = diff_pair
    assert isinstance(diff, TraceDiff)
    facts = {m["path"]: m for m in manifest}
    cat = diff.by_category.set_index("cat")
    for side, name in (("a", "control"), ("b", "test")):
        m = facts[f"hta_trace_diff/{name}.json.gz"]
        assert cat.loc["kernel", f"count_{side}"] == m["kernels"]
        assert cat.loc["cpu_op", f"count_{side}"] == m["cpu_ops"]
    assert cat.loc["kernel", "delta_count"] == 9876 - 8568
    assert cat.loc["cpu_op", "delta_count"] == 31236 - 40506


@pytest.mark.slow
def test_trace_diff_durations_match_raw_files(diff_pair):
    _, _, diff, d = diff_pair
    ca, da = _raw_x_events(d / "control.json.gz")
    cb, db = _raw_x_events(d / "test.json.gz")
    rows = diff.by_name.set_index(["cat", "name"])
    kernels = [k for k in set(da) | set(db) if k[0] == "kernel"]
    top = max(kernels, key=lambda k: max(da.get(k, 0), db.get(k, 0)))
    assert rows.loc[top, "dur_us_a"] == pytest.approx(da.get(top, 0.0), rel=1e-9)
    assert rows.loc[top, "dur_us_b"] == pytest.approx(db.get(top, 0.0), rel=1e-9)
    assert rows.loc[top, "count_a"] == ca.get(top, 0) and rows.loc[top, "count_b"] == cb.get(top, 0)
    kernel_a = sum(v for k, v in da.items() if k[0] == "kernel")
    assert diff.by_category.set_index("cat").loc["kernel", "dur_us_a"] == pytest.approx(kernel_a, rel=1e-9)
    # a name present on one side only shows up with a zero count on the other
    only_b = [k for k in cb if k not in ca]
    if only_b:
        assert rows.loc[only_b[0], "count_a"] == 0
    assert diff.by_name["dur_us_a"].combine(diff.by_name["dur_us_b"], max).is_monotonic_decreasing


@pytest.mark.slow
def test_trace_diff_json_is_strict_and_bounded(diff_pair):
    _, _, diff, _ = diff_pair
    doc = diff.to_json(top=20)
    text = json.dumps(doc, allow_nan=False)
    assert len(doc["by_name"]) == 20 and len(text) < 200_000
    deltas = [abs(r["delta_us"]) for r in doc["by_name"]]
    assert deltas == sorted(deltas, reverse=True)


def test_two_sample_captures_differ_structurally(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("MYSTIQUE_CACHE_DIR", str(tmp_path / "cache"))
    assert main(["compare", str(SAMPLES / "mlp"), str(SAMPLES / "cnn"), "--json", "--top", "0"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["kind"] == "traces"
    ops = {r["name"]: r for r in doc["ops_by_name"]}
    assert ops["aten::convolution"]["count_a"] == 0 and ops["aten::convolution"]["count_b"] > 0
    assert doc["e2e"]["a_iterations"] == 1 and doc["e2e"]["b_iterations"] == 1


def _raw_gpu(path: Path) -> list[dict]:
    return [e for e in raw_events(path) if e.get("cat") in ("kernel", "gpu_memcpy")]


@pytest.mark.parametrize(
    "pair",
    [
        ("tracelens_timesformer/h100_timesformer.json.gz", "tracelens_timesformer/mi300_timesformer.json.gz"),
        ("tracelens_bert_small/h100_bert_small.json.gz", "tracelens_mi300_bert_small/mi300_bert_small.json.gz"),
    ],
    ids=["timesformer", "bert_small"],
)
@pytest.mark.slow
def test_two_gpus_pair_ops_by_launch_order_and_say_a_direction(pair, shared_traces, cache_dir, capsys):
    """Issue 32: H100 against MI300X said "difference 9.4 %" with no direction, led by python
    frames and "PyTorch Profiler (0)"; vendor kernels never paired. The same program launches
    the same operators in the same order on the same shapes: they pair."""
    from engine.trace import load

    pa, pb = (shared_traces / p for p in pair)
    a, b = load(pa), load(pb)
    diff = compare(a, b, labels=("H100", "MI300X"))
    # launching ops: the cpu_ops whose External id the GPU tasks carry (hand count from the files)
    launch = [
        len({e["args"]["External id"] for e in _raw_gpu(p) if "External id" in e.get("args", {})}) for p in (pa, pb)
    ]
    p = diff.op_pairs
    assert (p["a_ops"], p["b_ops"]) == tuple(launch)
    assert p["paired"] >= 0.99 * min(launch)  # one program: all but a stray op pair
    cls = diff.by_class.set_index("class")
    raw_b = _raw_gpu(pb)
    cijk_us = sum(e["dur"] for e in raw_b if e["name"].startswith("Cijk_"))
    assert cijk_us > 0 and cls.loc["gemm", "b_us"] == pytest.approx(cijk_us, rel=1e-6)  # MI300X GEMM = hipBLASLt
    r = float(cls.loc["gemm", "ratio"])
    assert r == pytest.approx(cls.loc["gemm", "b_us"] / cls.loc["gemm", "a_us"])
    want = f"MI300X {r:.2f}x slower on gemm" if r > 1 else f"MI300X {1 / r:.2f}x faster on gemm"
    assert cls.loc["gemm", "direction"] == want
    ops = diff.by_op_type.set_index("name")
    assert ops["pairs"].sum() == p["paired"] and ops["direction"].str.startswith("MI300X ").all()
    step = diff.e2e["b_ms"] / diff.e2e["a_ms"]
    assert diff.headline.startswith("MI300X ") and f"{max(step, 1 / step):.2f}x" in diff.headline
    # profiler bookkeeping is left out by default, kept on request
    cats = set(diff.by_category["cat"])
    assert "python_function" not in cats and not diff.by_name["name"].str.startswith("PyTorch Profiler").any()
    assert "python_function" in set(compare_traces(a, b, bookkeeping=True).by_category["cat"])
    assert main(["compare", str(pa), str(pb)]) == 0
    out = capsys.readouterr().out
    assert "on gemm" in out and f"ops paired in launch order on name and shapes: {p['paired']}" in out
