"""TBE lookups in every production form (issue 21 item 1): one recogniser (engine.trace.tbe) for
compose's embedding sharding and the what-if `sharding` edit.

The crafted ETs are the committed dlrm_tbe sample with its lookup renamed to the forms a
production TorchRec job records (adagrad, rowwise adagrad, `_cpu`, the `fbgemm::`-less name,
dense), arguments kept; or rearranged to the legacy (non-pt2) and dense argument layouts with no
op_schema, as ET schema 1.0.1 records them. Every form must give the sample's own tables.
"""

from __future__ import annotations

import copy
import gzip
import json
from pathlib import Path

import pytest

from engine.compose import compose, spec_from_dict
from engine.errors import TraceError
from tests.conftest import SAMPLES

TBE = SAMPLES / "dlrm_tbe"
ET = TBE / "dlrm_tbe_rank0_et.json.gz"
KINETO = TBE / "dlrm_tbe_rank0_kineto.json.gz"
LOOKUP = "fbgemm::split_embedding_codegen_lookup_sgd_function_pt2"
RENAMES = [
    "fbgemm::split_embedding_codegen_lookup_adagrad_function",
    "fbgemm::split_embedding_codegen_lookup_rowwise_adagrad_function_pt2",
    "fbgemm::split_embedding_codegen_lookup_adam_function_cpu",
    "fbgemm::split_embedding_codegen_lookup_lamb_function",
    "fbgemm::dense_embedding_codegen_lookup_function",
]


def _doc() -> dict:
    return json.loads(gzip.decompress(ET.read_bytes()))


def _lookup(doc: dict) -> dict:
    return next(n for n in doc["nodes"] if n["name"] == LOOKUP)


def _schema_attr(n: dict) -> dict:
    return next(a for a in n["attrs"] if a["name"] == "op_schema")


def _write(doc: dict, path: Path) -> Path:
    path.write_bytes(gzip.compress(json.dumps(doc).encode()))
    return path


def _renamed(tmp_path: Path, name: str) -> Path:
    doc = _doc()
    n = _lookup(doc)
    n["name"] = name
    a = _schema_attr(n)
    a["value"] = name + a["value"][a["value"].index("(") :]
    return _write(doc, tmp_path / f"{name.replace(':', '_')}.json.gz")


def _layout(tmp_path: Path, name: str, order: list) -> Path:
    """The lookup renamed and its arguments rearranged into `order` (a pt2 position, or None for
    an argument of the target layout the pt2 form lacks), with no op_schema: a 1.0.1 ET."""
    doc = _doc()
    n = _lookup(doc)
    n["name"] = name
    n["attrs"] = [a for a in n["attrs"] if a["name"] != "op_schema"]
    ins = n["inputs"]
    new = copy.deepcopy(ins)
    for key in ("values", "shapes", "types", "strides"):
        old = ins[key]
        new[key] = [copy.deepcopy(old[i]) if i is not None else ([] if key != "values" else "<None>") for i in order]
    if name.startswith("fbgemm::dense"):  # dense: the weights are one tensor, not a list
        w = order.index(1)
        new["values"][w], new["shapes"][w] = ins["values"][1][0], ins["shapes"][1][0]
        new["types"][w], new["strides"][w] = "Tensor(float)", [1]
    n["inputs"] = new
    return _write(doc, tmp_path / "layout.json.gz")


# legacy split: (placeholder, dev_weights, uvm_weights, lxu_cache_weights, weights_placements,
# weights_offsets, D_offsets, total_D, max_D, hash_size_cumsum, total_hash_size_bits, indices, offsets,
# pooling_mode); dense: (dev_weights, weights_offsets, D_offsets, total_D, max_D, hash_size_cumsum,
# total_hash_size_bits, indices, offsets, pooling_mode)
LEGACY = [0, 1, None, None, None, None, 2, 3, 4, 5, 6, 7, 8, 9]
DENSE = [1, None, 2, 3, 4, 5, 6, 7, 8, 9]


def _tables(src: Path, plan: str) -> tuple[list, dict]:
    b = compose(
        spec_from_dict(
            {
                "sources": [str(src)],
                "segments": [{"selection": {}}],
                "sharding": {"kind": "embedding", "plan": plan, "ranks": 4},
            }
        )
    )
    sh = b.meta["sharding"]
    assert b.world_size == 4
    assert sum(s["lookups"] for s in sh["shards"]) == sh["original_lookups"]
    return [(t["rows"], t["dim"], t["lookups"]) for t in sh["tables"]], sh["tbe"]


@pytest.fixture(scope="module")
def recorded():
    """The sample's own tables (the pt2 sgd lookup as recorded)."""
    if not ET.exists():
        pytest.skip(f"sample trace {ET} missing")
    return {plan: _tables(ET, plan)[0] for plan in ("table", "row", "greedy")}


def test_recorded_sample_has_two_tables(recorded):
    assert [t[:2] for t in recorded["table"]] == [(12500, 64), (12500, 64)]


@pytest.mark.parametrize("name", RENAMES)
@pytest.mark.parametrize("plan", ["table", "row", "greedy"])
@pytest.mark.slow
def test_every_renamed_form_shards_to_the_same_tables(tmp_path, cache_dir, recorded, name, plan):
    tables, tbe = _tables(_renamed(tmp_path, name), plan)
    assert tables == recorded[plan]
    assert {t["form"] for t in tbe["tables"]} == {
        "dense" if "dense" in name else ("split_pt2" if "pt2" in name else "split")
    }


@pytest.mark.parametrize(
    ("name", "order"),
    [
        ("fbgemm::split_embedding_codegen_lookup_adagrad_function", LEGACY),
        ("fbgemm::split_embedding_codegen_lookup_rowwise_adagrad_function_cpu", LEGACY),
        ("fbgemm::dense_embedding_codegen_lookup_function", DENSE),
    ],
)
def test_schema_1_0_1_layouts_without_op_schema_shard_to_the_same_tables(tmp_path, cache_dir, recorded, name, order):
    assert _tables(_layout(tmp_path, name, order), "row")[0] == recorded["row"]


def _whatif_tables(et: Path) -> list:
    from engine.simulate import simulate
    from engine.trace import load

    r = simulate(load(str(KINETO), str(et)), {"version": 1, "edits": [{"kind": "sharding", "ranks": [2, 4]}]})
    sh = r.extra["sharding"]
    assert {p["plan"] for p in sh["ranking"]["4"]} == {"table", "row", "column", "greedy"}
    return [(t["rows"], t["dim"], t["lookups"]) for t in sh["tables"]]


@pytest.mark.parametrize("name", [LOOKUP, *RENAMES[:2], RENAMES[-1]])
def test_whatif_sharding_accepts_every_form_with_compose_tables(tmp_path, cache_dir, recorded, name):
    et = ET if name == LOOKUP else _renamed(tmp_path, name)
    assert _whatif_tables(et) == recorded["table"]


def test_whatif_sharding_accepts_the_legacy_layout(tmp_path, cache_dir, recorded):
    et = _layout(tmp_path, "fbgemm::split_embedding_codegen_lookup_adagrad_function", LEGACY)
    assert _whatif_tables(et) == recorded["table"]


def test_unreadable_lookup_is_refused_in_one_line_naming_op_and_what_is_missing(tmp_path, cache_dir):
    doc = _doc()
    n = _lookup(doc)
    n["name"] = "fbgemm::split_embedding_codegen_lookup_adagrad_function"
    n["attrs"] = [a for a in n["attrs"] if a["name"] != "op_schema"]
    for key in ("values", "shapes", "types", "strides"):
        n["inputs"][key] = n["inputs"][key][:9]  # pt2 arguments read at legacy positions: no offsets (12)
    src = _write(doc, tmp_path / "short.json.gz")
    spec = {
        "sources": [str(src)],
        "segments": [{"selection": {}}],
        "sharding": {"kind": "embedding", "plan": "row", "ranks": 4},
    }
    with pytest.raises(TraceError) as e:
        compose(spec_from_dict(spec))
    msg = str(e.value)
    assert "\n" not in msg and "split_embedding_codegen_lookup_adagrad_function" in msg
    assert msg.startswith(f"{src}: TBE op ") and "argument indices (position 11) not recorded" in msg


def test_no_table_names_what_was_seen_and_prints_the_path_once(tmp_path, cache_dir):
    doc = _doc()
    n = _lookup(doc)
    n["name"] = "fbgemm::split_embedding_codegen_lookup_mystery"  # no `_function`: no lookup form
    src = _write(doc, tmp_path / "none.json.gz")
    spec = {
        "sources": [str(src)],
        "segments": [{"selection": {}}],
        "sharding": {"kind": "embedding", "plan": "row", "ranks": 4},
    }
    with pytest.raises(TraceError) as e:
        compose(spec_from_dict(spec))
    msg = str(e.value)
    assert "\n" not in msg and msg.count(str(src)) <= 1 and "no embedding tables to shard" in msg
    assert "fbgemm::split_embedding_codegen_lookup_mystery (no known lookup form" in msg
    assert "fbgemm::split_embedding_backward_codegen_sgd_cpu (a backward kernel, not a lookup)" in msg


def test_whatif_no_table_names_what_was_seen(tmp_path, cache_dir):
    from engine.simulate import simulate
    from engine.simulate.whatif.spec import SpecError
    from engine.trace import load

    doc = _doc()
    _lookup(doc)["name"] = "fbgemm::split_embedding_codegen_lookup_mystery"
    src = _write(doc, tmp_path / "none.json.gz")
    with pytest.raises(SpecError) as e:
        simulate(load(str(KINETO), str(src)), {"version": 1, "edits": [{"kind": "sharding"}]})
    msg = str(e.value)
    assert (
        "\n" not in msg and "TBE lookups (none found); seen:" in msg and "lookup_mystery (no known lookup form" in msg
    )


def test_sequence_tbe_is_refused_by_compose_in_one_line_and_ranked_by_whatif(tmp_path, cache_dir, recorded):
    """pooling_mode 2 (NONE) is a sequence TBE: compose shards pooled TBEs as embedding_bag and
    says so for a sequence one; the what-if ranks its tables (same rows, dims, lookups)."""
    doc = _doc()
    n = _lookup(doc)
    assert n["inputs"]["values"][9] == 0  # the sample's pooling_mode: sum
    n["inputs"]["values"][9] = 2
    src = _write(doc, tmp_path / "seq.json.gz")
    spec = {
        "sources": [str(src)],
        "segments": [{"selection": {}}],
        "sharding": {"kind": "embedding", "plan": "row", "ranks": 4},
    }
    with pytest.raises(TraceError) as e:
        compose(spec_from_dict(spec))
    msg = str(e.value)
    assert "\n" not in msg and msg.count(str(src)) <= 1 and LOOKUP in msg and "sequence TBE (pooling_mode none)" in msg
    assert _whatif_tables(src) == recorded["table"]
