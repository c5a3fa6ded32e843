"""Cost against size (issue 22's must-show): load, fleet simulate, Dask fan-out, rank overview;
issue 31's: a fleet from raw JSON (rawfleet), info and Explore on a big trace (open).

    python benchmarks/scale.py [--only load,fleet,dask,overview,rawfleet,open] [--quick] [--scratch DIR]
                               [--out benchmarks/results/scale.json]

Every input is built from a shared real GPU trace (../shared/traces): big single traces by
tiling its steps in time, fleets by copying a rank with per-rank perturbed durations
(engine.testing.fleet), so no two ranks are identical. Each section lives in
benchmarks/scalebench/<section>.py as `run(quick, scratch) -> dict` and measures in fresh
processes where peak memory is reported. One run of this script runs every section in order and
writes one results file; `--only` re-measures some sections and keeps the others' figures
(each section records its own date and load average). `--quick` uses small sizes (a smoke run,
written to scale_quick.json).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# benchmarks/distributed.py would shadow the `distributed` package (Dask): drop this folder
_HERE = Path(__file__).resolve().parent
sys.path[:] = [str(ROOT)] + [p for p in sys.path if Path(p or ".").resolve() != _HERE]
RESULTS = ROOT / "benchmarks" / "results"
SECTIONS = ("load", "fleet", "dask", "overview", "rawfleet", "open")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", default=",".join(SECTIONS), help="comma-separated sections")
    ap.add_argument("--quick", action="store_true", help="small sizes (smoke run)")
    ap.add_argument("--scratch", type=Path, default=None, help="folder for generated inputs")
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args(argv)
    want = [s.strip() for s in a.only.split(",") if s.strip()]
    bad = [s for s in want if s not in SECTIONS]
    if bad:
        print(f"scale.py: unknown section(s) {', '.join(bad)} (known: {', '.join(SECTIONS)})", file=sys.stderr)
        return 2
    out = a.out or RESULTS / ("scale_quick.json" if a.quick else "scale.json")
    results = json.loads(out.read_text()) if out.exists() else {}
    scratch = a.scratch or Path(tempfile.mkdtemp(prefix="mystique-scale-"))
    scratch.mkdir(parents=True, exist_ok=True)
    try:
        for name in want:
            mod = importlib.import_module(f"benchmarks.scalebench.{name}")
            t0 = time.perf_counter()
            res = mod.run(quick=a.quick, scratch=scratch / name)
            res["section_wall_s"] = round(time.perf_counter() - t0, 1)
            res["date"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
            res["load_avg_1m_end"] = round(os.getloadavg()[0], 2)
            results[name] = res
            out.write_text(json.dumps(results, indent=1) + "\n")
            print(f"{name}: {json.dumps(res.get('summary', {}))}", flush=True)
    finally:
        if a.scratch is None:
            shutil.rmtree(scratch, ignore_errors=True)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
