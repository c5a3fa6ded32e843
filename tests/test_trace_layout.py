"""`engine.trace.layout.resolve`: the one answer to "what is this path?" (issue 25 §3).

Golden facts come from the bundled samples on disk (their file names and capture metas) and
from a benchmark exported here, not from the resolver itself.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.errors import TraceError
from engine.trace.layout import InputKind, rank_medians, resolve

SAMPLES = Path(__file__).resolve().parent.parent / "sample_traces"


def test_capture_folder_and_its_meta_file_are_the_same_capture():
    folder = resolve(SAMPLES / "mlp")
    assert folder.kind is InputKind.CAPTURE
    assert [f.name for f in folder.files] == ["mlp_et.json.gz", "mlp_kineto.json.gz"]
    disk = json.loads((SAMPLES / "mlp" / "mlp_meta.json").read_text())
    assert folder.meta["num_threads"] == disk["num_threads"]
    meta = resolve(SAMPLES / "mlp" / "mlp_meta.json")
    assert meta.kind is InputKind.CAPTURE and meta.files == folder.files


def test_multi_rank_capture_pairs_each_rank_with_its_kineto_and_meta():
    inp = resolve(SAMPLES / "ddp")
    assert inp.kind is InputKind.RANKS and inp.rank_numbers == [0, 1]
    assert [f.name for f in inp.rank(1).files] == ["ddp_rank1_et.json.gz", "ddp_rank1_kineto.json.gz"]
    on_disk = {
        m["rank"]: m["median_ms"]
        for m in (json.loads(p.read_text()) for p in sorted((SAMPLES / "ddp").glob("*_meta.json")))
    }
    assert rank_medians(inp) == pytest.approx(on_disk)
    # the same files given one by one are the same ranks
    given = resolve(*sorted((SAMPLES / "ddp").glob("*_et.json.gz")))
    assert given.kind is InputKind.RANKS and given.rank_numbers == [0, 1] and given.name == "ddp"


def test_single_et_file_finds_its_kineto_sibling_and_a_missing_path_is_one_line():
    inp = resolve(SAMPLES / "cnn" / "cnn_et.json.gz")
    assert inp.kind is InputKind.TRACE and [f.name for f in inp.files] == ["cnn_et.json.gz", "cnn_kineto.json.gz"]
    with pytest.raises(TraceError, match="no such file or folder"):
        resolve(SAMPLES / "nope")


def test_exported_benchmark_is_composed_and_an_incomplete_one_is_refused(tmp_path):
    from engine.compose import compose, export
    from engine.compose.spec import spec_from_dict

    spec = {"sources": [str(SAMPLES / "mlp" / "mlp_et.json.gz")], "segments": [{"selection": {}}]}
    spec["sharding"] = {"kind": "dp", "degree": 2}
    out = tmp_path / "bench"
    export(compose(spec_from_dict(spec)), out)
    inp = resolve(out)
    assert inp.kind is InputKind.COMPOSED and inp.rank_numbers == [0, 1]
    assert inp.spec["sharding"] == {"kind": "dp", "degree": 2} and inp.marker["world_size"] == 2
    assert [f.name for f in inp.files] == sorted(p.name for p in out.glob("rank_*.et.json*"))
    (out / "COMPLETE.json").unlink()
    with pytest.raises(TraceError, match=r"no COMPLETE\.json.*of the spec's 2"):
        resolve(out)


def _job_folder(tmp_path):
    """The 2-rank ddp sample as a job folder of another team: ETs and Kineto traces in two
    subfolders, named without our `_et` / `_kineto` suffixes (issue 32's DLRM job)."""
    import shutil

    ddp = Path(__file__).resolve().parents[1] / "sample_traces" / "ddp"
    job = tmp_path / "job"
    for sub, kind in (("et", "et"), ("kineto", "kineto")):
        (job / sub).mkdir(parents=True)
        for r in (0, 1):
            shutil.copy(ddp / f"ddp_rank{r}_{kind}.json.gz", job / sub / f"rank{r}.json.gz")
    return job


def test_a_job_folder_two_folders_and_a_folder_of_kineto_ranks_resolve(tmp_path, cache_dir, capsys):
    from engine.cli.main import main
    from engine.trace.layout import InputKind, resolve

    job = _job_folder(tmp_path)
    for given in ((job,), (job / "et", job / "kineto")):
        inp = resolve(*given)
        assert inp.kind is InputKind.RANKS and inp.rank_numbers == [0, 1], given
        for r in inp.ranks:  # each rank's ET first, then its Kineto trace
            assert [f.parent.name for f in r.files] == ["et", "kineto"] and r.files[0].name == f"rank{r.rank}.json.gz"
    kin = resolve(job / "kineto")
    assert kin.kind is InputKind.RANKS and [len(r.files) for r in kin.ranks] == [1, 1]
    assert main(["info", str(job), "--json"]) == 0
    objs = json.loads(capsys.readouterr().out)
    assert sorted(o["kind"] for o in objs) == ["execution_trace", "execution_trace", "kineto", "kineto"]
    assert main(["simulate", str(job / "kineto"), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["ranks"] == [0, 1]
