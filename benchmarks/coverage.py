"""Replay coverage on every shared execution trace, against the reference replayer.

    .venv/bin/python benchmarks/coverage.py [--device cpu|cuda] [--traces DIR] [--iters N] [--only NAME ...]

For each ET under the shared traces folder: load it, replay it on the device (CPU by default; the
shared traces were captured on CUDA, so `--device cuda` replays them on their native device;
warm-up 0-1, 1-3 measured
iterations: coverage, not timing, is the point) and print selected / replayed / substituted /
skipped ops, the compute-op rate and the skip reasons. Writes benchmarks/results/coverage.json (coverage_cuda.json for CUDA).
Reference figures (PARAM et_replay on CPU, from its issue tracker / our runs of it): linear
319/320, resnet 1172/1228 ops replayed.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

from harness import ROOT  # first: puts the repo root on sys.path (benchmarks/harness.py)

if TYPE_CHECKING:
    from benchmarks.report import num, table

REFERENCE = {"param_linear": (319, 320), "param_resnet": (1172, 1228)}
ET_SUFFIXES = ("_et.json.gz", ".json.tar.gz", "chakra.0.0.4.json.gz")


def find_ets(root: Path) -> list[Path]:
    out = []
    for p in sorted(root.rglob("*")):
        if p.is_file() and p.name.endswith(ET_SUFFIXES) and p.stat().st_size < 20 * 2**20:
            out.append(p)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--traces", default=str(ROOT.parent / "shared" / "traces"))
    ap.add_argument("--iters", type=int, default=1)
    ap.add_argument("--warmup", type=int, default=0)
    ap.add_argument("--only", nargs="*", default=None, help="folder names to run (default all)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--out", default=None, help="default benchmarks/results/coverage[_cuda].json")
    args = ap.parse_args(argv)
    if args.out is None:
        suffix = "" if args.device == "cpu" else "_" + args.device.split(":")[0]
        args.out = str(ROOT / "benchmarks" / "results" / f"coverage{suffix}.json")

    import orjson

    import engine.trace as T
    from engine.replay import ReplayConfig, replay

    records = []
    print(
        f"{'trace':<20} {'selected':>8} {'replayed':>8} {'subst':>6} {'skipped':>7} "
        f"{'compute':>13} {'rate':>7}  {'iter_ms':>9}  reference"
    )
    for path in find_ets(Path(args.traces)):
        folder = path.parent.name
        if args.only and folder not in args.only:
            continue
        t0 = time.perf_counter()
        trace = T.load(path)
        cfg = ReplayConfig(device=args.device, warmup=args.warmup, iters=args.iters, metrics=False)
        res = replay(trace, config=cfg)
        cov = res.coverage
        ref = REFERENCE.get(folder)
        rec = {
            "trace": folder,
            "path": str(path),
            "device": res.device,
            "coverage": cov,
            "median_ms": res.median_ms,
            "wall_s": round(time.perf_counter() - t0, 2),
            "reference": {"replayed": ref[0], "selected": ref[1]} if ref else None,
            "skipped_ops": res.skipped_ops[:50],
            "substituted_ops": dict(Counter(r["name"] for r in res.per_op if str(r["status"]) == "substituted")),
        }
        records.append(rec)
        comp = f"{cov['replayed_compute']}/{cov['selected_compute']}"
        reft = f"{ref[0]}/{ref[1]} ({ref[0] / ref[1]:.1%})" if ref else "-"
        print(
            f"{folder:<20} {cov['selected']:>8} {cov['replayed']:>8} {cov['substituted']:>6} "
            f"{cov['skipped']:>7} {comp:>13} {cov['compute_rate']:>7.2%}  {res.median_ms:>9.1f}  {reft}"
        )
        for reason, n in cov["by_reason"].items():
            print(f"{'':<22}{n:>5} x {reason}")
        sys.stdout.flush()
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(
        orjson.dumps(
            {"records": records, "device": args.device}, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY
        )
    )
    print(f"wrote {out}")
    bad = [r["trace"] for r in records if r["coverage"]["compute_rate"] < 0.99]
    if bad:
        print(f"below 99% compute coverage: {', '.join(bad)}")
    return 0


# -- its section of docs/figures.md, beside the code that writes its results. benchmarks/report.py
# runs `docs_section` (and the `_docs_*` helpers) on the results file without importing this file
# (so the report stays standard-library only), giving it the formatters named below.
def docs_section(d: dict) -> list[str]:
    """Every shared ET replayed on CPU, one process."""
    rows = []
    for r in d["records"]:
        c = r["coverage"]
        reasons = ", ".join(f"{n} {k}" for k, n in (c.get("by_reason") or {}).items())
        rows.append(
            [
                r["trace"],
                num(c["selected"]),
                num(c["replayed"]),
                num(c.get("substituted", 0)),
                num(c["skipped"]) + (f" ({reasons})" if reasons else ""),
                f"{c.get('replayed_compute', 0)}/{c.get('selected_compute', 0)}",
            ]
        )
    return table(
        ["trace", "ops selected", "replayed", "substituted", "skipped (reasons)", "compute ops replayed"], rows
    ) + [f"Device: {d.get('device', 'cpu')}. Nothing aborts; a failing op is counted with its reason.", ""]


if __name__ == "__main__":
    sys.exit(main())
