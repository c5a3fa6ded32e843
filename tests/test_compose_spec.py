"""Benchmark specs: validation, bad specs -> TraceError naming the field, CLI exit code 2."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from engine.cli.main import main as cli
from engine.compose import compose, load_spec, save_spec, spec_from_dict
from engine.errors import TraceError


def _write(tmp_path: Path, spec: dict, name: str = "spec.json") -> Path:
    p = tmp_path / name
    p.write_text(json.dumps(spec))
    return p


def test_spec_round_trip_and_relative_sources(tmp_path, sample_path):
    src = sample_path("mlp")
    spec = {
        "version": 1,
        "sources": [os.path.relpath(src, tmp_path)],
        "segments": [{"selection": {"name_pattern": "addmm|mm"}, "repeat": 2, "label": "mms"}],
        "batch_scale": 0.5,
        "dtype": "bf16",
        "sharding": {"kind": "dp", "degree": 2},
    }
    p = _write(tmp_path, spec)
    s = load_spec(p)
    assert s.segments[0].repeat == 2 and s.batch_scale == 0.5 and s.sharding.world_size == 2
    # relative sources resolve against the spec file's folder
    assert s.source_paths()[0].resolve() == src.resolve()
    p2 = save_spec(s, tmp_path / "again.json")
    assert load_spec(p2).to_dict() == s.to_dict()


@pytest.mark.parametrize(
    "patch, needle",
    [
        ({"version": 2}, "spec version: must be 1, got 2"),
        ({"segments": []}, "spec segments: must not be empty"),
        ({"segments": [{"selection": {}, "repeat": -1}]}, "spec segments[0].repeat: must be >= 1, got -1"),
        ({"segments": [{"selection": {}, "repeat": 1.5}]}, "segments[0].repeat: expected an integer, got 1.5"),
        ({"segments": [{"selection": {"bogus": 1}}]}, "segments[0].selection: unknown selection field"),
        (
            {"segments": [{"selection": {}, "source": 3}]},
            "segments[0].source: must be < 1 (the number of sources), got 3",
        ),
        ({"batch_scale": 0}, "spec batch_scale: must be > 0, got 0"),
        ({"batch_scale": -2}, "spec batch_scale: must be > 0, got -2"),
        ({"dtype": "int8"}, "spec dtype: unknown value 'int8'"),
        ({"sharding": {"kind": "embedding", "plan": "random", "ranks": 2}}, "sharding plan: unknown value 'random'"),
        ({"sharding": {"kind": "dp", "degree": 0}}, "dp sharding degree: must be >= 1, got 0"),
        ({"colour": "red"}, "unknown spec field(s): colour"),
        # the spec's fields are checked as every engine setting's (engine.settings): `true == 1`
        # passed the hand-written check
        ({"version": True}, "spec version: expected an integer, got True"),
        ({"segments": [7]}, "spec segments[0]: expected an object, got 7"),
    ],
)
def test_bad_spec_fields_name_file_and_field(tmp_path, patch, needle):
    spec = {"version": 1, "sources": ["x_et.json.gz"], "segments": [{"selection": {}}]}
    spec.update(patch)
    p = _write(tmp_path, spec)
    with pytest.raises(TraceError) as e:
        load_spec(p)
    assert needle in str(e.value)
    assert str(p) in str(e.value)


def test_spec_is_frozen_and_reads_back_as_written(tmp_path):
    """A spec is a frozen engine setting: a change is a new spec (dataclasses.replace), checked
    like the first; `from_dict(to_dict())` gives the same spec, and the saved file the same bytes."""
    from dataclasses import FrozenInstanceError, replace

    from engine.compose.spec import BenchmarkSpec

    d = {
        "version": 1,
        "name": "b",
        "sources": ["a_et.json.gz", "b_et.json.gz"],
        "segments": [{"selection": {"module": "m", "time_window_us": [0, 5]}, "source": 1, "repeat": 3, "label": "x"}],
        "device": "cuda:1",
        "dtype": "bf16",
        "batch_scale": 2,
        "batch_size": 4,
        "warmup": 0,
        "iters": 2,
        "sharding": {"kind": "embedding", "plan": "row", "ranks": 4},
    }
    s = spec_from_dict(d)
    with pytest.raises(FrozenInstanceError):
        s.iters = 3  # type: ignore[misc]
    assert s.to_dict() == {**d, "batch_scale": 2.0}
    assert BenchmarkSpec.from_dict(s.to_dict()) == s
    p = save_spec(s, tmp_path / "a.json")
    assert save_spec(load_spec(p), tmp_path / "b.json").read_bytes() == p.read_bytes()
    with pytest.raises(TraceError, match=r"^spec segments\[0\]\.source: must be < 1 \(the number of sources\), got 1$"):
        replace(s, sources=("a_et.json.gz",))
    with pytest.raises(TraceError, match=r"^spec warmup: out of range: an integer of 31 digits"):
        replace(s, warmup=10**30)  # passed the hand-written check


def test_not_json_and_missing_file(tmp_path):
    p = tmp_path / "bad.json"
    p.write_text("{nope")
    with pytest.raises(TraceError, match="not valid JSON"):
        load_spec(p)
    with pytest.raises(TraceError, match="spec file not found"):
        load_spec(tmp_path / "absent.json")


@pytest.mark.parametrize(
    "case",
    ["unknown_ids", "empty_selection", "negative_repeat", "breaking_scale", "no_embeddings", "non_integer_batch"],
)
def test_bad_specs_cli_exit_2(tmp_path, capsys, case, sample_path):
    mlp, tx = sample_path("mlp"), sample_path("transformer")
    base = {"version": 1, "sources": [str(mlp)], "segments": [{"selection": {}}]}
    expect = {
        "unknown_ids": ({"segments": [{"selection": {"ids": [987654321]}}]}, "unknown ET node ids"),
        "empty_selection": (
            {"segments": [{"selection": {"name_pattern": "^no_such_op$"}}]},
            "selection matched no operators",
        ),
        "negative_repeat": ({"segments": [{"selection": {}, "repeat": -3}]}, "repeat: must be >= 1, got -3"),
        # declaring the sequence length (128) as the batch: doubling it breaks the graph's shapes
        "breaking_scale": ({"sources": [str(tx)], "batch_size": 128, "batch_scale": 2}, "breaks shape at node"),
        "no_embeddings": (
            {"sharding": {"kind": "embedding", "plan": "table", "ranks": 2}},
            f"{mlp}: no embedding tables to shard (looked for aten::embedding_bag and FBGEMM TBE lookups",
        ),
        "non_integer_batch": ({"sources": [str(tx)], "batch_scale": 0.5}, "non-integer batch: 3 x 0.5 = 1.5"),
    }[case]
    spec = dict(base)
    spec.update(expect[0])
    p = _write(tmp_path, spec)
    rc = cli(["compose", str(p), "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert rc == 2
    assert expect[1] in err
    assert "Traceback" not in err and err.count("\n") == 1
    if case in ("negative_repeat",):
        assert str(p) in err
    else:  # the API raises the same TraceError
        with pytest.raises(TraceError, match=re.escape(expect[1])):
            compose(load_spec(p))


def test_breaking_scale_names_the_node(tmp_path, sample_path):
    tx = sample_path("transformer")
    spec = spec_from_dict({"sources": [str(tx)], "segments": [{"selection": {}}], "batch_size": 128, "batch_scale": 2})
    with pytest.raises(TraceError) as e:
        compose(spec)
    msg = str(e.value)
    assert msg.startswith("batch scale 2 breaks shape at node ")
    assert "(aten::" in msg
