"""Compositions of the real-library samples: every required transform composed and replayed.

For the three real-library samples (sample_traces/gpt2_hf: transformers GPT-2; resnet_tv:
torchvision ResNet-18; dlrm_tbe: DLRM with FBGEMM TBE, a 2-rank capture) this composes

    gpt2_hf    x1, batch x2, DP 2 (global batch x2: one sample per rank), TP 2, bf16
    resnet_tv  x1, batch x2, DP 2, bf16
    dlrm_tbe   embedding table / row / greedy over 4 ranks (tables from both recorded ranks'
               TBE lookups), greedy at batch x2, greedy at bf16; the whole step (dense MLPs,
               TBE, all_to_all) at bf16, replayed on 2 ranks mirroring the composed rank 0; the
               whole step at x1 and batch x2, each recorded rank composed from its own ET and the
               two replayed together (TBE indices/offsets/output and all_to_all scaled)

exports each, replays it (one rank in process; several ranks with `mystique replay DIR
--world-size N`, one process per rank with real gloo collectives) and prints coverage (replayed /
selected ops, communication included) and the skip reasons. The batch-x2 time ratio of GPT-2 and
ResNet comes from interleaved rounds in one process: a x1 iteration, then a x2 iteration, the
ratio per round, the median over rounds (machine-load drift hits both alike). Writes
benchmarks/results/lib_compositions.json. Run it at normal priority (timings are reported):

    .venv/bin/python benchmarks/lib_compositions.py [--rounds 9] [--only gpt2_hf ...]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

from harness import ROOT, SAMPLES  # first: puts the repo root on sys.path (benchmarks/harness.py)

from engine.errors import TraceError

if TYPE_CHECKING:
    from benchmarks.report import num, pct, table

TBE = [str(SAMPLES / "dlrm_tbe" / f"dlrm_tbe_rank{r}_et.json.gz") for r in (0, 1)]
TBE_SEGMENTS = [{"selection": {}, "source": 0}, {"selection": {}, "source": 1}]


def _emb(plan: str, **extra) -> dict:
    return {
        "sources": TBE,
        "segments": TBE_SEGMENTS,
        "sharding": {"kind": "embedding", "plan": plan, "ranks": 4},
        **extra,
    }


def _one(name: str, **extra) -> dict:
    return {"sources": [str(SAMPLES / name / f"{name}_et.json.gz")], "segments": [{"selection": {}}], **extra}


COMPOSITIONS: dict[str, dict[str, dict]] = {
    "gpt2_hf": {
        "x1": _one("gpt2_hf"),
        "batch x2": _one("gpt2_hf", batch_scale=2),
        "DP 2": _one("gpt2_hf", batch_scale=2, sharding={"kind": "dp", "degree": 2}),
        "TP 2": _one("gpt2_hf", sharding={"kind": "tp", "degree": 2}),
        "bf16": _one("gpt2_hf", dtype="bf16"),
    },
    "resnet_tv": {
        "x1": _one("resnet_tv"),
        "batch x2": _one("resnet_tv", batch_scale=2),
        "DP 2": _one("resnet_tv", sharding={"kind": "dp", "degree": 2}),
        "bf16": _one("resnet_tv", dtype="bf16"),
    },
    "dlrm_tbe": {
        "embedding table x4": _emb("table"),
        "embedding row x4": _emb("row"),
        "embedding greedy x4": _emb("greedy"),
        "greedy x4, batch x2": _emb("greedy", batch_scale=2),
        "greedy x4, bf16": _emb("greedy", dtype="bf16"),
        "bf16 (whole step)": {**_one("dlrm_tbe", dtype="bf16"), "sources": TBE[:1]},
        "x1 (whole step)": {**_one("dlrm_tbe"), "sources": TBE[:1]},
        "batch x2 (whole step)": {**_one("dlrm_tbe", batch_scale=2), "sources": TBE[:1]},
    },
}
# compositions applied to every recorded rank's ET alone (spec "sources" replaced by each of
# these), the composed ranks then replayed together: a multi-rank step transformed rank by rank
PER_RANK = {("dlrm_tbe", "x1 (whole step)"): TBE, ("dlrm_tbe", "batch x2 (whole step)"): TBE}
# one-rank compositions of a multi-rank capture: every rank replays the composed rank 0 (its
# all_to_all, all_reduce and broadcast need their peers): `--world-size N --mirror-rank 0`
MIRROR = {("dlrm_tbe", "bf16 (whole step)"): 2}


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def _coverage(cov: dict) -> dict:
    return {
        "selected": cov["selected"],
        "replayed": cov["replayed"],
        "rate": round(cov["replayed"] / cov["selected"], 4) if cov["selected"] else None,
        "comm_selected": cov.get("comm_selected", 0),
        "comm_replayed": cov.get("comm_replayed", 0),
        "by_reason": {str(k): v for k, v in (cov.get("by_reason") or {}).items()},
    }


def _compose_per_rank(spec: dict, sources: list[str], out: Path) -> dict:
    """Compose `spec` once per recorded rank's ET; the ranks' ETs go into `out` named like a
    multi-rank capture (`<name>_rank<r>_et.json`), which `mystique replay DIR --world-size N` runs."""
    rows = [_compose({**spec, "sources": [src]}, out.with_name(f"{out.name}.r{r}")) for r, src in enumerate(sources)]
    out.mkdir(parents=True)
    for r in range(len(sources)):
        src = out.with_name(f"{out.name}.r{r}") / "rank_0.et.json"
        (out / f"{out.name}_rank{r}_et.json").write_bytes(src.read_bytes())
    return {
        "world_size": len(sources),
        "compose_s": round(sum(x["compose_s"] for x in rows), 2),
        "warnings": [w for x in rows for w in x["warnings"]],
    }


def _compose(spec: dict, out: Path) -> dict:
    from engine.compose import compose, export, spec_from_dict

    t0 = time.perf_counter()
    bench = compose(spec_from_dict({"version": 1, "device": "cpu", **spec}))
    export(bench, out)
    return {
        "world_size": bench.world_size,
        "compose_s": round(time.perf_counter() - t0, 2),
        "warnings": bench.meta["warnings"],
    }


def _replay_dist(folder: Path, world: int, out: Path, iters: int, mirror: bool = False) -> dict:
    cmd = [sys.executable, "-m", "engine.cli.main", "replay", str(folder), "--world-size", str(world)]
    cmd += ["--mirror-rank", "0"] if mirror else []
    cmd += ["--warmup", "1", "--iters", str(iters), "--no-profile", "--out", str(out), "--json"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env, timeout=900)
    if p.returncode != 0:
        return {"error": (p.stderr.strip().splitlines() or ["?"])[-1][:300]}
    doc = json.loads(p.stdout)
    return {"median_ms": round(doc["median_ms"], 3), "coverage": _coverage(doc["coverage"])}


def _session(folder: Path):
    import engine.trace as T
    from engine.replay import ReplayConfig, ReplaySession

    cfg = ReplayConfig(warmup=0, iters=1, profile=False, metrics=False, num_threads=1)
    return ReplaySession(T.load(folder / "rank_0.et.json"), config=cfg)


def _replay_one(folder: Path, iters: int) -> dict:
    with _session(folder) as s:
        s.run_iteration(measured=False)
        for _ in range(iters):
            s.run_iteration()
        res = s.finish()
    return {"median_ms": round(statistics.median(res.iteration_ms), 3), "coverage": _coverage(res.coverage)}


def _ratio(x1: Path, x2: Path, rounds: int) -> dict:
    """Interleaved rounds: x1 iteration, x2 iteration; median of the per-round ratios."""
    with _session(x1) as a, _session(x2) as b:
        for s in (a, b):
            s.run_iteration(measured=False)
            s.run_iteration(measured=False)
        ratios = []
        for _ in range(rounds):
            t1 = a.run_iteration()
            t2 = b.run_iteration()
            ratios.append(t2 / t1)
        a.finish(), b.finish()
    return {
        "rounds": rounds,
        "x1_median_ms": round(statistics.median(a.iter_ms), 3),
        "x2_median_ms": round(statistics.median(b.iter_ms), 3),
        "ratio_median": round(statistics.median(ratios), 3),
        "ratio_min": round(min(ratios), 3),
        "ratio_max": round(max(ratios), 3),
        "ratios": [round(r, 3) for r in ratios],
    }


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=9, help="interleaved x1/x2 rounds for the batch-x2 ratio")
    ap.add_argument("--iters", type=int, default=3, help="measured iterations of every other replay")
    ap.add_argument("--only", nargs="*", default=None, help="samples to run (default: all three)")
    ap.add_argument("--no-write", action="store_true", help="do not write the results JSON")
    args = ap.parse_args()
    import torch

    uptime_before = _load()
    rows: list[dict] = []
    ratios: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for sample, comps in COMPOSITIONS.items():
            if args.only and sample not in args.only:
                continue
            folders: dict[str, Path] = {}
            for label, spec in comps.items():
                folder = folders[label] = Path(tmp) / sample / label.replace(" ", "_").replace(",", "")
                row: dict = {"sample": sample, "composition": label}
                per_rank = PER_RANK.get((sample, label))
                try:
                    row.update(_compose_per_rank(spec, per_rank, folder) if per_rank else _compose(spec, folder))
                except TraceError as e:  # a composition that fails is a result to report, not a crash
                    row["error"] = f"compose: {e}"
                    rows.append(row)
                    print(f"{sample} {label}: {row['error']}", file=sys.stderr)
                    continue
                t0 = time.perf_counter()
                mirror = MIRROR.get((sample, label))
                if mirror:
                    row.update(world_size=mirror, mirror_rank=0)
                    row.update(_replay_dist(folder, mirror, folder.with_suffix(".out"), args.iters, mirror=True))
                elif row["world_size"] > 1:
                    row.update(_replay_dist(folder, row["world_size"], folder.with_suffix(".out"), args.iters))
                else:
                    row.update(_replay_one(folder, args.iters))
                row["replay_s"] = round(time.perf_counter() - t0, 1)
                rows.append(row)
                cov = row.get("coverage") or {}
                print(
                    f"{sample} {label}: coverage {cov.get('rate')} {cov.get('by_reason')} {row.get('error', '')}",
                    file=sys.stderr,
                )
            if (
                "x1" in folders
                and "batch x2" in folders
                and all("error" not in r for r in rows if r["sample"] == sample)
            ):
                ratios[sample] = _ratio(folders["x1"], folders["batch x2"], args.rounds)
                print(f"{sample} batch x2 / x1: {ratios[sample]['ratio_median']}", file=sys.stderr)
    uptime_after = _load()
    print(f"load average (1, 5, 15 min) before {uptime_before}, after {uptime_after}; {os.cpu_count()} cores\n")
    print("| sample | composition | ranks | coverage | replayed / selected (comm) | skipped by reason | median ms |")
    print("|---|---|---:|---:|---:|---|---:|")
    for r in rows:
        if "coverage" not in r:
            print(f"| {r['sample']} | {r['composition']} | {r.get('world_size', '-')} | - | - | {r.get('error')} | - |")
            continue
        c = r["coverage"]
        comm = f" ({c['comm_replayed']}/{c['comm_selected']})" if c["comm_selected"] else ""
        reasons = ", ".join(f"{k}: {v}" for k, v in c["by_reason"].items()) or "none"
        print(
            f"| {r['sample']} | {r['composition']} | {r['world_size']} | {100 * c['rate']:.1f} % | "
            f"{c['replayed']}/{c['selected']}{comm} | {reasons} | {r['median_ms']:.1f} |"
        )
    if ratios:
        print("\n| sample | x1 median ms | x2 median ms | x2 / x1 (median of rounds) | min-max | rounds | in 1.6-2.4 |")
        print("|---|---:|---:|---:|---|---:|:---:|")
        for s, r in ratios.items():
            ok = 1.6 <= r["ratio_median"] <= 2.4
            print(
                f"| {s} | {r['x1_median_ms']:.1f} | {r['x2_median_ms']:.1f} | {r['ratio_median']:.2f} | "
                f"{r['ratio_min']:.2f}-{r['ratio_max']:.2f} | {r['rounds']} | {'yes' if ok else 'NO'} |"
            )
    if not args.no_write:
        out = ROOT / "benchmarks" / "results" / "lib_compositions.json"
        if args.only and out.exists():  # --only updates its samples' rows and keeps the others
            old = json.loads(out.read_text())
            rows = [r for r in old.get("rows", []) if r["sample"] not in args.only] + rows
            ratios = {**{k: v for k, v in old.get("batch_x2_ratio", {}).items() if k not in args.only}, **ratios}
        doc = {
            "date": time.strftime("%Y-%m-%d %H:%M"),
            "load_before": uptime_before,
            "load_after": uptime_after,
            "cpu_count": os.cpu_count(),
            "torch": torch.__version__,
            "rows": rows,
            "batch_x2_ratio": ratios,
        }
        out.write_text(json.dumps(doc, indent=2))
    cov_ok = all((r.get("coverage") or {}).get("rate", 0) >= 0.99 for r in rows)
    ratio_ok = all(1.6 <= r["ratio_median"] <= 2.4 for r in ratios.values())
    return 0 if cov_ok and ratio_ok else 1


# -- its section of docs/figures.md, beside the code that writes its results. benchmarks/report.py
# runs `docs_section` (and the `_docs_*` helpers) on the results file without importing this file
# (so the report stays standard-library only), giving it the formatters named below.
def docs_section(d: dict) -> list[str]:
    """Every transform of the real-library samples (gpt2_hf, resnet_tv, dlrm_tbe) composed, exported
    and replayed on CPU; multi-rank compositions with one process per rank and real gloo
    collectives."""
    rows = []
    for r in d["rows"]:
        c = r.get("coverage", {})
        comm = f" ({c.get('comm_replayed', 0)}/{c.get('comm_selected', 0)})" if c.get("comm_selected") else ""
        reasons = ", ".join(f"{n} {k}" for k, n in (c.get("by_reason") or {}).items()) or "none"
        rows.append(
            [
                r["sample"],
                r["composition"],
                r["world_size"],
                pct(c.get("rate")),
                f"{c.get('replayed', 0)}/{c.get('selected', 0)}{comm}",
                reasons,
                num(r.get("median_ms"), 1),
            ]
        )
    out = table(
        ["sample", "composition", "ranks", "coverage", "replayed / selected (comm)", "skipped", "median ms"], rows
    )
    ratios = d.get("batch_x2_ratio", {})
    if ratios:
        out += table(
            ["sample", "x1 median ms", "x2 median ms", "x2 / x1 (median of rounds)", "min–max", "rounds"],
            [
                [
                    k,
                    num(v["x1_median_ms"], 1),
                    num(v["x2_median_ms"], 1),
                    f"{v['ratio_median']:.2f}",
                    f"{v['ratio_min']:.2f}–{v['ratio_max']:.2f}",
                    v["rounds"],
                ]
                for k, v in ratios.items()
            ],
        )
    out += [f"Run {d.get('date')} with torch {d.get('torch')} on {d.get('cpu_count')} cores.", ""]
    return out


if __name__ == "__main__":
    sys.exit(main())
