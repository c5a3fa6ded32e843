"""Issue 26, items 3, 4 and the distributed part of 8: replay memory, worlds that do not fit,
ranks that die with their launcher, results kept until the new one is whole, duplicate rank
files, send/recv pairs, stalled-rank blame, torchrun's timeout, a full --out, the all_to_all
split message.

Each test drives the CLI in a fresh process (exit 2, one line naming the file and the problem,
no traceback, the previous result intact, no process of ours left) and the API where there is
one. Memory faults are real: a small memory cgroup where this machine lets us make one (skipped
with the reason otherwise), a tmpfs for a full disk.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from clirun import DDP, cli, one_line_error, python
from conftest import RANK_BASELINES, ROOT, SAMPLES

from engine.errors import TraceError

pytestmark = pytest.mark.usefixtures("rank_baselines")  # one baseline measurement per trace (conftest)
FAST = ["--iters", "1", "--warmup", "0", "--no-profile"]
TBE0 = SAMPLES / "dlrm_tbe" / "dlrm_tbe_rank0_et.json.gz"


def _has_fbgemm() -> bool:
    try:
        import fbgemm_gpu  # noqa: F401
    except ImportError:
        return False
    return True


def ours(marker: Path) -> list[psutil.Process]:
    """Live processes (not zombies) whose command line names `marker` (an --out folder) and
    that run our CLI or a rank worker: what must not outlive a test."""
    found = []
    for p in psutil.process_iter(["cmdline", "status"]):
        try:
            cmd = " ".join(p.info["cmdline"] or [])
        except psutil.Error:
            continue
        mine = str(marker) in cmd and ("engine.replay.dist_worker" in cmd or "engine.cli.main" in cmd)
        if mine and p.info["status"] != psutil.STATUS_ZOMBIE:
            found.append(p)
    return found


def none_left(marker: Path, wait_s: float = 10.0) -> None:
    end = time.time() + wait_s
    while ours(marker) and time.time() < end:
        time.sleep(0.2)
    left = ours(marker)
    for p in left:  # never leave them running for the next test, but fail
        with contextlib.suppress(psutil.Error):
            p.kill()
    assert not left, [(p.pid, p.info["cmdline"]) for p in left]


def snapshot(out: Path) -> dict[str, bytes]:
    """The result files of a folder (merged and per rank), by relative path."""
    files = [out / "replay.json", *sorted(out.glob("rank*/replay.json")), *sorted(out.glob("rank*/*kineto*"))]
    return {str(f.relative_to(out)): f.read_bytes() for f in files if f.is_file()}


@pytest.fixture(scope="module")
def good_dist(tmp_path_factory, _rank_baseline_store) -> Path:
    """A finished 2-rank ddp replay: the previous result every rerun below must keep."""
    out = tmp_path_factory.mktemp("good") / "ddp"
    cache = tmp_path_factory.mktemp("cache")
    r = cli("replay", DDP, *FAST, "--out", out, cache=cache, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert len(snapshot(out)) == 3
    for f in cache.glob(RANK_BASELINES):  # the reruns below need not measure ddp's rank baseline again
        shutil.copyfile(f, _rank_baseline_store / f.name)
    return out


def previous(good: Path, out: Path) -> dict[str, bytes]:
    shutil.copytree(good, out, ignore=shutil.ignore_patterns("logs"))  # logs are not results
    return snapshot(out)


def env_for(cache: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "MYSTIQUE_CACHE_DIR": str(cache)}


@contextlib.contextmanager
def memory_cgroup(limit_bytes: int):
    """A child memory cgroup of this process's own with `limit_bytes`; yields the shell prefix
    that moves a command into it. Skips where the machine does not let us make one."""
    rel = ""
    v1 = False
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, ctrl, path = line.split(":", 2)
        if "memory" in ctrl.split(","):
            rel, v1 = path, True
            break
        if ctrl == "" and not rel:
            rel = path
    base = Path("/sys/fs/cgroup/memory" if v1 else "/sys/fs/cgroup") / rel.lstrip("/")
    d = base / f"mystique-test-{os.getpid()}-{time.monotonic_ns()}"
    try:
        d.mkdir()
        (d / ("memory.limit_in_bytes" if v1 else "memory.max")).write_text(str(limit_bytes))
        if v1:
            (d / "memory.memsw.limit_in_bytes").exists() and (d / "memory.memsw.limit_in_bytes").write_text(
                str(limit_bytes)
            )
    except OSError as exc:
        with contextlib.suppress(OSError):
            d.rmdir()
        pytest.skip(f"cannot make a memory cgroup here ({exc.strerror}); the world-size refusal test covers the check")
    try:
        yield f"echo $$ > {d / 'cgroup.procs'}"
    finally:
        for _ in range(50):
            try:
                d.rmdir()
                break
            except OSError:
                time.sleep(0.2)


# 3 -------------------------------------------------------------------------------------------
def _big_tbe(tmp_path: Path, numel: int) -> Path:
    """The TBE sample's rank 0 with its embedding weights grown to `numel` floats (a TorchRec
    DLRM's tables are GBs; the sample's are 6 MB)."""
    text = gzip.decompress(TBE0.read_bytes()).decode()
    assert text.count("1600000") >= 4  # the weights' numel, in every op that records them
    tmp_path.mkdir(exist_ok=True)
    out = tmp_path / "big_tbe_rank0_et.json"
    out.write_text(text.replace("1600000", str(numel)))
    return out


@pytest.mark.alone
@pytest.mark.skipif(not _has_fbgemm(), reason="fbgemm_gpu not installed (make setup's dlrm extra)")
def test_3_tbe_tables_are_counted_and_bound_the_measured_peak(tmp_path, cache_dir):
    """Was: FBGEMM TBE weights, optimizer state and batch were not in the estimate (a TorchRec
    DLRM peaked at 7.7x its rss_bound_bytes)."""
    et = _big_tbe(tmp_path, 64_000_000)  # 256 MB of fp32 weights
    # the peak is the replay's own (VmHWM reset after loading, as benchmarks/memory.py measures):
    # the bound starts from the RSS at the replay's start, so a transient of the load is not its
    code = (
        "import json, sys\n"
        "import engine.trace as T\n"
        "from engine.replay import ReplayConfig, replay\n"
        f"tr = T.load({str(et)!r})\n"
        "open('/proc/self/clear_refs', 'w').write('5')\n"
        "res = replay(tr, config=ReplayConfig(warmup=0, iters=1, profile=False))\n"
        "hwm = [int(x.split()[1]) * 1024 for x in open('/proc/self/status') if x.startswith('VmHWM')][0]\n"
        "print(json.dumps({**res.memory, 'peak': hwm, 'replayed': res.coverage['replayed']}))\n"
    )
    p = python(code, cache=cache_dir, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    m = json.loads(p.stdout.strip().splitlines()[-1])
    assert m["resident_bytes"] >= 256_000_000  # the rebuilt tables are in the plan's peak
    assert m["rss_bound_bytes"] >= m["peak"], (m["rss_bound_bytes"] >> 20, m["peak"] >> 20)
    # CLI in a cgroup too small for 1 GB of tables: refused before allocating, in one line
    huge = _big_tbe(tmp_path / "huge", 256_000_000)
    out = tmp_path / "o"
    out.mkdir()
    (out / "replay.json").write_text('{"previous": true}')
    with memory_cgroup(640 << 20) as pre:
        r = cli("replay", huge, "--out", out, *FAST, cache=cache_dir, pre=pre, timeout=300)
    one_line_error(r, str(huge), "replay needs about", "GiB")
    assert (out / "replay.json").read_text() == '{"previous": true}'
    none_left(out)


@pytest.mark.slow
def test_3_world_that_does_not_fit_is_refused_before_launch(tmp_path, cache_dir, good_dist):
    """Was: world sizes to 1024 were accepted and 64 mirrored ranks were OOM-killed; the Replay
    page's worker (engine.workspace.worker.run_replay) took the same path."""
    out = tmp_path / "o"
    before = previous(good_dist, out)
    et = DDP / "ddp_rank0_et.json.gz"
    r = cli("replay", et, "--mirror-rank", "0", "--world-size", "1024", *FAST, "--out", out, cache=cache_dir)
    line = one_line_error(r, str(et), "refused: 1024 ranks need about", "cannot run in waves", "use at most")
    fit = int(line.split("use at most ")[1].split()[0])
    assert 0 < fit < 1024  # a real count of ranks that fit, below the asked 1024
    assert snapshot(out) == before and not (out / "logs" / "rank1023.stderr.txt").exists()
    none_left(out)
    # API: replay_distributed, and the Replay page's worker job
    from engine.replay import ReplayConfig
    from engine.replay.distributed import DistConfig, replay_distributed
    from engine.workspace.worker import run_replay

    cfg = ReplayConfig(warmup=0, iters=1, profile=False)
    with pytest.raises(TraceError, match="refused: 1024 ranks"):
        replay_distributed([et], config=cfg, dist=DistConfig(world_size=1024, mirror_rank=0), out_dir=out)
    job = {
        "params": {
            "paths": [str(et)],
            "config": {"warmup": 0, "iters": 1, "profile": False},
            "distributed": {"world_size": 1024, "mirror_rank": 0},
        }
    }
    with pytest.raises(TraceError, match="refused: 1024 ranks"):
        run_replay(job, out, lambda f, m: None)
    assert snapshot(out) == before
    none_left(out)


@pytest.mark.slow
def test_3_world_checked_against_a_small_cgroup(tmp_path, cache_dir, good_dist):
    """Was: 4 ranks started in a 1.5 GB cgroup and were OOM-killed part-way."""
    out = tmp_path / "o"
    before = previous(good_dist, out)
    et = DDP / "ddp_rank0_et.json.gz"
    with memory_cgroup(1536 << 20) as pre:
        r = cli("replay", et, "--mirror-rank", "0", "--world-size", "4", *FAST, "--out", out, cache=cache_dir, pre=pre)
    one_line_error(r, str(et), "refused: 4 ranks", "cgroup's memory limit")
    assert snapshot(out) == before and not (out / ".mystique-running.json").exists()
    none_left(out)


# 4 -------------------------------------------------------------------------------------------
def _start_long_run(out: Path, cache: Path, *extra: str) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "engine.cli.main", "replay", str(DDP), "--iters", "100000", "--warmup", "0"]
    cmd += ["--no-profile", "--out", str(out), *extra]
    return subprocess.Popen(
        cmd, cwd=ROOT, env=env_for(cache), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )


def _wait_ranks_running(out: Path, proc: subprocess.Popen, world: int = 2) -> list[psutil.Process]:
    """Until every rank ticked its progress counter (they are replaying); returns the ranks."""
    board = out / "logs" / "progress.bin"
    end = time.time() + 240
    while time.time() < end and proc.poll() is None:
        try:
            raw = board.read_bytes()
        except OSError:
            raw = b""
        if len(raw) == 8 * world and all(int.from_bytes(raw[8 * r : 8 * r + 8], "little") > 2 for r in range(world)):
            break
        time.sleep(0.3)
    assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
    ranks = [p for p in ours(out) if "dist_worker" in " ".join(p.info["cmdline"])]
    assert len(ranks) == world, ranks
    return sorted(ranks, key=lambda p: int(p.environ().get("RANK", -1)))


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
@pytest.mark.slow
def test_4_ranks_die_with_their_launcher(tmp_path, cache_dir, good_dist, sig):
    """Was: SIGTERM or SIGKILL of the launcher left both ranks running under pid 1 and a stale
    RUNNING marker; the previous result must survive the interrupted rerun."""
    out = tmp_path / "o"
    before = previous(good_dist, out)
    proc = _start_long_run(out, cache_dir)
    try:
        ranks = _wait_ranks_running(out, proc)
    except BaseException:
        proc.kill()
        raise
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    end = time.time() + 15
    while any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in ranks) and time.time() < end:
        time.sleep(0.2)
    none_left(out, wait_s=1)
    assert snapshot(out) == before
    assert not list(out.glob("rank*/replay.new.json"))
    if sig == signal.SIGTERM:
        assert proc.returncode == 143 and "Traceback" not in err, err
        assert err.strip().splitlines()[-1] == "mystique replay: terminated"
        assert not (out / ".mystique-running.json").exists()
    else:  # nothing runs after SIGKILL: its marker stays, and says the run was interrupted
        from engine.outdir import stale_run

        assert "interrupted" in (stale_run(out) or "")


def _mismatched(tmp_path: Path) -> Path:
    """ddp rank files where rank 1 lost its last all_reduce: with --no-check the ranks hang in
    it until the collective timeout (a run that fails after launch)."""
    d = tmp_path / "bad"
    d.mkdir()
    shutil.copy(DDP / "ddp_rank0_et.json.gz", d / "ddp_rank0_et.json.gz")
    doc = json.loads(gzip.decompress((DDP / "ddp_rank1_et.json.gz").read_bytes()))
    last = max(n["id"] for n in doc["nodes"] if n["name"] == "c10d::allreduce_")
    doc["nodes"] = [n for n in doc["nodes"] if n["id"] != last and n.get("ctrl_deps") != last]
    (d / "ddp_rank1_et.json.gz").write_bytes(gzip.compress(json.dumps(doc).encode()))
    return d


@pytest.mark.slow
def test_4_failed_rerun_keeps_the_previous_result(tmp_path, cache_dir, good_dist):
    """Was: a rerun deleted replay.json and rank*/replay.json before launch, then failed."""
    out = tmp_path / "o"
    before = previous(good_dist, out)
    bad = _mismatched(tmp_path)
    r = cli("replay", bad, *FAST, "--no-check", "--timeout", "3", "--out", out, cache=cache_dir, timeout=300)
    assert r.returncode == 1 and "rank " in r.stderr and "failed" in r.stderr, r.stderr[-1500:]
    assert "Traceback" not in r.stderr
    assert snapshot(out) == before
    assert not list(out.glob("rank*/replay.new.json")) and not list(out.glob("rank*/*.new.json.gz"))
    none_left(out)


@pytest.mark.slow
def test_4_two_files_declaring_the_same_rank_exit_2(tmp_path, cache_dir, good_dist):
    """Was: they ran as one rank with doubled ops."""
    out = tmp_path / "o"
    before = previous(good_dist, out)
    d = tmp_path / "dup"
    d.mkdir()
    shutil.copy(DDP / "ddp_rank0_et.json.gz", d / "ddp_rank0_et.json.gz")
    shutil.copy(DDP / "ddp_rank1_et.json.gz", d / "copy_rank0_et.json.gz")
    files = [d / "copy_rank0_et.json.gz", d / "ddp_rank0_et.json.gz"]
    r = cli("replay", *files, *FAST, "--out", out, cache=cache_dir)
    line = one_line_error(r, "declares rank 0, as does")
    assert str(files[0]) in line and str(files[1]) in line
    assert snapshot(out) == before
    none_left(out)
    from engine.replay import ReplayConfig
    from engine.replay.distributed import DistConfig, replay_distributed

    with pytest.raises(TraceError, match="declares rank 0"):
        replay_distributed(files, config=ReplayConfig(warmup=0, iters=1, profile=False), dist=DistConfig(), out_dir=out)


def _p2p(tmp_path: Path, recv_numel: int | None = None) -> Path:
    """ddp with its first all_reduce turned into rank 0 sending the bucket to rank 1 (rank 1
    receiving it: `recv_numel` elements, default the same)."""
    d = tmp_path / f"p2p{recv_numel or ''}"
    d.mkdir()
    for r in (0, 1):
        doc = json.loads(gzip.decompress((DDP / f"ddp_rank{r}_et.json.gz").read_bytes()))
        node = min((n for n in doc["nodes"] if n["name"] == "c10d::allreduce_"), key=lambda n: n["id"])
        op = "send" if r == 0 else "recv_"
        peer = "dst" if r == 0 else "src"
        tensors = node["inputs"]["values"][0]
        shape = node["inputs"]["shapes"][0]
        if r == 1 and recv_numel is not None:
            tensors, shape = [[*tensors[0][:3], recv_numel, *tensors[0][4:]]], [[recv_numel]]
        node["name"] = f"c10d::{op}"
        node["inputs"] = {
            "values": [tensors, "<Object>", 1 - r, 0],
            "shapes": [shape, [], [], []],
            "types": [node["inputs"]["types"][0], "Object", "Int", "Int"],
            "strides": [[[1]], [], [], []],
        }
        node["outputs"] = {"values": ["<Object>"], "shapes": [[]], "types": ["Object"], "strides": [[]]}
        schema = (
            f"c10d::{op}(Tensor[] tensors, __torch__.torch.classes.c10d.ProcessGroup process_group, int {peer}, "
            "int tag) -> __torch__.torch.classes.c10d.Work"
        )
        for a in node["attrs"]:
            if a["name"] == "op_schema":
                a["value"] = schema
        doc["nodes"] = [n for n in doc["nodes"] if n.get("ctrl_deps") != node["id"]]  # its gloo child
        (d / f"p2p_rank{r}_et.json.gz").write_bytes(gzip.compress(json.dumps(doc).encode()))
    return d


@pytest.mark.slow
def test_4_matching_send_recv_pair_passes_the_pre_check(tmp_path, cache_dir):
    """Was: a send on rank 0 and its recv on rank 1 were rejected as a collective mismatch."""
    import engine.trace as T
    from engine.replay.seqcheck import check_sequences, sequences

    d = _p2p(tmp_path)
    files = sorted(d.glob("*_et.json.gz"))
    seqs = sequences(T.load(*map(str, files)), [0, 1])
    assert [c.kind.value for c in seqs[0]].count("send") == 1 and [c.kind.value for c in seqs[1]].count("recv") == 1
    check_sequences(seqs)  # no TraceError
    out = tmp_path / "o"
    r = cli("replay", d, *FAST, "--json", "--out", out, cache=cache_dir, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    doc = json.loads(r.stdout)
    assert doc["collectives"]["send"]["count"] == 1 and doc["collectives"]["recv"]["count"] == 1
    assert doc["coverage"]["comm_replayed"] == doc["coverage"]["comm_selected"]
    none_left(out)
    # a real mismatch (rank 1 receives fewer elements than rank 0 sends) still exits 2 in one line
    bad = _p2p(tmp_path, recv_numel=1000)
    r = cli("replay", bad, *FAST, "--out", tmp_path / "o2", cache=cache_dir)
    one_line_error(r, "send/recv mismatch", "rank 0's send #1 to rank 1", "1000")
    assert not (tmp_path / "o2" / "logs").exists()


@pytest.mark.slow
def test_4_a_stopped_rank_is_blamed_not_its_waiting_peer(tmp_path, cache_dir, good_dist):
    """Was: the run blamed the rank that timed out waiting for the SIGSTOPped one."""
    out = tmp_path / "o"
    before = previous(good_dist, out)
    proc = _start_long_run(out, cache_dir, "--timeout", "4")
    try:
        ranks = _wait_ranks_running(out, proc)
    except BaseException:
        proc.kill()
        raise
    ranks[1].suspend()  # SIGSTOP
    try:
        _, err = proc.communicate(timeout=120)
    finally:
        with contextlib.suppress(psutil.Error):
            ranks[1].resume()
    assert proc.returncode == 1 and "Traceback" not in err, err
    line = [ln for ln in err.splitlines() if ln.startswith("mystique replay: error:")]
    assert len(line) == 1 and "rank 1 failed: stopped" in line[0] and "rank 0 timed out waiting for it" in line[0], err
    assert snapshot(out) == before
    none_left(out)


# 8 -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("value", ["0", "-5", "nan"])
def test_8_torchrun_worker_refuses_a_bad_timeout(tmp_path, cache_dir, value):
    """Was: torchrun's path turned --timeout 0 into 60 s silently; -5 gave "-5000ms"."""
    from engine.distributed.launch import free_port, rank_env

    out = tmp_path / "o"
    env = {**rank_env(0, 1, free_port()), "MYSTIQUE_CACHE_DIR": str(cache_dir)}
    cmd = [sys.executable, "-m", "engine.replay.dist_worker", str(DDP), "--out", str(out), f"--timeout={value}"]
    r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr[-1500:]
    assert len(lines) == 1 and "--timeout must be between 0 and 86400 s" in lines[0] and value in lines[0]
    assert not out.exists()


@pytest.mark.slow
def test_8_full_out_says_no_space_and_leaves_no_tmp(tmp_path, cache_dir):
    """Was: a full --out left replay_kineto.json.tmp and said "No such file"."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=96k", "tmpfs", str(mnt)], capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here (needs CAP_SYS_ADMIN)")
    try:
        out = mnt / "o"
        mlp = SAMPLES / "mlp" / "mlp_et.json.gz"
        r = cli("replay", mlp, "--out", out, "--iters", "1", "--warmup", "0", cache=cache_dir)
        assert r.returncode == 0, r.stderr[-1500:]
        before = {f.name: f.read_bytes() for f in out.iterdir()}
        assert set(before) == {"replay.json", "replay_kineto.json.gz"}
        free = shutil.disk_usage(mnt).free
        (mnt / "filler").write_bytes(b"\0" * max(0, free - 20 * 1024))  # the disk fills up
        r = cli("replay", mlp, "--out", out, "--iters", "1", "--warmup", "0", cache=cache_dir)
        one_line_error(r, str(out / "replay_kineto.json"), "no space left on device")
        assert {f.name: f.read_bytes() for f in out.iterdir()} == before  # no .tmp, nothing lost
    finally:
        subprocess.run(["umount", str(mnt)], capture_output=True)


def _a2a_splits(tmp_path: Path) -> Path:
    """dlrm_a2a where rank 0's first all_to_all sends 212 of its 512 rows to rank 1, while rank 1
    expects an even 256 from rank 0."""
    d = tmp_path / "a2a"
    d.mkdir()
    for r, (out_s, in_s) in enumerate([([256, 256], [300, 212]), ([256, 256], [256, 256])]):
        doc = json.loads(gzip.decompress((SAMPLES / "dlrm_a2a" / f"dlrm_a2a_rank{r}_et.json.gz").read_bytes()))
        node = min((n for n in doc["nodes"] if n["name"] == "c10d::alltoall_base_"), key=lambda n: n["id"])
        node["inputs"]["values"][3], node["inputs"]["values"][4] = out_s, in_s
        node["inputs"]["types"][3] = node["inputs"]["types"][4] = "GenericList[Int,Int]"
        (d / f"dlrm_a2a_rank{r}_et.json.gz").write_bytes(gzip.compress(json.dumps(doc).encode()))
    return d


@pytest.mark.slow
def test_8_all_to_all_split_mismatch_names_both_sides(tmp_path, cache_dir):
    """Was: the message showed the same op description on both sides."""
    import engine.trace as T
    from engine.replay.seqcheck import check_sequences, sequences

    d = _a2a_splits(tmp_path)
    r = cli("replay", d, *FAST, "--out", tmp_path / "o", cache=cache_dir)
    line = one_line_error(r, "all_to_all #1", "rank 0 (op 111) sends 212 rows to rank 1", "rank 1 (op 111) expects 256")
    assert not (tmp_path / "o" / "logs").exists()
    with pytest.raises(TraceError, match=r"sends 212 rows to rank 1, but rank 1 .* expects 256 from rank 0"):
        check_sequences(sequences(T.load(*map(str, sorted(d.glob("*_et.json.gz")))), [0, 1]))
    assert line.count("c10d::alltoall_base_") == 0  # not the same op description twice
