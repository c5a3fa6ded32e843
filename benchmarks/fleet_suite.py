"""A fleet of jobs -> a weighted suite (engine/fleet), checked two ways.

    python benchmarks/fleet_suite.py [--jobs 1000] [--quick]

1. Real fleet: every shared trace (../shared/traces) and every committed sample, one job per trace
   file or rank folder, signed through the trace store; a suite of 5 picked by `mystique fleet
   suite`'s code. Its L1 distance to the fleet's class mix is compared with the median of 100
   random 5-job picks and with the 5 longest jobs (both with the same weight fitting).
2. Planted fleet: `engine.testing.fleet.planted_fleet` writes N small GPU traces drawn from five
   known class mixes; they are ingested through the store with Dask (LocalCluster), and k-means
   over the signatures must recover the planted groups (adjusted Rand index). Wall time and the
   peak RSS of this process tree (psutil, sampled) are recorded.
Writes benchmarks/results/fleet_suite.json.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

ROOT = Path(__file__).resolve().parents[1]
# benchmarks/distributed.py would shadow the `distributed` package (Dask): this folder leaves the
# path (as in scale.py; Dask's worker processes re-import this script, so no `import harness`)
_HERE = Path(__file__).resolve().parent
sys.path[:] = [str(ROOT)] + [p for p in sys.path if Path(p or ".").resolve() != _HERE]
RESULTS = ROOT / "benchmarks" / "results"
SAMPLES = ROOT / "sample_traces"

from engine import envvars  # noqa: E402
from engine.fleet.jobs import discover, signatures  # noqa: E402  (after the path fix above)
from engine.fleet.signature import SHARE_KEYS  # noqa: E402
from engine.fleet.suite import baselines, pick  # noqa: E402
from engine.testing.fleet import PLANTED_MIXES, planted_fleet  # noqa: E402

if TYPE_CHECKING:
    from benchmarks.report import num, pct, table

SHARED = Path(envvars.get("MYSTIQUE_SHARED_TRACES") or ROOT.parent / "shared" / "traces")


class PeakRSS:
    """Peak RSS of this process and its children (sampled every 0.2 s)."""

    def __init__(self) -> None:
        import psutil

        self.proc = psutil.Process()
        self.peak = 0
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        import psutil

        while not self._stop.is_set():
            total = 0
            try:
                procs = [self.proc, *self.proc.children(recursive=True)]
                for p in procs:
                    try:
                        total += p.memory_info().rss
                    except psutil.Error:
                        pass
            except psutil.Error:
                pass
            self.peak = max(self.peak, total)
            self._stop.wait(0.2)

    def __enter__(self) -> PeakRSS:
        self._t.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._t.join()


def real_fleet(budget: int) -> dict:
    import pandas as pd

    paths = [p for p in (SHARED, SAMPLES) if p.exists()]
    t0 = time.perf_counter()
    rows = signatures(discover(paths), scheduler="serial")
    sign_s = time.perf_counter() - t0
    good = pd.DataFrame([r for r in rows if "skipped" not in r])
    suite = pick(good, budget)
    base = baselines(good, budget)
    return {
        "jobs": len(good),
        "skipped": [{"job": r["job"], "why": r["skipped"]} for r in rows if "skipped" in r],
        "sign_s": sign_s,
        "budget": budget,
        "members": [
            {"job": str(good["job"].iat[i]), "weight": w} for i, w in zip(suite.picks, suite.weights, strict=True)
        ],
        "l1": suite.l1,
        "error": suite.error(),
        "fleet_signature": suite.fleet,
        **base,
    }


def planted(n_jobs: int, scheduler: str) -> dict:
    import numpy as np
    import pandas as pd
    from sklearn.cluster import KMeans
    from sklearn.metrics import adjusted_rand_score

    with tempfile.TemporaryDirectory(prefix="fleet-") as tmp:
        jobs = planted_fleet(Path(tmp) / "jobs", n_jobs)
        t0 = time.perf_counter()
        with PeakRSS() as rss:
            rows = signatures(discover([Path(tmp) / "jobs"]), scheduler=scheduler)
        wall = time.perf_counter() - t0
    sig = pd.DataFrame(rows)
    truth = {Path(p).stem: g for p, g in jobs}
    labels = [truth[Path(j).name] for j in sig["job"]]
    x = sig[list(SHARE_KEYS)].to_numpy(np.float64)
    found = KMeans(n_clusters=len(PLANTED_MIXES), n_init=10, random_state=0).fit_predict(x)
    return {
        "jobs": n_jobs,
        "groups": len(PLANTED_MIXES),
        "scheduler": scheduler,
        "wall_s": wall,
        "peak_rss_mb": rss.peak / 2**20,
        "ari": float(adjusted_rand_score(labels, found)),
        "suite_l1": pick(sig, len(PLANTED_MIXES)).l1,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=1000)
    ap.add_argument("--budget", type=int, default=5)
    ap.add_argument("--scheduler", default="local")
    ap.add_argument("--quick", action="store_true", help="60 planted jobs, serial (a smoke run)")
    a = ap.parse_args()
    out = {"load1_before": os.getloadavg()[0]}
    out["real"] = real_fleet(a.budget)
    out["planted"] = planted(60 if a.quick else a.jobs, "serial" if a.quick else a.scheduler)
    out["load1_after"] = os.getloadavg()[0]
    if not a.quick:  # a smoke run prints only
        (RESULTS / "fleet_suite.json").write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps({k: v for k, v in out["real"].items() if k in ("jobs", "l1", "random_median_l1", "longest_l1")}))
    print(json.dumps(out["planted"]))


# -- its section of docs/figures.md, beside the code that writes its results. benchmarks/report.py
# runs `docs_section` (and the `_docs_*` helpers) on the results file without importing this file
# (so the report stays standard-library only), giving it the formatters named below.
# results file stem -> section title. The script is benchmarks/<stem>.py, the formatter the function
# of the same name, and its docstring says how the figures are measured (method only, no figure).
def docs_section(d: dict) -> list[str]:
    """Real fleet: every shared trace and committed sample, one job per trace file or rank folder,
    signed through the trace store (engine/fleet/signature.py: shares of the measured window per
    kernel class, collective type, host overhead and idle); a suite of 5 picked by k-means
    medoids, NNLS weights and swaps (engine/fleet/suite.py), against 100 random 5-job picks and
    the 5 longest jobs, each with the same weight fitting. Planted fleet: N synthetic GPU traces
    drawn from five known class mixes (engine.testing.fleet.planted_fleet), ingested with Dask
    (LocalCluster), clustered by k-means; adjusted Rand index against the planted groups, wall
    time and the peak RSS of the process tree."""
    r, p = d["real"], d["planted"]
    out = [
        f"**Real fleet**: {r['jobs']} jobs ({len(r['skipped'])} file(s) skipped: "
        + "; ".join(f"`{s['job']}`: {s['why']}" for s in r["skipped"])
        + f"), signed in {num(r['sign_s'], 1)} s (serial).",
        "",
    ]
    out += table(
        [
            "suite of",
            "L1 to the fleet mix",
            "random picks (median of " + str(r["random_picks"]) + ")",
            "random p10",
            f"{r['budget']} longest jobs",
        ],
        [
            [
                r["budget"],
                num(r["l1"], 3),
                num(r["random_median_l1"], 3),
                num(r["random_p10_l1"], 3),
                num(r["longest_l1"], 3),
            ]
        ],
    )
    out += table(["member", "weight"], [[f"`{m['job']}`", pct(m["weight"])] for m in r["members"]])
    out += table(
        ["class", "fleet share", "suite - fleet"],
        [
            [k, pct(v), pct(r["error"][k], 1, signed=True)]
            for k, v in r["fleet_signature"].items()
            if v > 0 or r["error"][k] != 0
        ],
    )
    out += [
        f"**Planted fleet**: {p['jobs']} jobs in {p['groups']} planted groups, ingested on `{p['scheduler']}` in "
        f"{num(p['wall_s'], 1)} s, peak RSS {num(p['peak_rss_mb'], 0)} MB; adjusted Rand index of the recovered groups "
        f"{num(p['ari'], 3)}; a suite of {p['groups']} is {num(p['suite_l1'], 4)} (L1) from the fleet. Load average "
        f"{num(d['load1_before'], 1)} before, {num(d['load1_after'], 1)} after.",
        "",
    ]
    return out


if __name__ == "__main__":
    main()
