"""The typed (msgspec) chakra fast path must give exactly the tables of the general orjson path."""

from __future__ import annotations

import gzip
import json

import orjson
import pandas as pd
import pytest
from conftest import SAMPLES

import engine.trace.loader as loader
from engine.errors import TraceError
from engine.trace import load
from engine.trace.et import parse_et_typed
from engine.trace.et_typed import TYPED_DOCS, decode_chakra

pytest.importorskip("msgspec")


def _both(path):
    typed = load(path, use_cache=False)
    orig = loader.decode_chakra
    loader.decode_chakra = lambda data: None
    try:
        general = load(path, use_cache=False)
    finally:
        loader.decode_chakra = orig
    return typed, general


def _same(a, b):
    pd.testing.assert_frame_equal(a.ops, b.ops)
    pd.testing.assert_frame_equal(a.tensors, b.tensors)
    strip = lambda m: {k: v for k, v in m.items() if k != "content_hash"}  # noqa: E731 -- local one-liner
    assert strip(a.meta) == strip(b.meta)


@pytest.mark.parametrize("model", ["mlp", "cnn", "transformer", "dlrm"])
def test_samples_take_the_typed_path_and_match(model, cache_dir):
    path = SAMPLES / model / f"{model}_et.json.gz"
    doc = decode_chakra(gzip.decompress(path.read_bytes()))
    assert isinstance(doc, TYPED_DOCS[0])  # tagged attributes
    assert parse_et_typed(doc, str(path), 0, []) is not None  # and the typed path took it to the end
    _same(*_both(path))


@pytest.mark.parametrize("rel", ["param_resnet/resnet_et.json.gz", "chakra_1.0.2/1.0.2-chakra.0.0.4.json.gz"])
@pytest.mark.slow
def test_shared_chakra_traces_match(rel, shared_traces, cache_dir):
    path = shared_traces / rel
    doc = decode_chakra(gzip.decompress(path.read_bytes()))
    assert isinstance(doc, TYPED_DOCS) and parse_et_typed(doc, str(path), 0, []) is not None
    typed, general = _both(path)
    _same(typed, general)
    assert len(typed.tensors) > 0


def _mutated(tmp_path, mutate):
    doc = orjson.loads(gzip.decompress((SAMPLES / "mlp" / "mlp_et.json.gz").read_bytes()))
    mutate(doc["nodes"])
    out = tmp_path / "mutated_et.json"
    out.write_text(json.dumps(doc))  # the standard library writes ints beyond 64 bits too
    return out


def _set_attr(node, name, value):
    for a in node["attrs"]:
        if a["name"] == name:
            a["value"] = value


@pytest.mark.parametrize(
    "case",
    [
        "string_rf_id",
        "extra_io_key",
        "float_parent",
        "odd_attr",
        "kernel_file",
        "bool_seq_id",
        "float_scope",
        "null_op_schema",
        "five_element_record",
        "float_in_record",
        "huge_tensor_id",
    ],
)
def test_odd_values_fall_back_or_match(case, tmp_path, cache_dir):
    """Values the typed path refuses still load (through orjson) and give the same tables."""

    def mutate(nodes):
        n = next(x for x in nodes if x["name"].startswith("aten::"))
        if case == "string_rf_id":
            _set_attr(n, "rf_id", "17")
        elif case == "extra_io_key":
            n["inputs"]["future_field"] = [1, 2]
        elif case == "float_parent":
            n["ctrl_deps"] = float(n["ctrl_deps"])
        elif case in ("five_element_record", "float_in_record", "huge_tensor_id"):
            n = next(x for x in nodes if any(str(t).startswith("Tensor(") for t in x["inputs"]["types"]))
            j = next(j for j, t in enumerate(n["inputs"]["types"]) if str(t).startswith("Tensor("))
            rec = n["inputs"]["values"][j]
            if case == "five_element_record":  # an older record without the device
                n["inputs"]["values"][j] = rec[:5]
            elif case == "float_in_record":
                rec[3] = float(rec[3])
            else:
                rec[0] = 2**70
        elif case == "bool_seq_id":
            _set_attr(n, "seq_id", True)
        elif case == "float_scope":
            _set_attr(n, "scope", 7.0)
        elif case == "null_op_schema":
            _set_attr(n, "op_schema", None)
        elif case == "odd_attr":
            n["attrs"].append({"name": "pg_desc", "type": "string", "value": "default_pg"})
        else:
            _set_attr(n, "kernel_file", "/tmp/k.py")

    path = _mutated(tmp_path, mutate)
    if case == "huge_tensor_id":  # no int64 holds it: both paths refuse the file the same way
        with pytest.raises(TraceError, match="malformed execution trace"):
            load(path, use_cache=False)
        return
    typed, general = _both(path)
    _same(typed, general)
    assert len(typed.ops) > 0
    if case in ("odd_attr", "kernel_file"):  # both still typed; the extra attrs are kept as text
        assert typed.ops["attrs"].str.contains("pg_desc|kernel_file").any()


def test_unknown_attribute_name_takes_the_generic_typed_decoder(tmp_path, cache_dir):
    """An attribute name newer than KNOWN_ATTRS fails the tagged decoder; the generic typed
    decoder takes the document (not orjson), and the tables still match the general path."""

    def mutate(nodes):
        n = next(x for x in nodes if x["name"].startswith("aten::"))
        n["attrs"].append({"name": "some_future_attr", "type": "string", "value": "x"})

    path = _mutated(tmp_path, mutate)
    doc = decode_chakra(path.read_bytes())
    assert isinstance(doc, TYPED_DOCS[1]) and not isinstance(doc, TYPED_DOCS[0])
    typed, general = _both(path)
    _same(typed, general)
    assert typed.ops["attrs"].str.contains("some_future_attr").sum() == 1
