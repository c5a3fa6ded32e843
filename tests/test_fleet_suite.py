"""Fleet signatures and suites (engine/fleet, issue 35), checked against independent truths.

- The DataLoader pair (kineto_resnet50_dataloader): moving data loading to worker processes must
  lower the host-overhead share of the same job, and the GPU-busy share must equal the union of
  kernel/memcpy/memset time inside the ProfilerStep spans counted from the raw JSON here.
- A suite of 5 over every shared trace and sample must match the fleet's class mix within
  L1 <= 0.10 and beat both the median random 5-job pick and the 5 longest jobs.
- A planted fleet (known class mixes) must be recovered by clustering its signatures.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from clirun import cli
from conftest import SAMPLES
from rawjson import raw_events

from engine.fleet.jobs import Job, discover, signature_of, signatures
from engine.fleet.signature import SHARE_KEYS, WORK_KEYS
from engine.fleet.suite import baselines, pick
from engine.testing.fleet import PLANTED_MIXES, planted_fleet

_GPU = ("Kernel", "Memcpy", "Memset", "kernel", "gpu_memcpy", "gpu_memset")


def _busy_share(path) -> float:
    """GPU-busy time inside the step spans / the steps' total, from the raw JSON."""
    evs = raw_events(path)
    steps = sorted(
        (e["ts"], e["ts"] + e["dur"])
        for e in evs
        if e.get("ph") == "X" and e.get("name", "").startswith("ProfilerStep#")
    )
    gpu = sorted((e["ts"], e["ts"] + e["dur"]) for e in evs if e.get("ph") == "X" and e.get("cat") in _GPU)
    busy = total = 0.0
    for a, b in steps:
        total += b - a
        cur_s = cur_e = None
        for s, e in gpu:
            s, e = max(s, a), min(e, b)
            if e <= s:
                continue
            if cur_e is None or s > cur_e:
                if cur_e is not None:
                    busy += cur_e - cur_s
                cur_s, cur_e = s, e
            else:
                cur_e = max(cur_e, e)
        if cur_e is not None:
            busy += cur_e - cur_s
    return busy / total


@pytest.mark.slow
def test_dataloader_pair_signatures(shared_traces, cache_dir):
    d = shared_traces / "kineto_resnet50_dataloader"
    nw0 = signature_of(Job(name="nw0", files=(str(d / "nw0_worker0.pt.trace.json.gz"),)))
    nw4 = signature_of(Job(name="nw4", files=(str(d / "nw4_worker0.pt.trace.json.gz"),)))
    for sig, f in ((nw0, "nw0_worker0.pt.trace.json.gz"), (nw4, "nw4_worker0.pt.trace.json.gz")):
        assert abs(sum(sig[k] for k in SHARE_KEYS) - 1.0) < 1e-9
        busy = sum(sig[k] for k in WORK_KEYS)
        assert busy == pytest.approx(_busy_share(d / f), abs=1e-6)
        assert sig["step_source"] == "ProfilerStep" and sig["steps"] == 6
        assert sig["device"].startswith("NVIDIA V100")
    # the job whose data loading left the main thread spends less of its step on the host alone
    assert nw4["host_overhead"] < nw0["host_overhead"] - 0.05


@pytest.fixture(scope="module")
def real_fleet(shared_traces, tmp_path_factory):
    import os

    os.environ.setdefault("MYSTIQUE_CACHE_DIR", str(tmp_path_factory.mktemp("fleet-cache")))
    rows = signatures(discover([shared_traces, SAMPLES]), scheduler="serial")
    return pd.DataFrame([r for r in rows if "skipped" not in r]), [r for r in rows if "skipped" in r]


@pytest.mark.slow
def test_suite_of_five_matches_the_real_fleet(real_fleet):
    sigs, skipped = real_fleet
    assert len(sigs) >= 25
    assert all("not a Kineto trace" in r["skipped"] for r in skipped), skipped  # ETs alone, nothing else
    shares = sigs[list(SHARE_KEYS)].to_numpy()
    np.testing.assert_allclose(shares.sum(axis=1), 1.0, atol=1e-9)
    suite = pick(sigs, 5)
    base = baselines(sigs, 5)
    assert suite.l1 <= 0.10
    assert suite.l1 < base["random_median_l1"]
    assert suite.l1 < base["longest_l1"]
    assert sum(suite.weights) == pytest.approx(1.0) and min(suite.weights) >= 0


def test_planted_fleet_groups_are_recovered(tmp_path, cache_dir):
    from sklearn.cluster import KMeans
    from sklearn.metrics import adjusted_rand_score

    jobs = planted_fleet(tmp_path / "jobs", 40)
    rows = signatures(discover([tmp_path / "jobs"]), scheduler="serial")
    truth = {p.stem: g for p, g in jobs}
    labels = [truth[r["job"].split("/")[-1]] for r in rows]
    x = pd.DataFrame(rows)[list(SHARE_KEYS)].to_numpy()
    found = KMeans(n_clusters=len(PLANTED_MIXES), n_init=10, random_state=0).fit_predict(x)
    assert adjusted_rand_score(labels, found) >= 0.9
    # the planted host-bound group's host share is read back (60 % planted, +- noise)
    host = [r["host_overhead"] for r, g in zip(rows, labels) if g == "host_bound_infer"]
    assert 0.5 < float(np.mean(host)) < 0.7


@pytest.mark.slow
def test_fleet_cli_ingest_suite_and_refusals(tmp_path, cache_dir):
    jobs = planted_fleet(tmp_path / "jobs", 10)
    out = tmp_path / "fleet"
    r = cli("fleet", "ingest", str(tmp_path / "jobs"), "--out", str(out), "--scheduler", "serial", cache=cache_dir)
    assert r.returncode == 0, r.stderr
    assert len(pd.read_parquet(out / "signatures.parquet")) == len(jobs)
    r = cli("fleet", "suite", str(out), "--budget", "3", "--out", str(tmp_path / "suite"), "--json", cache=cache_dir)
    assert r.returncode == 0, r.stderr
    man = json.loads((tmp_path / "suite" / "manifest.json").read_text())
    assert len(man["members"]) == 3 and abs(sum(m["weight"] for m in man["members"]) - 1) < 1e-9
    for args, problem in (
        (("fleet", "suite", str(tmp_path / "jobs"), "--budget", "3"), "not a fleet folder"),
        (("fleet", "suite", str(out), "--budget", "50"), "fewer than --budget 50"),
        (("fleet", "ingest", str(tmp_path / "nope"), "--out", str(tmp_path / "f2")), "no such file"),
    ):
        r = cli(*args, cache=cache_dir)
        assert r.returncode == 2 and problem in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
