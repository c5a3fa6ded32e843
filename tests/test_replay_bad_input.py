"""Replay of bad input built from real captures: bad ops are skipped with a reason while the rest
replays, impossible memory is refused or skipped (never allocated), trace code is never run.

The ETs are the real sample captures (`sample_traces/mlp`) with one field mutated per bad op, so
the loader, planner and executor see exactly the layout a user's file has.
"""

from __future__ import annotations

import gzip
import json
import os
import sys
from pathlib import Path
from typing import ClassVar

import pytest

import engine.trace as T
from engine.cli.main import main
from engine.errors import TraceError
from engine.replay import ReplayConfig, replay
from engine.replay.plan import TRACE_CODE_REASON

ROOT = Path(__file__).resolve().parents[1]
MLP = ROOT / "sample_traces" / "mlp" / "mlp_et.json.gz"
FAST = dict(warmup=0, iters=1, metrics=False, profile=False)


def _mlp_doc() -> dict:
    return json.loads(gzip.decompress(MLP.read_bytes()))


def _by_name(doc: dict, name: str) -> list[dict]:
    return [n for n in doc["nodes"] if n["name"] == name]


def _write(path: Path, doc: dict) -> Path:
    path.write_bytes(gzip.compress(json.dumps(doc).encode()))
    return path


@pytest.fixture()
def mutated_mlp(tmp_path, cache_dir):
    """The MLP capture with an unknown operator, an unknown dtype name and a numel/shape contradiction."""
    doc = _mlp_doc()
    lin, relu = _by_name(doc, "aten::linear"), _by_name(doc, "aten::relu")
    lin[1]["name"] = "aten::does_not_exist"
    relu[1]["inputs"]["types"][0] = "Tensor(weird)"
    lin[2]["inputs"]["values"][0][3] = 12345  # shape [256, 1024] says 262144 elements
    ids = {"unknown": lin[1]["id"], "dtype": relu[1]["id"], "numel": lin[2]["id"]}
    return _write(tmp_path / "mut_et.json.gz", doc), ids


def test_real_trace_bad_ops_are_skipped_with_reasons_and_the_rest_replays(mutated_mlp):
    path, ids = mutated_mlp
    base = replay(T.load(MLP), config=ReplayConfig(**FAST)).coverage
    res = replay(T.load(path), config=ReplayConfig(**FAST))
    cov = res.coverage
    assert cov["selected"] == base["selected"] and cov["skipped"] == base["skipped"] + 3
    assert cov["replayed"] == base["replayed"] - 3 and len(res.iteration_ms) == 1
    details = {s["op_id"]: (s["reason"], s["detail"]) for s in res.skipped_ops}
    assert set(details) == set(ids.values())
    reason, detail = details[ids["unknown"]]
    assert reason == "unknown operator" and "aten::does_not_exist" in detail and "not found" in detail
    reason, detail = details[ids["dtype"]]
    assert reason == "bad tensor record: unknown dtype" and "weird" in detail and "input 0" in detail
    reason, detail = details[ids["numel"]]
    assert reason == "bad tensor record: numel contradicts shape" and "12345" in detail and "262144" in detail
    # consumers of the skipped ops still ran (their inputs were synthesized)
    status = {p["op_id"]: p["status"] for p in res.per_op}
    assert sum(v == "replayed" for v in status.values()) == cov["replayed"]


def test_cli_real_trace_bad_ops_exit_0_and_writes_only_into_out(mutated_mlp, tmp_path, monkeypatch, capsys):
    path, _ = mutated_mlp
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    out = tmp_path / "out"
    code = main(["replay", str(path), "--iters", "1", "--warmup", "0", "--no-profile", "--out", str(out), "--json"])
    cap = capsys.readouterr()
    assert code == 0 and "Traceback" not in cap.err
    doc = json.loads(cap.out)
    by_reason = doc["coverage"]["by_reason"]
    assert by_reason["bad tensor record: unknown dtype"] == 1
    assert by_reason["bad tensor record: numel contradicts shape"] == 1
    assert by_reason["unknown operator"] == 1
    full = json.loads((out / "replay.json").read_text())
    assert any("aten::does_not_exist not found in torch" in s["detail"] for s in full["skipped_ops"])
    assert os.listdir(cwd) == [] and os.listdir(out) == ["replay.json"]


def _huge_mlp(tmp_path) -> tuple[Path, int]:
    """The MLP capture whose first linear reads a 1e12-element float tensor (4 TB)."""
    doc = _mlp_doc()
    lin = _by_name(doc, "aten::linear")[0]
    lin["inputs"]["values"][0][3] = 10**12
    lin["inputs"]["shapes"][0] = [10**6, 10**6]
    lin["inputs"]["strides"][0] = [10**6, 1]
    return _write(tmp_path / "huge_et.json.gz", doc), lin["id"]


def test_real_trace_with_1e12_numel_is_refused_eager_and_skipped_lazily(tmp_path, cache_dir):
    path, op_id = _huge_mlp(tmp_path)
    trace = T.load(path)
    with pytest.raises(TraceError, match=r"GiB.*lazy"):
        replay(trace, config=ReplayConfig(**FAST, lazy=False))
    res = replay(trace, config=ReplayConfig(**FAST))  # lazy="auto" (the CLI default)
    assert res.memory["lazy"] is True and res.memory["eager_peak_bytes"] >= 4 * 10**12
    skipped = {s["op_id"]: s for s in res.skipped_ops}
    assert skipped[op_id]["reason"] == "needs more memory than the device has free"
    assert "GiB" in skipped[op_id]["detail"]
    assert set(res.coverage["by_reason"]) <= {
        "needs more memory than the device has free",
        "depends on an op skipped for memory",
    }
    assert res.coverage["replayed"] >= 1 and len(res.iteration_ms) == 1


def test_cli_1e12_numel_exit_0_no_oom(tmp_path, cache_dir, capsys):
    path, _ = _huge_mlp(tmp_path)
    code = main(
        ["replay", str(path), "--iters", "1", "--warmup", "0", "--no-profile", "--out", str(tmp_path / "out"), "--json"]
    )
    cap = capsys.readouterr()
    assert code == 0 and "Traceback" not in cap.err
    assert json.loads(cap.out)["coverage"]["by_reason"]["needs more memory than the device has free"] == 1


def test_size_argument_contradicting_the_output_is_not_allocated(tmp_path, cache_dir):
    """aten::empty(size=[1e6, 1e6]) recorded with a small output: the size argument would allocate
    4 TB that the memory budget never saw; it is skipped as a contradiction, its consumer runs."""
    doc = json.loads(gzip.decompress((ROOT / "sample_traces" / "dlrm" / "dlrm_et.json.gz").read_bytes()))
    empties = [n for n in doc["nodes"] if n["name"] == "aten::empty" and n["outputs"]["values"]]
    node = empties[0]
    recorded = node["outputs"]["values"][0][3]
    node["inputs"]["values"][0] = [10**6, 10**6]
    node["inputs"]["shapes"][0] = [[], []]
    node["inputs"]["types"][0] = "GenericList[Int,Int]"
    path = _write(tmp_path / "size_et.json.gz", doc)
    res = replay(T.load(path), config=ReplayConfig(**FAST, mode="leaf"))
    (s,) = [s for s in res.skipped_ops if s["op_id"] == node["id"]]
    assert s["reason"] == "bad tensor record: numel contradicts shape"
    assert "size argument [1000000, 1000000]" in s["detail"] and str(recorded) in s["detail"]
    assert "failed at run time" not in res.coverage["by_reason"]
    assert res.coverage["replayed"] > 0


class _CodeSpy:
    """A sys audit hook (they cannot be removed, so it is switched off after the test) recording
    every compile/exec/import/open that touches a resource of the trace."""

    active = False
    needles: tuple[str, ...] = ()
    hits: ClassVar[list] = []

    @classmethod
    def hook(cls, event, args):
        if not cls.active or event not in ("compile", "exec", "import", "open", "os.system", "subprocess.Popen"):
            return
        if event == "exec":
            text = getattr(args[0], "co_filename", "")
        elif event == "compile":
            src, name = args[0], args[1]
            text = f"{name} {src.decode(errors='replace') if isinstance(src, bytes) else src if isinstance(src, str) else ''}"
        else:
            text = " ".join(str(a) for a in args[:2])
        if any(n in text for n in cls.needles):
            cls.hits.append((event, text[:200]))


_hook_installed = False


@pytest.fixture()
def code_spy():
    global _hook_installed
    if not _hook_installed:
        sys.addaudithook(_CodeSpy.hook)
        _hook_installed = True
    _CodeSpy.hits = []
    yield _CodeSpy
    _CodeSpy.active = False


def test_pt2_trace_code_is_never_compiled_imported_or_opened(
    shared_traces, cache_dir, tmp_path, code_spy, monkeypatch, capsys
):
    import tarfile

    tar = shared_traces / "param_pt2" / "pt2_et.json.tar.gz"
    with tarfile.open(tar) as tf:
        res_files = {
            m.name: tf.extractfile(m).read().decode()
            for m in tf.getmembers()
            if m.isfile() and m.name.startswith("pt2_et_resources/")
        }
    assert len(res_files) == 2
    stems = tuple(Path(n).stem for n in res_files)
    # the kernel sources' distinctive def lines (e.g. "def triton_poi_fused_...(in_ptr0, ...")
    kernel_lines = tuple(
        line.strip()
        for src in res_files.values()
        for line in src.splitlines()
        if line.strip().startswith("def ") and len(line.strip()) > 30
    )
    assert kernel_lines
    code_spy.needles = ("pt2_et_resources",) + stems + kernel_lines
    modules_before = set(sys.modules)
    monkeypatch.chdir(tmp_path)
    code_spy.active = True
    try:
        trace = T.load(tar, use_cache=False)
        res = replay(trace, config=ReplayConfig(**FAST))
        code = main(
            [
                "replay",
                str(tar),
                "--iters",
                "1",
                "--warmup",
                "0",
                "--no-profile",
                "--out",
                str(tmp_path / "out"),
                "--json",
            ]
        )
    finally:
        code_spy.active = False
    assert code_spy.hits == []
    assert sorted(trace.meta["resources"]) == sorted(res_files)
    assert res.coverage["by_reason"] == {TRACE_CODE_REASON: 2}
    assert {s["reason"] for s in res.skipped_ops} == {TRACE_CODE_REASON}
    assert all(s["name"].startswith("triton_") for s in res.skipped_ops)
    assert res.coverage["replayed_compute"] == res.coverage["selected_compute"] == 2
    cap = capsys.readouterr()
    assert code == 0 and json.loads(cap.out)["coverage"]["by_reason"] == {TRACE_CODE_REASON: 2}
    new = set(sys.modules) - modules_before
    assert not [m for m in new if "pt2_et_resources" in m or m.startswith(stems)]
    # nothing from the tarball was extracted anywhere we can see
    assert not list(tmp_path.rglob("*.py"))


def test_allow_trace_code_is_explicit_and_still_reports_ops(shared_traces, cache_dir):
    trace = T.load(shared_traces / "param_pt2" / "pt2_et.json.tar.gz")
    res = replay(trace, config=ReplayConfig(**FAST, allow_trace_code=True))
    reasons = set(res.coverage["by_reason"])
    assert TRACE_CODE_REASON not in reasons and len(res.skipped_ops) == 2
    assert ReplayConfig().allow_trace_code is False
