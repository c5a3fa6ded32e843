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
        ({"version": 2}, "version must be 1"),
        ({"segments": []}, "segments must be a non-empty list"),
        ({"segments": [{"selection": {}, "repeat": -1}]}, "segments[0]: segment repeat must be an integer >= 1"),
        ({"segments": [{"selection": {}, "repeat": 1.5}]}, "segment repeat must be an integer"),
        ({"segments": [{"selection": {"bogus": 1}}]}, "unknown selection field"),
        ({"segments": [{"selection": {}, "source": 3}]}, "segments[0].source 3 is out of range"),
        ({"batch_scale": 0}, "batch_scale must be > 0"),
        ({"batch_scale": -2}, "batch_scale must be > 0"),
        ({"dtype": "int8"}, "dtype must be null"),
        ({"sharding": {"kind": "embedding", "plan": "random", "ranks": 2}}, "sharding plan: unknown value 'random'"),
        ({"sharding": {"kind": "dp", "degree": 0}}, "dp sharding degree: must be >= 1, got 0"),
        ({"colour": "red"}, "unknown spec field(s): colour"),
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
        "negative_repeat": ({"segments": [{"selection": {}, "repeat": -3}]}, "repeat must be an integer >= 1"),
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
