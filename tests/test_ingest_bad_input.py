"""Bad and hostile input: one-line errors naming the file, exit code 2, nothing written outside tmp."""

from __future__ import annotations

import gzip
import io
import json
import os
import random
import sys
import tarfile
import uuid

import pytest
from conftest import et_node

from engine.cli.main import main
from engine.errors import TraceError
from engine.trace import load

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _et(nodes) -> bytes:
    return json.dumps({"schema": "1.0.1", "pid": 1, "time": "", "start_ts": 0, "finish_ts": 1, "nodes": nodes}).encode()


def _tar(path, members) -> None:
    """members: list of (TarInfo, bytes|None)."""
    with tarfile.open(path, "w:gz") as tf:
        for info, data in members:
            tf.addfile(info, io.BytesIO(data) if data is not None else None)


def _file_member(name, data: bytes) -> tuple:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    return info, data


def _link_member(name, target, kind) -> tuple:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = target
    return info, None


ESCAPE = f"h1_escape_{uuid.uuid4().hex}"
GOOD = _et([et_node(2, 1, "[pytorch|profiler|execution_trace|thread]"), et_node(3, 2)])


def _case(tmp_path, name: str):
    """Build the bad input `name` under tmp_path; return (path, expected message fragment)."""
    p = tmp_path / "in"
    p.mkdir(exist_ok=True)
    if name == "truncated_gz":
        f = p / "t.json.gz"
        f.write_bytes(gzip.compress(GOOD * 1)[:-20])
        return f, "truncated gzip stream"
    if name == "random_bytes":
        f = p / "r.json"
        f.write_bytes(random.Random(1).randbytes(4096))
        return f, "not valid JSON"
    if name == "random_gz_payload":
        f = p / "r.json.gz"
        f.write_bytes(gzip.compress(random.Random(2).randbytes(4096)))
        return f, "not valid JSON"
    if name == "other_json":
        f = p / "o.json"
        f.write_text(json.dumps({"hello": 1, "world": [2]}))
        return f, "not an execution trace or Kineto trace: top-level keys hello, world"
    if name == "json_list":
        f = p / "l.json"
        f.write_text("[1, 2, 3]")
        return f, "not an execution trace or Kineto trace"
    if name == "cycle":
        f = p / "c.json"
        f.write_bytes(_et([et_node(2, 1), et_node(3, 4), et_node(4, 5), et_node(5, 3)]))
        return f, "cycle in parent links"
    if name == "empty":
        f = p / "e.json"
        f.write_bytes(b"")
        return f, "empty file"
    if name == "too_large":
        f = p / "big.json"
        f.write_bytes(GOOD)
        os.environ["MYSTIQUE_MAX_BYTES"] = "100"
        return f, "file too large"
    if name == "gzip_bomb":
        f = p / "bomb.json.gz"
        f.write_bytes(gzip.compress(b" " * (8 << 20)))
        os.environ["MYSTIQUE_MAX_BYTES"] = str(1 << 20)
        return f, "decompressed size exceeds"
    f = p / f"{name}.tar.gz"
    if name == "tar_absolute":
        _tar(f, [_file_member("t.json", GOOD), _file_member(f"/tmp/{ESCAPE}.json", GOOD)])
        return f, "absolute member path"
    if name == "tar_dotdot":
        _tar(f, [_file_member("t.json", GOOD), _file_member(f"../../{ESCAPE}.json", GOOD)])
        return f, "escapes the archive"
    if name == "tar_symlink":
        _tar(f, [_file_member("t.json", GOOD), _link_member("link.json", "/etc/passwd", tarfile.SYMTYPE)])
        return f, "link member"
    if name == "tar_hardlink":
        _tar(f, [_file_member("t.json", GOOD), _link_member("hard.json", "t.json", tarfile.LNKTYPE)])
        return f, "link member"
    if name == "tar_device":
        info = tarfile.TarInfo("dev")
        info.type = tarfile.CHRTYPE
        info.devmajor, info.devminor = 1, 3
        _tar(f, [_file_member("t.json", GOOD), (info, None)])
        return f, "device/special member"
    raise AssertionError(name)


CASES = [
    "truncated_gz",
    "random_bytes",
    "random_gz_payload",
    "other_json",
    "json_list",
    "cycle",
    "empty",
    "too_large",
    "gzip_bomb",
    "tar_absolute",
    "tar_dotdot",
    "tar_symlink",
    "tar_hardlink",
    "tar_device",
]


@pytest.mark.parametrize("name", CASES)
def test_bad_input_cli_exit_2_one_line(name, tmp_path, cache_dir, monkeypatch, capsys):
    monkeypatch.delenv("MYSTIQUE_MAX_BYTES", raising=False)
    sentinel = tmp_path / "sentinel"
    sentinel.mkdir()
    monkeypatch.chdir(sentinel)
    monkeypatch.setenv("HOME", str(sentinel))
    try:
        path, fragment = _case(tmp_path, name)
        before = sorted(os.listdir(tmp_path))
        code = main(["info", "--json", str(path)])
    finally:
        os.environ.pop("MYSTIQUE_MAX_BYTES", None)
    out = capsys.readouterr()
    assert code == 2
    lines = out.err.strip().splitlines()
    assert len(lines) == 1, out.err
    assert str(path) in lines[0] and fragment in lines[0], lines[0]
    assert "Traceback" not in out.err and out.out == ""
    assert os.listdir(sentinel) == []
    assert sorted(os.listdir(tmp_path)) == before
    assert not (tmp_path.parent / f"{ESCAPE}.json").exists()
    assert not os.path.exists(f"/tmp/{ESCAPE}.json")
    assert not cache_dir.exists() or not any(cache_dir.iterdir())


def test_bad_input_subprocess_has_no_traceback(tmp_path):
    path, fragment = _case(tmp_path, "tar_dotdot")
    from clirun import cli

    out = cli("info", str(path), cache=tmp_path / "cache", cwd=tmp_path, timeout=120)
    assert out.returncode == 2
    assert out.stderr.count("\n") == 1 and fragment in out.stderr and "Traceback" not in out.stderr


def test_missing_path_and_empty_directory(tmp_path, cache_dir):
    with pytest.raises(TraceError, match="no such file"):
        load(tmp_path / "nope.json")
    (tmp_path / "empty").mkdir()
    with pytest.raises(TraceError, match="holds no"):
        load(tmp_path / "empty")


def test_unknown_schema_loads_with_warning(tmp_path, cache_dir):
    f = tmp_path / "future.json"
    doc = json.loads(GOOD)
    doc["schema"] = "9.9.9-chakra.9"
    f.write_text(json.dumps(doc))
    with pytest.warns(UserWarning, match="unknown ET schema"):
        tr = load(f, use_cache=False)
    assert len(tr.ops) == 2 and any("9.9.9" in w for w in tr.meta["warnings"])


def test_missing_parent_loads_as_top_level_with_warning(tmp_path, cache_dir):
    """torch writes such files: a node is written when its op ends, so an op still open when the
    observer stopped (seen: DDP's reducer::copy_bucket_to_grad under a parent on the reducer's
    thread, in 1 of ~16 two-rank gloo captures under load) leaves its children pointing at it."""
    f = tmp_path / "d.json"
    f.write_bytes(_et([et_node(2, 1), et_node(3, 99), et_node(4, 99), et_node(5, 3)]))
    with pytest.warns(UserWarning, match="2 ET nodes point to 1 parent"):
        tr = load(f, use_cache=False)
    ops = tr.ops.set_index("id")
    assert ops.loc[3, "parent"] == -1 and ops.loc[4, "parent"] == -1 and ops.loc[5, "parent"] == 3
    assert list(ops.loc[[3, 4, 5], "depth"]) == [0, 0, 1]
    assert any("missing node 99" in w and str(f) in w for w in tr.meta["warnings"])


def test_tar_resources_are_never_imported(tmp_path, cache_dir):
    marker = tmp_path / "executed"
    code = f"open({str(marker)!r}, 'w').write('pwned')\n".encode()
    f = tmp_path / "pt2.tar.gz"
    _tar(f, [_file_member("et.json", GOOD), _file_member("pt2_et_resources/kernel.py", code)])
    tr = load(f)
    assert "pt2_et_resources/kernel.py" in tr.meta["resources"]
    assert not marker.exists()
    assert "pt2_et_resources" not in sys.modules and "kernel" not in sys.modules


@pytest.mark.parametrize(
    "tail, expect",
    [
        # mtime=0: the test id must not carry a timestamp (xdist workers collect at different
        # seconds, and different ids abort the run)
        (gzip.compress(b"[2]", mtime=0), b"[1][2]"),  # a second member: both are read
        (b"\x00" * 16, b"[1]"),  # zero padding after the stream: ignored
        (b"junk", "unexpected bytes after the gzip stream"),
        (b"", b"[1]"),
    ],
    ids=["second_member", "zero_padding", "junk", "nothing"],
)
def test_gunzip_members_padding_and_trailing_bytes(tail, expect):
    """The one-call fast path (`safe_io._gunzip_whole`) must leave every case other than one
    member ending at end of file to the streaming loop, which owns the answers."""
    from engine.trace import safe_io

    data = gzip.compress(b"[1]") + tail
    if isinstance(expect, bytes):
        assert safe_io.gunzip(data, "t.json.gz", 1 << 30) == expect
    else:
        with pytest.raises(TraceError, match=expect):
            safe_io.gunzip(data, "t.json.gz", 1 << 30)


def test_gunzip_fast_path_equals_streaming_on_large_input():
    from engine.trace import safe_io

    payload = json.dumps([{"i": i, "v": random.Random(i).random()} for i in range(50_000)]).encode()
    data = gzip.compress(payload)
    assert safe_io._gunzip_whole(data, 1 << 30) == payload  # taken for a plain file
    assert safe_io._gunzip_whole(data, 1 << 20) is None  # a limit it could overrun: streaming
    with pytest.raises(TraceError, match="exceeds the limit"):
        safe_io.gunzip(data, "t.json.gz", len(payload) - 1)


def test_gunzip_lying_trailer_is_not_trusted():
    """A trailer that claims a huge size must not size the first buffer; zlib's length check
    refuses it, and the streaming loop then reports the file as corrupt, in one line."""
    import tracemalloc

    from engine.trace import safe_io

    data = bytearray(gzip.compress(b"[1, 2, 3]"))
    data[-4:] = (0xFFFFFFF0).to_bytes(4, "little")  # claims ~4 GiB
    tracemalloc.start()
    try:
        assert safe_io._gunzip_whole(bytes(data), 1 << 40) is None
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20  # bounded by deflate's ratio to the 29-byte input, not by the trailer
    with pytest.raises(TraceError, match="corrupt gzip stream"):
        safe_io.gunzip(bytes(data), "t.json.gz", 1 << 40)


def test_a_trace_too_big_to_load_whole_is_refused_before_decoding(monkeypatch, capsys):
    """Whole tables take ~8x the JSON (issue 22: 950 MB -> 7.4 GB peak): a trace beyond the
    memory available is refused in one line that points at the store, before any decoding, and
    the store still takes it (bounded memory): `mystique info` reads it there."""
    from pathlib import Path

    from engine.trace import loader
    from engine.trace.store import build

    kineto = Path(ROOT) / "sample_traces" / "mlp" / "mlp_kineto.json.gz"
    json_bytes = len(gzip.decompress(kineto.read_bytes()))
    monkeypatch.setenv("MYSTIQUE_LOAD_MAX_BYTES", str(loader.LOAD_BYTES_PER_JSON_BYTE * json_bytes - 1))
    with pytest.raises(TraceError, match=r"too big to load whole.*trace store") as exc:
        load(kineto, use_cache=False)
    assert str(kineto) in str(exc.value) and "\n" not in str(exc.value)
    assert (build(kineto, scheduler="serial") / "manifest.json").is_file()
    # `mystique info` reads such a trace through the store instead (issue 31: it was refused)
    assert main(["info", "--json", str(kineto)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert any("read through the trace store" in w for w in out["warnings"])
    monkeypatch.setenv("MYSTIQUE_LOAD_MAX_BYTES", str(loader.LOAD_BYTES_PER_JSON_BYTE * json_bytes))
    assert len(load(kineto, use_cache=False).events) > 0
