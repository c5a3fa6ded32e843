"""Per-rank store ingestion fanned out with Dask (engine/fanout.py, issue 22).

The same four-rank fleet (one real Kineto trace copied per rank with perturbed durations) is
stored serially, on a LocalCluster and through a `dask scheduler` with two `dask worker`
processes started here on 127.0.0.1: every table of the store is identical, column by column,
and equal to the loader's. No process is left behind (psutil). A bad scheduler is one line, exit 2.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time

import pandas as pd
import psutil
import pytest
from clirun import cli, one_line_error
from conftest import ROOT, SAMPLES

from engine.testing.fleet import make_fleet
from engine.trace import load
from engine.trace.store.ingest import build
from engine.trace.store.sql import connect

pytest.importorskip("distributed")
N_RANKS = 4


@pytest.fixture
def fleet(tmp_path):
    folder = tmp_path / "fleet"
    make_fleet(SAMPLES / "ddp" / "ddp_rank0_kineto.json.gz", folder, N_RANKS)
    return folder


def _tables(folder, scheduler: str, progress=None) -> dict[str, pd.DataFrame]:
    store = build(folder, use_cache=False, scheduler=scheduler, progress=progress)
    con = connect(store)
    try:
        got = {
            "events": con.execute("SELECT * FROM events ORDER BY ev").df(),
            "flows": con.execute("SELECT * FROM flows").df(),
            "sources": con.execute("SELECT * FROM sources ORDER BY src").df(),
        }
    finally:
        con.close()
    manifest = json.loads((store / "manifest.json").read_text())
    got["manifest"] = pd.DataFrame(manifest["sources"]).astype(str)
    return got


def _assert_same(a: dict[str, pd.DataFrame], b: dict[str, pd.DataFrame], what: str) -> None:
    for t in a:
        pd.testing.assert_frame_equal(a[t], b[t], check_exact=True, obj=f"{what}: {t}")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_serial_local_and_cluster_stores_are_identical(fleet, cache_dir):
    serial = _tables(fleet, "serial")
    assert serial["events"]["rank"].drop_duplicates().tolist() == list(range(N_RANKS))
    # the ranks really differ (perturbed durations), and the store equals the loader
    durs = serial["events"].groupby("rank")["dur_us"].sum()
    assert durs.nunique() == N_RANKS
    tr = load(fleet, use_cache=False)
    assert serial["events"]["ev"].tolist() == tr.events["ev"].tolist()
    assert serial["events"]["dur_us"].tolist() == tr.events["dur_us"].tolist()
    assert serial["events"]["name"].astype(str).tolist() == tr.events["name"].astype(str).tolist()

    seen: list[float] = []
    local = _tables(fleet, "local", progress=lambda f, _msg: seen.append(f))
    _assert_same(serial, local, "LocalCluster")
    assert seen[-1] == 1.0 and len(seen) == N_RANKS + 1

    port = _free_port()
    addr = f"tcp://127.0.0.1:{port}"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    dask = [sys.executable, "-m", "dask"]
    procs = [
        subprocess.Popen([*dask, "scheduler", "--host", "127.0.0.1", "--port", str(port), "--no-dashboard"],
                         env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    ]  # fmt: skip
    try:
        for _ in range(2):
            procs.append(
                subprocess.Popen([*dask, "worker", addr, "--nthreads", "1", "--nworkers", "1",
                                  "--host", "127.0.0.1", "--no-dashboard"],
                                 env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            )  # fmt: skip
        from distributed import Client

        with Client(addr, timeout=60) as c:
            c.wait_for_workers(2, timeout=120)
        cluster = _tables(fleet, addr)
        _assert_same(serial, cluster, "dask scheduler + 2 workers")
    finally:
        family = [psutil.Process(p.pid) for p in procs if psutil.pid_exists(p.pid)]
        for p in list(family):
            try:
                family.extend(p.children(recursive=True))
            except psutil.NoSuchProcess:
                pass
        for p in procs:
            p.terminate()
        _, alive = psutil.wait_procs(family, timeout=30)
        for p in alive:
            p.kill()
        for p in procs:
            p.wait(timeout=30)
    time.sleep(0.5)
    assert not [p for p in family if p.is_running() and p.status() != psutil.STATUS_ZOMBIE], "dask processes left"
    # multiprocessing's resource tracker lives as long as this interpreter; any other child is a leak
    from clirun import helper_pids

    left = [c.cmdline() for c in psutil.Process().children(recursive=True) if c.pid not in helper_pids()]
    assert not [c for c in left if not any("resource_tracker" in a for a in c)], left


@pytest.mark.parametrize(
    "scheduler, needle",
    [("tcp://127.0.0.1:1", "cannot reach the Dask scheduler at tcp://127.0.0.1:1"), ("nowhere", "bad --scheduler")],
)
@pytest.mark.slow
def test_bad_scheduler_is_one_line_exit_2(fleet, tmp_path, scheduler, needle):
    """A port nobody listens on is refused at once (Dask's Client retried the refused connection
    until its 10 s timeout: the process took 11 s; now its start-up alone), with the reason."""
    from engine.fanout import CONNECT_TIMEOUT_S

    t0 = time.monotonic()
    r = cli("sql", fleet, "SELECT count(*) FROM events", "--scheduler", scheduler, cache=tmp_path / "c", timeout=120)
    wall = time.monotonic() - t0
    line = one_line_error(r, needle)
    if scheduler.startswith("tcp://"):
        assert line.endswith("connection refused"), line
        assert wall < CONNECT_TIMEOUT_S * 0.8, wall
