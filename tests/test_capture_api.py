"""capture(): real capture of a (shrunk) sample model; files, keys, labels and ET<->Kineto ids."""

from __future__ import annotations

import gzip
import json
import re
import shlex

import pytest

from engine.capture import CaptureSession, capture, capture_sample, read_meta
from engine.capture.models import SAMPLE_MODELS, build
from engine.cli.main import build_parser, main
from engine.errors import TraceError

META_KEYS = {
    "name",
    "files",
    "model",
    "model_config",
    "command",
    "steps",
    "warmup",
    "timing_steps",
    "step_ms",
    "median_ms",
    "metrics",
    "modules",
    "device",
    "device_name",
    "torch_version",
    "python",
    "cpu_model",
    "num_threads",
}


def _attr(node: dict, key: str):
    if key in node:
        return node[key]
    for a in node.get("attrs", []):
        if a["name"] == key:
            return a["value"]
    return None


@pytest.fixture(scope="module")
def small_mlp(tmp_path_factory):
    out = tmp_path_factory.mktemp("cap")
    return capture_sample(
        "mlp",
        overrides=dict(batch=32, widths=(64, 64, 64, 64), classes=16),
        out_dir=out,
        steps=2,
        warmup=1,
        timing_steps=5,
        command="test",
    )


def test_files_and_meta_keys(small_mlp):
    res = small_mlp
    for p in (res.et_path, res.kineto_path, res.meta_path):
        assert p.is_file() and p.stat().st_size > 0
    assert res.et_path.name == "mlp_et.json.gz" and res.kineto_path.name == "mlp_kineto.json.gz"
    meta = json.loads(res.meta_path.read_text())
    assert set(meta) >= META_KEYS, META_KEYS - set(meta)
    assert len(meta["step_ms"]) == 5 and all(x > 0 for x in meta["step_ms"])
    assert meta["median_ms"] == pytest.approx(sorted(meta["step_ms"])[2], rel=1e-3)
    assert meta["model_config"]["widths"] == [64, 64, 64, 64] and meta["device"] == "cpu"
    samples = meta["metrics"]["samples"]
    assert set(samples) >= {"t_s", "cpu_util_pct", "sys_cpu_util_pct", "rss_mb"}
    lo, hi = meta["metrics"]["window_s"]
    # the timed window lasts about as long as the timed steps
    assert hi - lo == pytest.approx(sum(meta["step_ms"]) / 1e3, rel=0.2, abs=0.01)
    assert meta["modules"]["body.0"] == "Linear" and meta["modules"]["MLP"] == "MLP"
    back = read_meta(res.meta_path.parent)
    assert back["et_path"] == str(res.et_path)


def test_et_and_kineto_cover_the_same_steps_and_link(small_mlp):
    et = json.loads(gzip.open(small_mlp.et_path).read())
    kineto = json.loads(gzip.open(small_mlp.kineto_path).read())
    names = [n["name"] for n in et["nodes"]]
    assert names.count("ProfilerStep#1") == 1 and names.count("ProfilerStep#2") == 1
    assert "ProfilerStep#0" not in names and "ProfilerStep#3" not in names
    for label in ("## forward ##", "## backward ##", "## optimizer ##", "nn.Module: body.0", "nn.Module: head"):
        assert names.count(label) == 2, label  # once per recorded step
    steps_k = [e["name"] for e in kineto["traceEvents"] if e.get("name", "").startswith("ProfilerStep#")]
    assert sorted(steps_k) == ["ProfilerStep#1", "ProfilerStep#2"]
    k_rf = {
        e["args"]["Record function id"]
        for e in kineto["traceEvents"]
        if e.get("ph") == "X" and "Record function id" in e.get("args", {})
    }
    ops = [n for n in et["nodes"] if not n["name"].startswith("[pytorch|profiler")]
    linked = sum(_attr(n, "rf_id") in k_rf for n in ops)
    assert linked / len(ops) >= 0.99, (linked, len(ops))
    assert any(n["name"] == "aten::addmm" for n in ops)


def test_threads_are_set_for_the_capture_and_restored(tmp_path):
    import torch

    before = torch.get_num_threads()
    step, _ = build("mlp", "cpu", batch=8, widths=(16, 16, 16, 16), classes=4)
    res = capture(step, out_dir=tmp_path, name="t", warmup=0, timing_steps=1, threads=1)
    assert res.meta["num_threads"] == 1 and torch.get_num_threads() == before


def test_session_drives_a_user_loop(tmp_path):
    step, _ = build("mlp", "cpu", batch=16, widths=(32, 32, 32, 32), classes=8)
    calls = 0
    with CaptureSession(out_dir=tmp_path, name="loop", steps=1, warmup=0, timing_steps=2) as cap:
        while not cap.done:
            step()
            calls += 1
            cap.step()
    assert calls == 0 + 2 + 1 + 1  # warm-up + timed + profiler warm-up + recorded
    assert len(cap.result.step_ms) == 2 and (tmp_path / "loop_et.json.gz").is_file()


def test_session_stopped_early_is_an_error(tmp_path):
    with (
        pytest.raises(TraceError, match="ended after 1 of"),
        CaptureSession(out_dir=tmp_path, name="short", steps=1, warmup=0, timing_steps=3) as cap,
    ):
        cap.step()


@pytest.mark.parametrize("kw", [{"name": "../x"}, {"steps": 0}, {"timing_steps": 0}, {"device": "tpu"}, {"threads": 0}])
def test_bad_config_rejected(tmp_path, kw):
    args = {"out_dir": tmp_path, "name": "ok", **kw}
    with pytest.raises(TraceError):
        CaptureSession(**args)


def test_registry_and_unknown_model():
    assert set(SAMPLE_MODELS) == {"mlp", "cnn", "transformer", "dlrm"}
    with pytest.raises(TraceError, match="unknown sample model"):
        build("resnet50")


def test_cli_capture_json_and_regenerate_command(tmp_path, capsys):
    rc = main(["capture", "mlp", "--out", str(tmp_path), "--timing-steps", "2", "--warmup", "1", "--json"])
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    assert out["model"] == "mlp" and len(out["step_ms"]) == 2 and out["median_ms"] > 0
    meta = json.loads((tmp_path / "mlp" / "mlp_meta.json").read_text())
    argv = shlex.split(meta["command"])
    assert argv[0] == "mystique"
    ns = build_parser().parse_args(argv[1:])  # the recorded command is a valid invocation
    assert (ns.model, ns.timing_steps, ns.warmup, ns.out, ns.threads) == ("mlp", 2, 1, str(tmp_path), 1)
    assert meta["num_threads"] == 1


def test_cli_capture_needs_model_or_all(tmp_path, capsys):
    assert main(["capture", "--out", str(tmp_path)]) == 2
    assert "MODEL or --all-samples" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(SAMPLE_MODELS))
def test_every_sample_model_captures_on_cpu_and_links(name, tmp_path, cache_dir):
    """A fresh CPU capture of each full-size sample model links ET <-> Kineto at >= 99%."""
    from engine.trace import load

    res = capture_sample(name, out_dir=tmp_path, steps=1, warmup=1, timing_steps=2, command="test", threads=1)
    trace = load(res.et_path, res.kineto_path)
    link = trace.meta["link"]
    assert link["link_rate"] >= 0.99, link
    assert set(trace.ops["phase"].astype(str)) >= {"forward", "backward", "optimizer"}


@pytest.mark.parametrize(
    ("model", "overrides", "problem"),
    [
        ("mlp", {"batch": 0}, "MLPConfig.batch must be a positive int, got 0"),
        ("mlp", {"batch": True}, "MLPConfig.batch must be a positive int, got True"),
        ("mlp", {"lr": "fast"}, "MLPConfig.lr must be a positive number, got 'fast'"),
        ("mlp", {"widths": ()}, "MLPConfig.widths must be a non-empty list of positive ints"),
        ("mlp", {"hidden": 64}, "sample mlp has no config field 'hidden'; its fields: batch, widths, classes, lr"),
        ("cnn", {"stage_widths": (32, 0)}, "CNNConfig.stage_widths must be a non-empty list"),
        ("dlrm", {"table_rows": (100, -1)}, "DLRMConfig.table_rows must be a non-empty list"),
        ("transformer", {"d_model": 250, "heads": 4}, "must be divisible by heads"),
    ],
)
def test_sample_config_rejects_bad_sizes(model, overrides, problem):
    """Sizes are checked by their annotation, so a zero width fails here and not deep in torch."""
    with pytest.raises(TraceError, match=re.escape(problem)):
        build(model, "cpu", **overrides)


def test_sample_layer_widths_from_json_lists():
    """Overrides read from JSON arrive as lists; the layer widths shape the model as tuples would."""
    step, cfg = build("mlp", "cpu", batch=4, widths=[16, 32, 8], classes=3)
    linears = [m for m in step.model.modules() if m.__class__.__name__ == "Linear"]
    assert [(m.in_features, m.out_features) for m in linears] == [(16, 32), (32, 8), (8, 3)]
    assert cfg["widths"] == [16, 32, 8] and step.inputs[0].shape == (4, 16)


def test_cli_set_changes_the_sample_config_and_is_recorded(tmp_path, capsys):
    """`mystique capture mlp --set ...`: the meta holds the changed config and a command that redoes it."""

    code = main(
        ["capture", "mlp", "--out", str(tmp_path), "--set", "batch=8", "--set", "widths=16,32", "--set", "classes=4"]
        + ["--steps", "1", "--warmup", "0", "--timing-steps", "1", "--json"]
    )
    assert code == 0, capsys.readouterr().err
    meta = json.loads((tmp_path / "mlp" / "mlp_meta.json").read_text())
    assert meta["model_config"] == {"model": "mlp", "batch": 8, "widths": [16, 32], "classes": 4, "lr": 0.01}
    assert "--set batch=8 --set widths=16,32 --set classes=4" in meta["command"]


@pytest.mark.parametrize(
    ("args", "problem"),
    [
        (["mlp", "--set", "hidden=8"], "sample mlp has no config field 'hidden'"),
        (["mlp", "--set", "batch"], "--set takes FIELD=VALUE, got 'batch'"),
        (["cnn", "--set", "stage_widths=32,0"], "CNNConfig.stage_widths must be a non-empty list of positive ints"),
        (["gpt2_hf", "--set", "layers=x"], "sample gpt2_hf: layers must be a positive int, got 'x'"),
        (["resnet_tv", "--set", "depth=50"], "sample resnet_tv has no config field 'depth'; its fields: batch"),
        (["ddp", "--set", "batch=8"], "--set changes one single-process sample's config"),
        (["--all-samples", "--set", "batch=8"], "--set changes one single-process sample's config"),
    ],
)
def test_cli_set_refuses_bad_fields_in_one_line(tmp_path, capsys, args, problem):

    assert main(["capture", *args, "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and problem in err[0], err
    assert not any(tmp_path.iterdir())  # refused before anything was written
