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
    marker = (out / "COMPLETE.json").read_text()
    # the world size comes from the marker: one that disagrees with its own rank list is refused
    (out / "COMPLETE.json").write_text(marker.replace('"world_size": 2', '"world_size": 3'))
    with pytest.raises(TraceError, match=r"completion marker says 3 ranks but lists 2 rank file"):
        resolve(out)
    (out / "COMPLETE.json").unlink()
    with pytest.raises(TraceError, match=r"no COMPLETE\.json.*2 rank file\(s\) on disk"):
        resolve(out)


# File names of the bundled samples and the shared traces, and what rank each carries; then the
# forms other tools write (PyTorch's tensorboard handler: "<worker>_<pid>.pt.trace.json",
# torchrun captures "trace_rank3.json", upper case from hand-named files).
RANK_NAMES = [
    ("ddp_rank0_et.json.gz", 0),
    ("ddp_rank1_kineto.json.gz", 1),
    ("dlrm_a2a_rank1_meta.json", 1),
    ("dlrm_tbe_rank0_et.json.gz", 0),
    ("mlp_et.json.gz", None),
    ("pt2_et.json.tar.gz", None),
    ("benchmark_result_2869224_1695835535_trace.json.gz", None),
    ("mi250_minitoy_train_ROCm6_2_kineto.json.gz", None),
    ("nw0_worker0.pt.trace.json.gz", None),
    ("h100_bert_small.json.gz", None),
    ("1.0.2-chakra.0.0.4.json.gz", None),
    ("trace_rank3.json", 3),
    ("Rank_12_kineto.json.gz", 12),
    ("host_1234.pt.trace.json", 1234),
    ("worker-7.json.gz", 7),
    ("bundle.tar.gz!rank5_et.json", 5),
]


@pytest.mark.parametrize(("name", "rank"), RANK_NAMES)
def test_one_rule_reads_a_rank_from_a_file_name(name, rank):
    from engine.trace.layout import rank_in_name

    assert rank_in_name(name) == rank


def test_resolve_groups_files_under_the_rank_they_load_as(tmp_path):
    """Two Kineto files named `job_3.json` and `job_5.json` load as ranks 3 and 5; resolve once
    grouped them as one rankless trace (its rule knew only "rankN")."""
    evs = {"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 0, "dur": 1}]}
    paths = []
    for r in (3, 5):
        paths.append(tmp_path / f"job_{r}.json")
        paths[-1].write_text(json.dumps(evs))
    inp = resolve(*paths)
    assert inp.kind is InputKind.RANKS and inp.rank_numbers == [3, 5]
    from engine.trace import load

    assert sorted(load(*paths, use_cache=False).events["rank"].unique().tolist()) == [3, 5]


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
