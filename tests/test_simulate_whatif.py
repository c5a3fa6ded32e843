"""What-if edits on real traces: layers, batch, data-parallel degree, sharding, spec errors (issue 12)."""

from __future__ import annotations

import pytest

from tests.conftest import SAMPLES


def _sample(model):
    from engine.trace import load

    return load(str(SAMPLES / model / f"{model}_kineto.json.gz"), str(SAMPLES / model / f"{model}_et.json.gz"))


def _spec(*edits):
    return {"version": 1, "edits": list(edits)}


def _host_busy_ms(ev) -> float:
    """Union of the host ops' intervals (nested ops counted once), in ms."""
    host = ev[ev["cat"].astype(str).isin(["cpu_op", "user_annotation"])]
    host = host[~host["name"].astype(str).str.startswith("ProfilerStep")]
    total, start, end = 0.0, None, None
    for a, b in sorted(zip(host["ts_us"].to_numpy(), (host["ts_us"] + host["dur_us"]).to_numpy())):
        if end is None or a > end:
            total += 0.0 if end is None else end - start
            start, end = a, b
        else:
            end = max(end, b)
    return (total + (0.0 if end is None else end - start)) / 1e3


def test_layers_duplicates_blocks_and_scales_optimizer(cache_dir):
    from engine.simulate import simulate

    tr = _sample("transformer")
    base = simulate(tr)
    r = simulate(tr, _spec({"kind": "layers", "module": r"blocks\.\d+", "copies": 1}))
    rep = r.extra["layers"][0]
    assert rep["matched"] == 2
    # 2 of the GPT's ~2.66 M parameters per block (model config: d=256, vocab 2048, seq 128)
    assert rep["param_share"] == pytest.approx(2 * 789_760 / 2_659_840, abs=0.01)
    names = r.predicted.events["name"].astype(str)
    assert (names == "nn.Module: blocks.1").sum() == 2 and (names == "nn.Module: blocks.0").sum() == 2
    # the copies run back to back with the rest of the step: the step grows by exactly the host
    # time they add (no overlap, no lost gap), and the blocks are most of the step
    added_ms = r.predicted_iteration_ms - base.predicted_iteration_ms
    assert added_ms == pytest.approx(_host_busy_ms(r.predicted.events) - _host_busy_ms(base.predicted.events), rel=1e-6)
    assert added_ms > 0.5 * base.predicted_iteration_ms
    # copies are placed after their original inside the enclosing span
    ev = r.predicted.events
    blocks = ev[names == "nn.Module: blocks"].iloc[0]
    inner = ev[names.str.fullmatch(r"nn\.Module: blocks\.\d")]
    assert (inner["ts_us"] >= blocks["ts_us"]).all()
    assert ((inner["ts_us"] + inner["dur_us"]) <= blocks["ts_us"] + blocks["dur_us"] + 1e-6).all()


def test_batch_scales_gemms_not_optimizer(cache_dir):
    from engine.simulate import simulate

    tr = _sample("mlp")
    base = simulate(tr)
    r = simulate(tr, _spec({"kind": "batch", "size": 256, "scale": 2.0}))
    added_ms = r.predicted_iteration_ms - base.predicted_iteration_ms
    assert added_ms == pytest.approx(_host_busy_ms(r.predicted.events) - _host_busy_ms(base.predicted.events), rel=1e-6)
    ev0, ev1 = base.predicted.events, r.predicted.events
    n0, n1 = ev0["name"].astype(str), ev1["name"].astype(str)
    opt0 = ev0.loc[n0 == "## optimizer ##", "dur_us"].sum()
    opt1 = ev1.loc[n1 == "## optimizer ##", "dur_us"].sum()
    assert opt1 == pytest.approx(opt0, rel=0.02)  # parameters do not depend on the batch
    mm0 = ev0.loc[n0 == "aten::mm", "dur_us"].sum()
    mm1 = ev1.loc[n1 == "aten::mm", "dur_us"].sum()
    # twice the FLOPs: each GEMM gets longer, and never more than 2x (efficiency does not fall with size)
    per_op = ev1.loc[n1 == "aten::mm", "dur_us"].to_numpy() / ev0.loc[n0 == "aten::mm", "dur_us"].to_numpy()
    assert (per_op > 1).all() and (per_op <= 2 + 1e-9).all() and mm1 > mm0
    assert set(r.extra["cost_model"]) == {"gemm", "embedding", "memory"}


def test_batch_without_size_infers_it_from_the_trace(cache_dir):
    """A user does not know the batch: left out, it is inferred (mlp's 256) and reported, and the
    prediction equals the one with the size given."""
    from engine.simulate import simulate

    tr = _sample("mlp")
    given = simulate(tr, _spec({"kind": "batch", "size": 256, "scale": 2.0}))
    r = simulate(tr, _spec({"kind": "batch", "scale": 2.0}))
    assert r.extra["batch"][0]["size"] == 256 and r.extra["batch"][0]["inferred"] is True
    assert any("inferred 256" in w for w in r.warnings)
    assert r.predicted_iteration_ms == pytest.approx(given.predicted_iteration_ms, rel=1e-9)
    assert given.extra["batch"][0]["inferred"] is False


def test_batch_without_the_et_reads_kineto_input_dims(cache_dir):
    """The sample's Kineto trace alone (recorded with shapes): the batch edit re-costs its ops from
    the cpu_ops' Input Dims, infers the same batch (256) as from the ET, and lengthens the step."""
    from engine.simulate import simulate
    from engine.trace import load

    tr = load(str(SAMPLES / "mlp" / "mlp_kineto.json.gz"))
    base = simulate(tr).predicted_iteration_ms
    r = simulate(tr, _spec({"kind": "batch", "scale": 2.0}))
    rep = r.extra["batch"][0]
    assert rep["shapes_from"] == "Kineto Input Dims" and rep["size"] == 256 and rep["tasks_rescaled"] > 0
    assert r.predicted_iteration_ms > 1.2 * base


def test_data_parallel_1024_ranks_by_symmetry(shared_traces, cache_dir):
    import time

    from engine.simulate import simulate
    from engine.trace import load

    tr = load(str(shared_traces / "hta_trace_diff" / "control.json.gz"))
    same = simulate(tr, _spec({"kind": "data_parallel", "ranks": 8}))
    assert same.predicted_iteration_ms == pytest.approx(
        same.measured_iteration_ms or simulate(tr).predicted_iteration_ms, rel=1e-6
    )
    t0 = time.perf_counter()
    big = simulate(tr, _spec({"kind": "data_parallel", "ranks": 1024}))
    assert time.perf_counter() - t0 < 60
    d = big.extra["dp"]
    assert d["from_ranks"] == 8 and d["simulated_ranks"] == 1
    assert d["collective_ms_after"] > d["collective_ms_before"]
    assert big.predicted_iteration_ms > same.predicted_iteration_ms
    assert big.breakdown.mean()["communication_ms"] > same.breakdown.mean()["communication_ms"]


def test_sharding_ranks_plans(cache_dir):
    from engine.simulate import simulate

    r = simulate(_sample("dlrm"), _spec({"kind": "sharding", "ranks": [2, 4]}))
    sh = r.extra["sharding"]
    assert [t["rows"] for t in sh["tables"]] == [100_000, 40_000, 10_000, 2_000]
    for n in ("2", "4"):
        plans = sh["ranking"][n]
        assert {p["plan"] for p in plans} == {"table", "row", "column", "greedy"}
        assert plans[0]["slowest_rank_ms"] <= plans[-1]["slowest_rank_ms"]
        table = next(p for p in plans if p["plan"] == "table")
        greedy = next(p for p in plans if p["plan"] == "greedy")
        assert greedy["slowest_rank_ms"] < table["slowest_rank_ms"]  # the 100k-row table dominates


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"version": 1, "edits": [{"kind": "layers", "module": "(", "copies": 1}]}, "edits[0].module"),
        ({"version": 1, "edits": [{"kind": "layers", "module": "x", "copies": 0}]}, "edits[0].copies"),
        ({"version": 1, "edits": [{"kind": "batch", "size": 3, "scale": "two"}]}, "edits[0].scale"),
        ({"version": 1, "edits": [{"kind": "data_parallel"}]}, "edits[0].ranks"),
        ({"version": 1, "edits": [{"kind": "sharding", "plans": ["diagonal"]}]}, "edits[0].plans"),
        ({"version": 1, "edits": [{"kind": "nope"}]}, "edits[0].kind"),
        ({"version": 1, "edits": {}}, "edits"),
        ({"version": 1, "edits": [], "extra": 1}, "extra"),
    ],
)
def test_spec_errors_name_the_field(spec, field):
    from engine.simulate.whatif import SpecError, WhatIfSpec

    with pytest.raises(SpecError) as ei:
        WhatIfSpec.parse(spec)
    assert ei.value.field == field
    assert f"'{field}'" in str(ei.value)


@pytest.mark.parametrize(
    ("edit", "field", "problem"),
    [
        ({"kind": "dependency", "after": "a", "before": "b", "occurrence": -1}, "occurrence", "must be >= 0, got -1"),
        ({"kind": "sharding", "ranks": []}, "ranks", "must not be empty"),
        ({"kind": "sharding", "ranks": [2, 5000]}, "ranks", "must be between 1 and 4096, got 5000"),
        ({"kind": "sharding", "plans": ["row", "diagonal"]}, "plans", "unknown value 'diagonal'"),
        ({"kind": "batch", "size": 3, "scale": 2.0, "multiples": [4, 0]}, "multiples", "must be > 0, got 0"),
        ({"kind": "data_parallel", "ranks": 8, "from_ranks": 1}, "from_ranks", "must span ranks to calibrate"),
        ({"kind": "pipeline", "stages": 2, "microbatches": 4, "p2p_us": -1}, "p2p_us", "must be between 0 and 1e+12"),
        ({"kind": "speedup", "factor": 0}, "factor", "must be > 0, got 0"),
        ({"kind": "speedup", "factor": 2, "category": "tpu"}, "category", "unknown value 'tpu'"),
        ({"kind": "speedup", "factor": 2, "name": "(["}, "name", "not a valid regex"),
        ({"kind": "speedup", "factor": 2}, "category", "give a category or a name regex"),  # joins two fields
    ],
)
def test_field_rules_name_field_and_problem(edit, field, problem):
    """Each declared rule (rules.py) and an edit's own `check` report `edits[0].FIELD: problem`."""
    from engine.simulate.whatif import SpecError, WhatIfSpec

    with pytest.raises(SpecError) as ei:
        WhatIfSpec.parse({"version": 1, "edits": [edit]})
    assert ei.value.field == f"edits[0].{field}"
    assert problem in ei.value.detail


def test_rules_hold_for_edits_made_in_python():
    """The rules live on the fields, so an edit built without the parser is checked the same way."""
    from engine.simulate.whatif.layers import Layers
    from engine.simulate.whatif.sharding import Sharding

    with pytest.raises(ValueError, match="copies: must be between 1 and 1000, got 1001"):
        Layers(module="x", copies=1001)
    with pytest.raises(ValueError, match="ranks: must be between 1 and 4096, got 0"):
        Sharding(ranks=(2, 0))
    assert Layers(module="x", copies=1000).copies == 1000


def test_register_refuses_post_init():
    """An edit that wrote its own __post_init__ would skip the declared rules; register says so."""
    from engine.simulate.whatif.spec import Edit, register

    class Sneaky(Edit):
        factor: float

        def __post_init__(self) -> None:
            pass

    with pytest.raises(TypeError, match="not __post_init__"):
        register("sneaky_test_edit")(Sneaky)


def test_field_bounds_for_widgets():
    from engine.simulate.whatif.spec import field_bounds

    assert field_bounds("data_parallel", "ranks") == (1, 1_000_000)
    assert field_bounds("layers", "copies") == (1, 1000)
    assert field_bounds("dependency", "occurrence") == (0, None)
    assert field_bounds("dependency", "delay_us") == (-1e12, 1e12)  # MAX_US either way


def test_hidden_size_grows_gemms_and_optimizer(cache_dir):
    from engine.simulate import simulate

    tr = _sample("mlp")
    base = simulate(tr)
    r = simulate(tr, _spec({"kind": "hidden", "size": 1024, "scale": 2.0}))
    assert r.extra["hidden"][0]["tasks_rescaled"] > 20
    n0 = base.predicted.events["name"].astype(str)
    n1 = r.predicted.events["name"].astype(str)
    opt0 = base.predicted.events.loc[n0 == "## optimizer ##", "dur_us"].sum()
    opt1 = r.predicted.events.loc[n1 == "## optimizer ##", "dur_us"].sum()
    assert opt1 > 1.3 * opt0  # parameters with a hidden dimension grow
    assert r.predicted_iteration_ms > 1.5 * base.predicted_iteration_ms


def test_pipeline_1f1b(cache_dir):
    from engine.simulate import simulate

    tr = _sample("transformer")
    one = simulate(tr, _spec({"kind": "pipeline", "stages": 1, "microbatches": 1})).extra["pipeline"]
    assert one["predicted_step_ms"] == pytest.approx(one["unpipelined_step_ms"], rel=1e-9)  # identity
    p = simulate(tr, _spec({"kind": "pipeline", "stages": 4, "microbatches": 8})).extra["pipeline"]
    assert p["bubble_fraction"] == pytest.approx(3 / 11)
    more = simulate(tr, _spec({"kind": "pipeline", "stages": 4, "microbatches": 32})).extra["pipeline"]
    assert more["predicted_step_ms"] < p["predicted_step_ms"] < one["predicted_step_ms"]


def test_layers_without_module_finds_the_block_stack_on_a_shared_gpu_trace(shared_traces, cache_dir):
    """HF BERT on an H100 (Kineto only, nn.Module annotations `BertLayer_0..3` around `Linear_N`,
    `LayerNorm_N`, ...): the repeated stack is the 4 BertLayers, not the 26 Linears inside them;
    copying each once lengthens the step."""
    from engine.simulate import simulate
    from engine.trace import load

    tr = load(str(shared_traces / "tracelens_bert_small" / "h100_bert_small.json.gz"))
    base = simulate(tr)
    r = simulate(tr, _spec({"kind": "layers", "copies": 1}))
    rep = r.extra["layers"][0]
    assert rep["module"] == r"BertLayer_\d+" and rep["matched"] == 4
    assert rep["inferred"] == {"source": "nn.Module", "module": r"BertLayer_\d+", "instances": 4}
    assert any("repeated block stack" in w for w in r.warnings)
    assert r.predicted_iteration_ms > base.predicted_iteration_ms


def test_layers_and_batch_without_size_or_module_on_samples(cache_dir):
    """Our transformer (blocks.0, blocks.1; batch 3) and the 2-rank dlrm_tbe set, whose op ids
    repeat on each rank (a batch edit once leaked pandas' 'cannot reindex on an axis with
    duplicate labels')."""
    from engine.simulate import simulate
    from engine.trace import load

    tr = _sample("transformer")
    base = simulate(tr)
    r = simulate(tr, _spec({"kind": "layers"}, {"kind": "batch", "scale": 2.0}))
    assert r.extra["layers"][0]["module"] == r"blocks\.\d+" and r.extra["layers"][0]["matched"] == 2
    assert r.extra["batch"][0]["size"] == 3 and r.predicted_iteration_ms > base.predicted_iteration_ms
    two = load(str(SAMPLES / "dlrm_tbe"))
    b0 = simulate(two)
    b = simulate(two, _spec({"kind": "batch", "scale": 2.0}))
    assert b.extra["batch"][0]["size"] == 256 and b.extra["batch"][0]["tasks_rescaled"] > 0
    assert b.predicted_iteration_ms > b0.predicted_iteration_ms


def test_layers_without_module_refuses_listing_candidates(shared_traces, cache_dir):
    """HTA's simple-add trace has no repeated indexed module: one field error saying what it saw."""
    from engine.simulate import simulate
    from engine.simulate.whatif.spec import SpecError
    from engine.trace import load

    tr = load(str(shared_traces / "hta_simple_add" / "benchmark_simple_add_trace.json.gz"))
    with pytest.raises(SpecError, match=r"edits\[0\]\.module.*no repeated block stack found \(candidates: ") as e:
        simulate(tr, _spec({"kind": "layers"}))
    assert "\n" not in str(e.value)
