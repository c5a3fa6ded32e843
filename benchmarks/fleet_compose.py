"""Kineto-only ET synthesis on every shared trace, and the real fleet's suite composed and replayed.

    python benchmarks/fleet_compose.py [--no-suite] [--budget 5]

1. Synthesis: every Kineto file under ../shared/traces (ETs, metadata and non-Kineto files left
   out) through engine.compose.synth (no data-flow pass): its cpu_ops, the nodes synthesized
   (operators with their arguments + labels), the rate, the size lists inferred from the call
   tree or a view's reader and the values guessed, the skipped ops by reason; a file that
   cannot be synthesized with its one-line reason.
2. Suite: the real fleet (every shared trace and committed sample, signed through the trace
   store, serial), a suite of `--budget` picked as `mystique fleet suite` does, each pick
   composed into a benchmark (engine.fleet.members: one step, ranks this machine can replay)
   and every member replayed on CPU (engine.fleet.replay, 1 warm-up, 3 timed iterations): per
   member its outcome, coverage and step time, and the weighted fleet step.
Writes benchmarks/results/fleet_compose.json.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

ROOT = Path(__file__).resolve().parents[1]
_HERE = Path(__file__).resolve().parent
sys.path[:] = [str(ROOT)] + [p for p in sys.path if Path(p or ".").resolve() != _HERE]
RESULTS = ROOT / "benchmarks" / "results"
SAMPLES = ROOT / "sample_traces"

from engine import envvars  # noqa: E402  (after the path fix above: benchmarks/ must not shadow Dask)

SHARED = Path(envvars.get("MYSTIQUE_SHARED_TRACES") or ROOT.parent / "shared" / "traces")

from engine.errors import TraceError  # noqa: E402

if TYPE_CHECKING:
    from benchmarks.report import num, pct, table


def kineto_files() -> list[Path]:
    from engine.fleet.jobs import _is_candidate

    return sorted(p for p in SHARED.rglob("*") if _is_candidate(p) and "chakra" not in p.parent.name)


def synthesis() -> list[dict]:
    from engine.compose.synth import synthesize_file

    rows = []
    for p in kineto_files():
        rel = str(p.relative_to(SHARED))
        t0 = time.perf_counter()
        try:
            _doc, rep = synthesize_file(p, flow=False)
        except TraceError as exc:
            rows.append({"trace": rel, "refused": exc.problem})
            continue
        d = rep.to_dict()
        rows.append(
            {
                "trace": rel,
                "cpu_ops": d["cpu_ops"],
                "synthesized": d["synthesized"],
                "rate": d["rate"],
                "inferred_values": d["inferred_values"],
                "guessed_values": d["guessed_values"],
                "skipped": d["skipped"],
                "wall_s": round(time.perf_counter() - t0, 1),
            }
        )
        print(json.dumps(rows[-1]), flush=True)
    return rows


def suite(budget: int) -> dict:
    import pandas as pd

    from engine.fleet.jobs import discover, signatures
    from engine.fleet.members import compose_suite
    from engine.fleet.replay import replay_suite
    from engine.fleet.suite import manifest, pick

    rows = signatures(discover([p for p in (SHARED, SAMPLES) if p.exists()]), scheduler="serial")
    sigs = pd.DataFrame([r for r in rows if "skipped" not in r])
    s = pick(sigs, budget)
    with tempfile.TemporaryDirectory(prefix="suite-") as tmp:
        out = Path(tmp) / "suite"
        out.mkdir()
        t0 = time.perf_counter()
        members = compose_suite(sigs, s.picks, s.weights, out)
        compose_s = time.perf_counter() - t0
        (out / "manifest.json").write_text(
            json.dumps(manifest(sigs, budget, s, {}, [m.to_dict() for m in members]), indent=2)
        )
        t0 = time.perf_counter()
        res = replay_suite(out, out=Path(tmp) / "replay", warmup=1, iters=3)
        replay_s = time.perf_counter() - t0
    by = {r["job"]: r for r in res["members"]}
    return {
        "jobs": len(sigs),
        "budget": budget,
        "l1": s.l1,
        "compose_s": compose_s,
        "replay_s": replay_s,
        "weighted_step_ms": res["weighted_step_ms"],
        "weight_replayed": res["weight_replayed"],
        "members": [
            {
                "job": m.job,
                "weight": m.weight,
                "recorded_step_ms": float(sigs["step_ms"].iat[i]),
                "step": m.step,
                "ranks_kept": m.ranks_kept,
                "trims": m.trims,
                "synthesized": any("synthesized" in p for p in m.provenance.get("ranks", [])),
                "refused": m.refused or by[m.job].get("refused"),
                "median_ms": by[m.job].get("median_ms"),
                "coverage": by[m.job].get("coverage"),
            }
            for i, m in zip(s.picks, members, strict=True)
        ],
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--budget", type=int, default=5)
    ap.add_argument("--no-suite", action="store_true", help="the synthesis table only")
    a = ap.parse_args()
    import torch

    out: dict = {"torch": torch.__version__, "load1_before": os.getloadavg()[0]}
    out["synthesis"] = synthesis()
    if not a.no_suite:
        out["suite"] = suite(a.budget)
    out["load1_after"] = os.getloadavg()[0]
    out["date"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    (RESULTS / "fleet_compose.json").write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(out.get("suite", {}), indent=1)[:3000])


def docs_section(d: dict) -> list[str]:
    """Synthesis: every Kineto file of the shared traces through engine.compose.synth (no
    data-flow pass): cpu_ops, nodes synthesized (operators with arguments + labels), size lists
    inferred from the call tree or the op reading a view (synth_infer.py, synth_views.py), values
    guessed (scalars, views keeping their input's shape, streams), the skipped ops by reason;
    a file that cannot be synthesized gives its one-line reason. Suite: the real fleet (shared
    traces + samples) signed serially, a suite picked as `mystique fleet suite` does, each pick
    composed into a benchmark (engine/fleet/members.py: the median ProfilerStep, the ranks this
    machine can replay) and every member replayed on CPU (engine/fleet/replay.py: 1 warm-up, 3
    timed iterations); coverage is replayed / selected ops, the weighted fleet step is the sum
    of weight x member step time over the members that replayed."""
    rows = []
    for r in d["synthesis"]:
        if "refused" in r:
            rows.append([f"`{r['trace']}`", "", "", "", f"refused: {r['refused']}"])
            continue
        skipped = "; ".join(f"{n} {k}" for k, n in sorted(r["skipped"].items(), key=lambda kv: -kv[1])) or "none"
        rows.append(
            [
                f"`{r['trace']}`",
                f"{r['cpu_ops']:,}",
                f"{r['synthesized']:,} ({pct(r['rate'])})",
                f"{r['inferred_values']:,} / {r['guessed_values']:,}",
                skipped,
            ]
        )
    out = [f"**Synthesis** (torch {d['torch']}, {d['date']}):", ""]
    out += table(["trace", "cpu_ops", "synthesized", "inferred / guessed values", "skipped by reason"], rows)
    s = d.get("suite")
    if s:
        out += [
            f"**Suite of {s['budget']}** from {s['jobs']} jobs (L1 {num(s['l1'], 3)}): composed in "
            f"{num(s['compose_s'], 1)} s, replayed in {num(s['replay_s'], 1)} s; weighted fleet step "
            f"{num(s['weighted_step_ms'], 2)} ms over {pct(s['weight_replayed'])} of the weight.",
            "",
        ]
        out += table(
            ["member", "weight", "step", "ranks", "recorded step (ms)", "CPU replay step (ms)", "coverage", "note"],
            [
                [
                    f"`{m['job']}`",
                    pct(m["weight"]),
                    m["step"] or "",
                    len(m["ranks_kept"]),
                    num(m["recorded_step_ms"], 2),
                    num(m["median_ms"], 2) if m.get("median_ms") is not None else "",
                    (
                        f"{m['coverage']['replayed']}/{m['coverage']['selected']} ({pct(m['coverage']['rate'])})"
                        if m.get("coverage")
                        else ""
                    ),
                    "; ".join(
                        [*(["synthesized from Kineto"] if m["synthesized"] else []), *m["trims"]]
                        + ([f"not replayed: {m['refused']}"] if m.get("refused") else [])
                    ),
                ]
                for m in s["members"]
            ],
        )
    out += [f"Load average {num(d['load1_before'], 1)} before, {num(d['load1_after'], 1)} after.", ""]
    return out


if __name__ == "__main__":
    main()
