"""Fault injection, inputs: what a run reads (items 3, 6-10 of issue 16).

How the faults are made and judged: tests/clirun.py. Every test here failed on main at
4eb7f39 (before the hardening) and passes after; its docstring says how it failed then.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest
from clirun import CNN, DDP, MLP_ET, cli, one_line_error, python, replay_ok
from conftest import ROOT, SAMPLES

from engine.errors import TraceError


# 3 -------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_3_et_paired_with_another_ranks_kineto(tmp_path, cache_dir):
    """Was: IndexError traceback in info, replay --kineto and compare."""
    from engine.trace import load

    et, k1 = DDP / "ddp_rank0_et.json.gz", DDP / "ddp_rank1_kineto.json.gz"
    with pytest.raises(TraceError, match="different ranks") as e:
        load(et, k1)
    assert e.value.path == str(k1) and "ET rank 0" in str(e.value) and "Kineto rank 1" in str(e.value)
    assert load(et, DDP / "ddp_rank0_kineto.json.gz").meta["link"]["link_rate"] > 0.9  # the real pair links
    for args in (
        ("info", et, k1),
        ("replay", et, "--kineto", k1, "--out", tmp_path / "r", "--iters", "1", "--no-profile"),
        ("compare", et, k1, tmp_path / "r"),
    ):
        one_line_error(cli(*args, cache=cache_dir), str(k1), "not the partner", "rank 0", "rank 1", "ET ops")
    assert not (tmp_path / "r" / "replay.json").exists()
    # same rank number, another process: mlp's ET with the cnn capture's Kineto trace
    one_line_error(cli("info", MLP_ET, CNN / "cnn_kineto.json.gz", cache=cache_dir), "another process", "ET ops occur")


# 6 -------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_6_memory_rlimit_bomb_and_estimate(tmp_path, cache_dir):
    """Was: each read reserved a quarter of RAM (MemoryError under ulimit -v 3 GB), a gzip bomb
    was inflated whole (RSS > its size), and the memory budget ignored rlimits."""
    # (a) loads under an address-space limit close to what torch itself maps
    r = cli("info", "--no-cache", MLP_ET, cache=cache_dir, pre="ulimit -v 3000000")
    assert r.returncode == 0, r.stderr[-1500:]
    # (b) gzip bombs (one member of 256 MiB, and 1 GiB in 1,024 members) refused after bounded inflation
    one = tmp_path / "bomb1.json.gz"
    z = gzip.GzipFile(one, "wb", compresslevel=1)
    chunk = b" " * (1 << 20)
    for _ in range(256):
        z.write(chunk)
    z.close()
    multi = tmp_path / "bomb2.json.gz"
    member = gzip.compress(b" " * (1 << 20))
    multi.write_bytes(member * 1024)
    for bomb in (one, multi):
        code = (
            "import resource,sys; from engine.trace import load; from engine.errors import TraceError\n"
            "before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
            f"try:\n    load({str(bomb)!r}, use_cache=False)\nexcept TraceError as e:\n    print('ERR', e)\n"
            "print('MAXRSS', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before)\n"
        )
        p = python(code, cache=cache_dir)
        assert "ERR" in p.stdout and "gzip bomb" in p.stdout, p.stdout + p.stderr[-1500:]
        maxrss_mib = int(p.stdout.split("MAXRSS")[1]) / 1024
        # growth of the peak during the load alone (imports differ between environments)
        assert maxrss_mib < 600, f"{bomb.name}: peak RSS grew {maxrss_mib:.0f} MiB while refusing the bomb"
    one_line_error(cli("info", multi, cache=cache_dir), str(multi), "gzip bomb")
    # (c) the memory budget honours rlimits
    code = (
        "import resource; from engine.replay.memory import available_bytes\n"
        "resource.setrlimit(resource.RLIMIT_AS, (6 << 30, resource.RLIM_INFINITY))\n"
        "print(available_bytes('cpu'))"
    )
    p = python(code, timeout=60)
    assert 0 < int(p.stdout) < 6 << 30, p.stdout + p.stderr
    # (d) the replay's peak-RSS estimate bounds the measured peak (VmHWM reset before the run)
    code = (
        "import engine.trace as T, json; from engine.replay import ReplayConfig, replay\n"
        f"tr = T.load({str(CNN / 'cnn_et.json.gz')!r})\n"
        "open('/proc/self/clear_refs', 'w').write('5')\n"
        f"res = replay(tr, config=ReplayConfig(warmup=1, iters=2, profile=True, out_dir={str(tmp_path / 'm')!r}))\n"
        "hwm = [int(l.split()[1]) * 1024 for l in open('/proc/self/status') if l.startswith('VmHWM')][0]\n"
        "print(json.dumps({'bound': res.memory['rss_bound_bytes'], 'peak': hwm}))"
    )
    p = python(code, cache=cache_dir, timeout=300)
    d = json.loads(p.stdout.strip().splitlines()[-1])
    assert d["bound"] >= d["peak"], d


# 7 -------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_7_dtype_validated_by_meta_run_and_slow_dtype_warned(tmp_path, cache_dir):
    """Was: bf16 on GPT-2 composed "ok" and failed at replay (new_zeros/to kept dtype=float, so a
    matmul met fp32 and bf16); bf16 convolutions on CPU ran for minutes with no warning."""
    from engine.compose import compose, spec_from_dict
    from engine.compose.transforms.dtype import validate

    gpt2 = SAMPLES / "gpt2_hf" / "gpt2_hf_et.json.gz"
    bench = compose(spec_from_dict({"sources": [str(gpt2)], "segments": [{"selection": {}}], "dtype": "bf16"}))
    dt = next(t for t in bench.meta["transforms"] if t["kind"] == "dtype")
    assert dt["meta_check"]["checked"] > 300
    # the original bug, re-injected: one aten::to keeps dtype=float (6), so a later op meets fp32
    # and bf16 operands; the meta run refuses it, naming the op
    node = next(n for n in bench.ranks[0] if n["name"] == "aten::to" and n["inputs"]["values"][1] == 15)
    node["inputs"]["values"][1] = 6
    with pytest.raises(TraceError, match=r"dtype bf16: \d+ op\(s\) fail with the new dtypes .*aten::"):
        validate(bench, 0, "bf16")
    # CLI: a CPU bf16 composition of a CNN warns before anything runs
    spec = tmp_path / "r.json"
    spec.write_text(
        json.dumps(
            {
                "sources": [str(SAMPLES / "resnet_tv" / "resnet_tv_et.json.gz")],
                "segments": [{"selection": {}}],
                "dtype": "bf16",
            }
        )
    )
    r = cli("compose", spec, "--out", tmp_path / "o", cache=cache_dir)
    assert r.returncode == 0, r.stderr[-1500:]
    assert "warning: dtype bf16 on cpu: 40 convolution(s) will run on slow reference kernels" in r.stdout


# 8 -------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_8_transforms_on_real_library_models():
    """Was: batch scaling of GPT-2 (batch 1) scaled the sequence/hidden dim, TP found no linear
    pair (GPT-2's Conv1D is addmm), embedding sharding found no table in an FBGEMM TBE model."""
    from engine.compose import compose, spec_from_dict

    gpt2 = str(SAMPLES / "gpt2_hf" / "gpt2_hf_et.json.gz")
    b2 = compose(spec_from_dict({"sources": [gpt2], "segments": [{"selection": {}}], "batch_scale": 2}))
    t = next(x for x in b2.meta["transforms"] if x["kind"] == "batch_scale")
    assert (t["batch"], t["new_batch"]) == (1, 2)
    emb = next(n for n in b2.ranks[0] if n["name"] == "aten::embedding")
    assert emb["inputs"]["shapes"][1] == [2, 256]  # [batch, seq]: the batch doubled, not seq 256
    assert emb["outputs"]["shapes"][0] == [2, 256, 256]  # hidden 256 untouched
    # the position embedding's gradient, shared with the batch branch at batch 1 (no reduction
    # recorded), is given the position ids' shape: it failed at replay before
    pos = [n for n in b2.ranks[0] if n["name"] == "aten::embedding_backward"]
    assert sorted(n["inputs"]["shapes"][0] for n in pos) == [[1, 256, 256], [2, 256, 256]]
    assert any("embedding backward(s) read a gradient" in w for w in b2.meta["warnings"])
    tp = compose(
        spec_from_dict({"sources": [gpt2], "segments": [{"selection": {}}], "sharding": {"kind": "tp", "degree": 2}})
    )
    pairs = tp.meta["sharding"]["pairs"]
    assert [(p["column"]["weight"], p["row"]["weight"]) for p in pairs] == [([1024, 256], [256, 1024])] * 2
    # an all_reduce forward and one backward per MLP pair and per attention block (2 blocks each)
    comms = [(c["block"], c["phase"]) for c in tp.meta["sharding"]["collectives"]]
    assert sorted(comms) == sorted([(b, p) for b in ("mlp", "attention") for p in ("forward", "backward")] * 2)
    tbe = str(SAMPLES / "dlrm_tbe" / "dlrm_tbe_rank0_et.json.gz")
    for plan in ("table", "row", "greedy"):
        b = compose(
            spec_from_dict(
                {
                    "sources": [tbe],
                    "segments": [{"selection": {}}],
                    "sharding": {"kind": "embedding", "plan": plan, "ranks": 4},
                }
            )
        )
        sh = b.meta["sharding"]
        assert [(x["rows"], x["dim"]) for x in sh["tables"]] == [(12500, 64), (12500, 64)]
        assert sh["tbe"]["tables"][0]["exact_dims"] is True and b.world_size == 4
        assert sum(s["lookups"] for s in sh["shards"]) == sh["original_lookups"]


def test_8_batch_x2_of_the_whole_tbe_step_scales_lookups_and_all_to_all(tmp_path, cache_dir):
    """Was: `batch scale 2 breaks shape at node 369 (aten::bmm)`: the batch was inferred as 1 (a
    split piece of the all_to_all output looked like an input), and nothing scaled the TBE's
    indices/offsets (T x B + 1)/pooled output, so the interaction met a dense half of batch 512
    and an embedding half of 256. Both ranks of the 2-rank capture compose, every all_to_all sends
    what it receives, and a DDP gradient bucket view (`mul(..., out=)`) keeps its parameter shape."""
    import engine.trace as T
    from engine.compose import compose, spec_from_dict

    for r, weights, lookups in ((0, 1600000, 20430), (1, 768000, 21131)):
        src = str(SAMPLES / "dlrm_tbe" / f"dlrm_tbe_rank{r}_et.json.gz")
        b = compose(spec_from_dict({"sources": [src], "segments": [{"selection": {}}], "batch_scale": 2}))
        t = next(x for x in b.meta["transforms"] if x["kind"] == "batch_scale")
        assert (t["batch"], t["new_batch"]) == (256, 512)
        by = {}
        for n in b.ranks[0]:
            by.setdefault(n["name"], []).append(n)
        (lookup,) = by["fbgemm::split_embedding_codegen_lookup_sgd_function_pt2"]
        ins = lookup["inputs"]["shapes"]
        # 2 tables x global batch 512 (2 ranks x 256) bags: x2 -> 2 x 1024 + 1 offsets
        assert (ins[1][0], ins[7], ins[8]) == ([weights], [2 * lookups], [2049])
        assert lookup["outputs"]["shapes"] == [[1024, 128]]
        (check,) = by["fbgemm::bounds_check_indices"]
        assert check["inputs"]["shapes"][1:3] == [[2 * lookups], [2049]]
        (bwd,) = by["fbgemm::split_embedding_backward_codegen_sgd_unweighted_pt2_wrapper"]
        assert bwd["inputs"]["shapes"][0] == [1024, 128]
        a2a = by["c10d::alltoall_base_"]
        assert [n["inputs"]["shapes"][:2] for n in a2a] == [[[1024, 128], [1024, 128]]] * 2
        assert by["aten::bmm"][0]["inputs"]["shapes"] == [[512, 5, 64], [512, 64, 5]]
        outs = [
            n["inputs"]["shapes"][2] == n["outputs"]["shapes"][0]
            for n in by["aten::mul"]
            if len(n["inputs"]["shapes"]) > 2
        ]
        assert outs and all(outs)
    # the same exported bytes under two ranks' names are two ranks (the parse cache keyed on
    # content alone gave the second file the first one's rank)
    raw = gzip.open(SAMPLES / "dlrm_tbe" / "dlrm_tbe_rank0_et.json.gz").read()
    for r in (0, 1):
        (tmp_path / f"x_rank{r}_et.json").write_bytes(raw)
    assert sorted(T.load(tmp_path / "x_rank0_et.json").ops["rank"].unique()) == [0]
    assert sorted(T.load(tmp_path / "x_rank1_et.json").ops["rank"].unique()) == [1]


def test_8_all_to_all_split_sizes_follow_their_scaled_tensors():
    from engine.compose.meta_check import propagate

    def t(tid, shape):
        n = 1
        for d in shape:
            n *= d
        return [tid, tid, 0, n, 4, "cpu"]

    node = {
        "id": 2,
        "name": "c10d::alltoall_base_",
        "ctrl_deps": 1,
        "inputs": {
            "values": [t(10, [6, 4]), t(11, [6, 4]), "<Object>", [4, 2], [1, 5], False, -1],
            "shapes": [[6, 4], [6, 4], [], [[], []], [[], []], [], []],
            "types": [
                "Tensor(float)",
                "Tensor(float)",
                "Object",
                "GenericList[Int,Int]",
                "GenericList[Int,Int]",
                "Bool",
                "Int",
            ],
            "strides": [[4, 1], [4, 1], [], [], [], [], []],
        },
        "outputs": {"values": ["<Object>"], "shapes": [[]], "types": ["Object"], "strides": [[]]},
        "attrs": [],
    }
    propagate([node], [2], scale=2, batch=6, seeds={(10, 10), (11, 11)}, mutate=True)
    assert node["inputs"]["shapes"][:2] == [[12, 4], [12, 4]]
    assert node["inputs"]["values"][3:5] == [[8, 4], [2, 10]]


# 9 -------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_9_spec_and_input_loading(tmp_path, cache_dir):
    """Was: a FIFO spec hung forever, a folder spec raised a traceback, a null per_op row
    crashed compare."""
    from engine.compose import load_spec

    fifo = tmp_path / "spec.fifo"
    os.mkfifo(fifo)
    with pytest.raises(TraceError, match="not a regular file"):
        load_spec(fifo)
    one_line_error(cli("compose", fifo, "--out", tmp_path / "o", cache=cache_dir, timeout=60), str(fifo), "FIFO")
    one_line_error(cli("compose", tmp_path, "--out", tmp_path / "o", cache=cache_dir), str(tmp_path), "is a folder")
    dangling = tmp_path / "gone.json"
    dangling.symlink_to(tmp_path / "nowhere.json")
    one_line_error(cli("compose", dangling, "--out", tmp_path / "o", cache=cache_dir), "not found")
    if os.geteuid() != 0:  # root reads any file: a mode-000 spec is unreadable only for others
        locked = tmp_path / "locked.json"
        locked.write_text("{}")
        locked.chmod(0)
        one_line_error(cli("compose", locked, "--out", tmp_path / "o", cache=cache_dir), "permission denied")
    out = tmp_path / "r"
    replay_ok(out, cache_dir)
    doc = json.loads((out / "replay.json").read_text())
    doc["per_op"][3] = None
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "replay.json").write_text(json.dumps(doc))
    one_line_error(cli("compare", MLP_ET, bad, cache=cache_dir), str(bad / "replay.json"), "per_op[3] is null")
    from engine.compare.inputs import load_replay_json

    with pytest.raises(TraceError, match=r"per_op\[3\] is null"):
        load_replay_json(bad)


# 10 ------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_10_compare_refuses_mismatched_stale_and_leftover(tmp_path, cache_dir, shared_traces):
    """Was: compare accepted another trace's replay (exit 0, huge error), a killed run's folder,
    a Kineto-only leftover, and a GPU original vs a CPU replay without a word."""
    from engine.compare import compare
    from engine.compare.inputs import load_replay_json
    from engine.trace import load

    out = tmp_path / "r"
    replay_ok(out, cache_dir)
    doc = json.loads((out / "replay.json").read_text())
    assert doc["source"]["traces"][0]["sha256"] == __import__("hashlib").sha256(MLP_ET.read_bytes()).hexdigest()
    # a replay of another trace
    one_line_error(cli("compare", CNN, out, cache=cache_dir), "replay of another trace")
    with pytest.raises(TraceError, match="replay of another trace"):
        compare(load(CNN / "cnn_et.json.gz"), load_replay_json(out))
    assert cli("compare", SAMPLES / "mlp", out, cache=cache_dir).returncode == 0
    # a Kineto-only leftover
    left = tmp_path / "left"
    left.mkdir()
    r = cli("replay", MLP_ET, "--out", left, "--iters", "1", "--warmup", "0", cache=cache_dir)
    assert r.returncode == 0
    (left / "replay.json").unlink()
    one_line_error(cli("compare", MLP_ET, left, cache=cache_dir), str(left), "no replay.json")
    # a run killed mid-way leaves its RUNNING marker: the older replay.json there is stale
    killed = tmp_path / "killed"
    shutil.copytree(out, killed)  # a good earlier result in the folder the killed run reuses
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MYSTIQUE_CACHE_DIR": str(cache_dir)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "engine.cli.main", "replay", str(MLP_ET), "--out", str(killed), "--iters", "100000"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.time() + 90
    while not (killed / ".mystique-running.json").exists() and time.time() < deadline:
        time.sleep(0.1)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    one_line_error(cli("compare", MLP_ET, killed, cache=cache_dir), "stale replay folder", "interrupted")
    # a GPU original against a CPU replay: a warning
    lin = shared_traces / "param_linear" / "linear_et.json.gz"
    gout = tmp_path / "lin"
    replay_ok(gout, cache_dir, trace=lin)
    r = cli("compare", lin, shared_traces / "param_linear" / "linear_kineto.json.gz", gout, cache=cache_dir)
    assert r.returncode == 0, r.stderr[-1500:]
    assert "device mismatch: the original ran on cuda, the replay on cpu" in r.stdout
