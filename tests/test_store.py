"""The trace store (engine.trace.store, issue 22): streamed Parquet per rank equals the loader.

Every shared Kineto trace and every sample Kineto trace is stored, then read back through
DuckDB (`query`) and compared column by column with `engine.trace.load` on the same file:
names, categories, pids/tids, ts/dur, the integer args and the per-source facts. The streaming
scanner is also checked against a whole-document parse with block sizes that cut keys, strings
and escapes, and `mystique sql` is checked to refuse reading or writing files outside the store.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import orjson
import pandas as pd
import pytest
from clirun import cli
from conftest import SAMPLES

from engine.errors import TraceError
from engine.trace import load
from engine.trace.store import build, query, stream

EVENT_COLS = [
    "ev", "rank", "cat", "name", "pid", "tid", "ts_us", "dur_us",
    "device", "stream", "correlation", "external_id", "rf_id", "seq_num", "fwd_tid",
    "pg_name", "coll_name", "coll_seq", "comms_id", "src",
]  # fmt: skip
FLOW_COLS = ["rank", "id", "cat", "ph", "ts_us", "pid", "tid", "src"]
SAMPLE_KINETO = sorted(SAMPLES.glob("*/*kineto.json.gz"))


def _same(store_df: pd.DataFrame, loaded: pd.DataFrame, cols: list[str], what: str) -> None:
    assert list(store_df.columns) == cols, what
    assert len(store_df) == len(loaded), what
    for c in cols:
        a, b = store_df[c], loaded[c].reset_index(drop=True)
        if isinstance(b.dtype, pd.CategoricalDtype) or b.dtype == object:
            assert a.astype(str).tolist() == b.astype(str).tolist(), f"{what}: column {c}"
        elif b.dtype.kind == "f":
            np.testing.assert_array_equal(a.to_numpy(float), b.to_numpy(float), err_msg=f"{what}: column {c}")
        else:
            na_a, na_b = a.isna().to_numpy(), b.isna().to_numpy()
            assert (na_a == na_b).all(), f"{what}: nulls of {c}"
            assert (a[~na_a].astype("int64").to_numpy() == b[~na_b].astype("int64").to_numpy()).all(), f"{what}: {c}"


def _check_equal(path: Path) -> None:
    tr = load(path, use_cache=False)
    ev = query(path, "SELECT * FROM events ORDER BY ev")
    _same(ev, tr.events, EVENT_COLS, f"{path.name} events")
    fl = query(path, "SELECT * FROM flows")  # in file order (no row id: the views keep it)
    _same(fl, tr.flows, FLOW_COLS, f"{path.name} flows")
    src = query(path, "SELECT * FROM sources ORDER BY src")
    assert src["rank"].tolist() == [s["rank"] for s in tr.meta["sources"]]
    assert src["events"].tolist() == [s["events"] for s in tr.meta["sources"]]
    # the step model's iterations, built at store ingest as at load (engine/trace/steps.py)
    stored = json.loads((build(path) / "manifest.json").read_text())["sources"]
    assert [it for s in stored for it in s["iterations"]] == tr.meta["iterations"], path.name


@pytest.mark.slow
def test_store_equals_loader_on_every_shared_kineto_trace(shared_traces, manifest, cache_dir):
    kineto = [e for e in manifest if e["kind"] == "kineto"]
    assert len(kineto) >= 10
    for e in kineto:
        _check_equal(shared_traces / e["path"])


@pytest.mark.parametrize("path", SAMPLE_KINETO, ids=lambda p: p.parent.name + "/" + p.name)
@pytest.mark.slow
def test_store_equals_loader_on_samples(path, cache_dir):
    _check_equal(path)


def test_store_of_a_rank_folder_keeps_each_rank(cache_dir):
    """The ddp sample: two Kineto ranks (and two ETs, which this store slice skips)."""
    tr = load(SAMPLES / "ddp", use_cache=False)
    got = query(SAMPLES / "ddp", "SELECT rank, count(*) AS n FROM events GROUP BY rank ORDER BY rank")
    want = tr.events.groupby("rank").size()
    assert got["rank"].tolist() == want.index.tolist() == [0, 1]
    assert got["n"].tolist() == want.tolist()
    store = build(SAMPLES / "ddp")
    assert sorted(p.parent.parent.name for p in (store / "events").rglob("part.parquet")) == ["rank=0", "rank=1"]
    manifest = json.loads((store / "manifest.json").read_text())
    assert [Path(s["path"]).name for s in manifest["skipped"]] == ["ddp_rank0_et.json.gz", "ddp_rank1_et.json.gz"]


def test_names_are_dictionary_encoded_in_parquet(cache_dir):
    import pyarrow.parquet as pq

    store = build(SAMPLE_KINETO[0])
    (part,) = (store / "events").rglob("part.parquet")
    col = pq.ParquetFile(part).metadata.row_group(0).column(2)  # name
    assert col.path_in_schema == "name"
    assert any("DICTIONARY" in str(e) for e in col.encodings)


@pytest.mark.parametrize("block", [5, 13, 4096])
def test_scanner_matches_whole_document_parse(block, cache_dir):
    """Tiny blocks cut the key, strings, escapes and numbers at every kind of place."""
    doc = {
        "schemaVersion": 1,
        "deviceProperties": [{"id": 0, "name": 'GPU "x" \\ [y]'}],
        "traceEvents": [
            {"ph": "X", "cat": "cpu_op", "name": 'a"}],\\', "ts": 1.5, "dur": 2, "args": {"k": [1, {"a": "]"}]}},
            {"ph": "X", "cat": "kernel", "name": "b\\\\", "ts": 3, "dur": 1, "pid": 0, "tid": 7},
            3,
            {"ph": "M", "name": "process_name", "pid": 0, "args": {"name": "GPU 0"}},
        ],
        "distributedInfo": {"rank": 3, "world_size": 4},
    }
    data = orjson.dumps(doc, option=orjson.OPT_INDENT_2)
    items, skel = [], None
    for got in stream.scan((data[i : i + block] for i in range(0, len(data), block)), "t.json"):
        if isinstance(got, dict):
            skel = got
        else:
            items.extend(got)
    assert items == doc["traceEvents"]
    assert skel == {**doc, "traceEvents": []}


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (b'{"traceEvents": [{"ph": "X"}, {"ph": ', "truncated"),
        (b'{"traceEvents": {"ph": "X"}}', "not a list"),
        (b'{"traceEvents": [' + b"[" * 300 + b"]" * 300 + b"]}", "nested deeper"),
        (b'{"nodes": [], "schema": "1.0.1"}', "not a Kineto trace"),
        (b'{"traceEvents": [{"ph": "X", "name": nope}]}', "not valid JSON"),
    ],
)
@pytest.mark.slow
def test_hostile_documents_are_one_line_errors(tmp_path, cache_dir, text, problem):
    p = tmp_path / "bad.json"
    p.write_bytes(text)
    with pytest.raises(TraceError, match=problem):
        build(p)
    r = cli("sql", str(p), "SELECT 1", cache=cache_dir)
    assert r.returncode == 2 and problem in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_gzip_bomb_is_refused_while_streaming(tmp_path, cache_dir, monkeypatch):
    body = b'{"traceEvents": [' + b" " * (80 << 20) + b"]}"
    p = tmp_path / "bomb.json.gz"
    p.write_bytes(gzip.compress(body, 9))
    monkeypatch.setattr(stream, "BLOCK", 1 << 20)
    with pytest.raises(TraceError, match="gzip bomb"):
        build(p)
    assert not list((cache_dir / "store").glob("*/manifest.json"))  # nothing half-written is kept


@pytest.mark.slow
def test_sql_cannot_read_or_write_files_outside_the_store(tmp_path, cache_dir):
    path = SAMPLE_KINETO[0]
    tmp_path = tmp_path / "outside"
    tmp_path.mkdir()
    secret = tmp_path / "secret.csv"
    secret.write_text("a,b\n1,2\n")
    out = tmp_path / "out.csv"
    hostile = [
        f"SELECT * FROM read_csv('{secret}')",
        f"SELECT * FROM '{secret}'",
        f"COPY (SELECT * FROM events) TO '{out}'",
        f"ATTACH '{tmp_path / 'x.duckdb'}' AS x",
        f"EXPORT DATABASE '{tmp_path / 'exp'}'",
        "INSTALL httpfs",
        "LOAD httpfs",
        "SET enable_external_access = true",
        f"SELECT * FROM glob('{tmp_path}/*')",
    ]
    for sql in hostile:
        with pytest.raises(TraceError, match="SQL error"):
            query(path, sql)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["secret.csv"]
    r = cli("sql", str(path), hostile[0], cache=cache_dir)
    assert r.returncode == 2 and "Permission" in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_sql_cli_json_matches_the_loader(cache_dir):
    path = SAMPLE_KINETO[0]
    r = cli(
        "sql", str(path), "SELECT cat, count(*) AS n FROM events GROUP BY cat ORDER BY cat", "--json", cache=cache_dir
    )
    assert r.returncode == 0, r.stderr
    got = {row["cat"]: row["n"] for row in json.loads(r.stdout)}
    want = load(path, use_cache=False).events["cat"].astype(str).value_counts().to_dict()
    assert got == want
    bad = cli("sql", str(path), "SELEC 1", cache=cache_dir)
    assert (
        bad.returncode == 2
        and bad.stderr.startswith("mystique sql: error: SQL error")
        and "Traceback" not in bad.stderr
    )


def test_tarball_of_ranks_equals_the_loader(tmp_path, cache_dir):
    """A .tar.gz of two Kineto ranks goes through safe_io's tar rules and stores each member."""
    import tarfile

    tgz = tmp_path / "ranks.tar.gz"
    with tarfile.open(tgz, "w:gz") as tf:
        for p in sorted((SAMPLES / "ddp").glob("*kineto.json.gz")):
            tf.add(p, arcname=p.name)
    _check_equal(tgz)
    src = query(tgz, "SELECT path, rank FROM sources ORDER BY src")
    assert [p.split("!")[-1] for p in src["path"]] == ["ddp_rank0_kineto.json.gz", "ddp_rank1_kineto.json.gz"]
    assert src["rank"].tolist() == [0, 1]


def test_multi_member_gzip_and_plain_json_equal_the_loader(tmp_path, cache_dir, monkeypatch):
    """The same document as two gzip members, and uncompressed, read in blocks smaller than one
    event: the store still equals the loader."""
    raw = gzip.decompress(SAMPLE_KINETO[0].read_bytes())
    half = len(raw) // 2
    two = tmp_path / "two_members_kineto.json.gz"
    two.write_bytes(gzip.compress(raw[:half]) + gzip.compress(raw[half:]))
    plain = tmp_path / "plain_kineto.json"
    plain.write_bytes(raw)
    monkeypatch.setattr(stream, "BLOCK", 4093)
    _check_equal(two)
    _check_equal(plain)
    trailing = tmp_path / "trailing_kineto.json.gz"
    trailing.write_bytes(gzip.compress(raw) + b"garbage")
    with pytest.raises(TraceError, match="unexpected bytes after the gzip stream"):
        build(trailing)
    cut = tmp_path / "cut_kineto.json.gz"
    cut.write_bytes(gzip.compress(raw)[:-100])
    with pytest.raises(TraceError, match="truncated"):
        build(cut)
