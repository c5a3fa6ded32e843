"""Simulator figures (issue 12): reproduction, what-if vs fresh captures, sharding ranking, speed.

    .venv/bin/python benchmarks/simulate.py [--only reproduction whatif sharding speed dp costmodel] [--rounds 3]

  reproduction  every sample trace and every Kineto trace in ../shared/traces simulated unchanged:
                predicted vs measured iteration (mean ProfilerStep span); traces without a step
                span are listed and excluded
  whatif        fresh CPU captures on this machine (1 thread, 3 profiled steps): transformer 2x
                layers and MLP/transformer batch x2, each predicted from a base capture taken in
                the same round (base and variant back to back, so machine load hits both), over
                --rounds rounds; error of the prediction vs the variant's measured iteration
  sharding      DLRM sample, plans table/row/column/greedy over 2, 3, 4 and 8 ranks: predicted
                slowest-rank embedding time (simulator) vs replay of each composed plan (41
                interleaved rounds); identical plans merged, predicted ties judged against the
                measured round-to-round noise (rules in `sharding`'s docstring)
  speed         scheduler throughput (tasks/s) on the largest shared traces, median of 7 runs
  dp            1,024-rank data-parallel what-if from the one-rank trace hta_trace_diff/control
  costmodel     held-out error per cost family (microbenchmarks here; in-trace fits)
Writes benchmarks/results/simulate.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
SAMPLES = ROOT / "sample_traces"
SHARED = ROOT.parent / "shared" / "traces"
RESULTS = ROOT / "benchmarks" / "results" / "simulate.json"


def _load(*paths):
    import engine.trace as et

    return et.load(*[str(p) for p in paths], use_cache=False)


def reproduction() -> dict:
    from engine.simulate import simulate

    # one job per sample folder (a multi-rank sample's Kineto files load together as its ranks);
    # every shared Kineto file on its own (hta_trace_diff's two files are different runs)
    groups = [sorted(d.glob("*_kineto.json.gz")) for d in sorted(SAMPLES.iterdir()) if d.is_dir()]
    groups = [g for g in groups if g]
    if (SHARED / "MANIFEST.json").exists():
        man = json.loads((SHARED / "MANIFEST.json").read_text())
        groups += [[SHARED / m["path"]] for m in man if m["kind"] == "kineto"]
    rows, excluded = [], []
    for files in groups:
        f = files[0]
        r = simulate(_load(*files)).to_json()
        name = (
            str(f.parent.relative_to(ROOT))
            if len(files) > 1
            else str(f.relative_to(ROOT.parent if SHARED in f.parents else ROOT))
        )
        if r["measured_iteration_ms"] is None:
            excluded.append({"trace": name, "reason": "no ProfilerStep span", "tasks": r["tasks"]})
            continue
        rows.append(
            {
                "trace": name,
                "measured_ms": r["measured_iteration_ms"],
                "predicted_ms": r["predicted_iteration_ms"],
                "error_pct": r["error_pct"],
                "tasks": r["tasks"],
                "cpu_only": r["cpu_only"],
                "ranks": r["ranks"],
                "edges": r["edges"],
            }
        )
    errs = [abs(r["error_pct"]) for r in rows]
    return {
        "traces": rows,
        "excluded": excluded,
        "mean_abs_error_pct": statistics.mean(errs) if errs else None,
        "max_abs_error_pct": max(errs) if errs else None,
    }


def _capture(model: str, out: Path, **overrides) -> Path:
    from engine.capture.api import capture_sample

    capture_sample(
        model, overrides=overrides, out_dir=out, steps=STEPS, warmup=3, timing_steps=3, device="cpu", threads=1
    )
    return out


STEPS = 5


def _step_stats(events) -> dict:
    from engine.simulate.result import step_spans

    d = step_spans(events)["dur_us"].to_numpy() / 1000.0
    return {
        "mean": float(d.mean()),
        "median": float(statistics.median(d)),
        "min": float(d.min()),
        "steps": [round(x, 3) for x in d],
    }


def _pair(out: Path, model: str):
    return _load(out / f"{model}_kineto.json.gz", out / f"{model}_et.json.gz")


WHATIFS = {
    # name: (model, variant overrides, spec edits)
    "transformer_layers_x2": (
        "transformer",
        {"layers": 4},
        [{"kind": "layers", "module": r"blocks\.\d+", "copies": 1}],
    ),
    "mlp_batch_x2": ("mlp", {"batch": 512}, [{"kind": "batch", "scale": 2.0, "size": 256}]),
    "transformer_batch_x2": (
        "transformer",
        {"batch": 6},
        [{"kind": "batch", "scale": 2.0, "size": 3, "multiples": [128]}],
    ),
}


class _Timed:
    """A sample step that records its thread CPU time (the capture calls it like the step)."""

    def __init__(self) -> None:
        self.step, self.model, self.cpu_ms = None, None, []

    def wrap(self, step):
        """`capture_sample(wrap=...)`: time `step` (keeping its model for the module labels)."""
        self.step, self.model = step, step.model
        return self

    def __call__(self):
        t0 = time.thread_time()
        out = self.step()
        self.cpu_ms.append((time.thread_time() - t0) * 1000)
        return out


def _cpu_ratio(model: str, over: dict, rounds: int, steps: int = 5) -> dict:
    """Ground truth by thread CPU time of *profiled* steps (captured exactly like the samples: ET +
    Kineto + module labels, 1 intra-op thread); base and variant captures alternate (ABBA).

    Why CPU time: on a shared 2-core machine other processes stretch wall-clock steps by 2-5x at
    random (see the fresh-capture rounds), while a single-threaded step's thread CPU time only
    counts the cycles it ran. Profiled steps, because the trace the prediction starts from was
    profiled too (per-op profiler overhead is part of every recorded op)."""
    from engine.capture.api import capture_sample

    tmp = Path(tempfile.mkdtemp(prefix="simcpu_"))
    times: dict[str, list[float]] = {"base": [], "variant": []}
    for i in range(rounds):
        order = ["base", "variant"] if i % 2 == 0 else ["variant", "base"]
        for k in order:
            timed = _Timed()
            capture_sample(
                model,
                overrides=over if k == "variant" else None,
                wrap=timed.wrap,
                out_dir=tmp / f"{k}{i}",
                steps=steps,
                warmup=2,
                timing_steps=1,
                threads=1,
            )
            times[k].extend(timed.cpu_ms[-steps:])
    med = {k: statistics.median(v) for k, v in times.items()}
    return {
        "base_cpu_ms": med["base"],
        "variant_cpu_ms": med["variant"],
        "ratio": med["variant"] / med["base"],
        "steps_each": len(times["base"]),
    }


def whatif(rounds: int = 3, cpu_rounds: int = 4, fresh: bool = True) -> dict:
    """Predicted/measured ratio of each what-if.

    prediction: the bundled sample trace (sample_traces/, a quiet capture) simulated with the
    edit, divided by the same trace simulated unchanged; ground truth: thread-CPU-time ratio of
    the variant's and the base's unprofiled steps on this machine (`_cpu_ratio`). The error is
    predicted_ratio / measured_ratio - 1 = the error of "base measured x predicted ratio".
    With `fresh`, also `rounds` wall-clock rounds: a fresh base and variant capture back to back,
    the variant's median ProfilerStep predicted from the base's (reported, noisy under load)."""
    import os

    from engine.simulate import simulate

    out: dict = {}
    tmp = Path(os.environ.get("MYSTIQUE_SIM_CAPTURES") or tempfile.mkdtemp(prefix="simwhatif_"))
    for name, (model, over, edits) in WHATIFS.items():
        sample = _pair(SAMPLES / model, model)
        base = simulate(sample)
        pred = simulate(sample, {"version": 1, "edits": edits})
        p_ratio = pred.predicted_iteration_ms / base.predicted_iteration_ms
        gt = _cpu_ratio(model, over, cpu_rounds)
        entry = {
            "spec": {"version": 1, "edits": edits},
            "variant": over,
            "sample_step_ms": base.predicted_iteration_ms,
            "predicted_variant_ms": pred.predicted_iteration_ms,
            "predicted_ratio": p_ratio,
            "measured": gt,
            "error_pct": 100 * (p_ratio / gt["ratio"] - 1),
            "report": {k: v for k, v in pred.extra.items() if k != "assumptions"},
            "loadavg_1m": os.getloadavg()[0],
        }
        print(
            f"  {name}: predicted ratio {p_ratio:.3f}, measured (CPU time) {gt['ratio']:.3f} -> "
            f"{entry['error_pct']:+.1f} % (load {entry['loadavg_1m']:.1f})",
            flush=True,
        )
        if fresh:
            per = []
            for i in range(rounds):
                base_dir, var_dir = tmp / f"{name}_{i}_base", tmp / f"{name}_{i}_var"
                if not (var_dir / f"{model}_kineto.json.gz").exists():
                    _capture(model, base_dir)
                    _capture(model, var_dir, **over)
                b_tr, v_tr = _pair(base_dir, model), _pair(var_dir, model)
                pr = simulate(b_tr, {"version": 1, "edits": edits})
                b, v, p = _step_stats(b_tr.events), _step_stats(v_tr.events), _step_stats(pr.predicted.events)
                per.append(
                    {
                        "base_ms": b["median"],
                        "predicted_ms": p["median"],
                        "measured_ms": v["median"],
                        "error_pct": 100 * (p["median"] / v["median"] - 1),
                        "steps": {"base": b["steps"], "variant": v["steps"], "predicted": p["steps"]},
                        "loadavg_1m": os.getloadavg()[0],
                    }
                )
                q = per[-1]
                print(
                    f"    fresh round {i}: base {q['base_ms']:.1f} predicted {q['predicted_ms']:.1f} measured "
                    f"{q['measured_ms']:.1f} ms ({q['error_pct']:+.1f} %, load {q['loadavg_1m']:.1f})",
                    flush=True,
                )
            entry["fresh_captures"] = {
                "rounds": per,
                "median_error_pct": statistics.median(x["error_pct"] for x in per),
                "base_ms_range": [min(x["base_ms"] for x in per), max(x["base_ms"] for x in per)],
            }
        out[name] = entry
    return out


def speed(runs: int = 7) -> dict:
    from engine.simulate import SimConfig, build_graph, solve

    out = {}
    cand = [
        SHARED / "param_resnet/resnet_kineto.json.gz",
        SHARED / "hta_trace_diff/control.json.gz",
        SHARED / "hta_trace_diff/test.json.gz",
    ]
    for f in cand:
        if not f.exists():
            continue
        tr = _load(f)
        sims, builds = [], []
        for _ in range(runs):
            t0 = time.perf_counter()
            g = build_graph(tr.events, SimConfig())
            t1 = time.perf_counter()
            s = solve(g)
            t2 = time.perf_counter()
            builds.append(t1 - t0)
            sims.append(t2 - t1)
        n = g.n_tasks
        out[f.parent.name + "/" + f.name] = {
            "tasks": n,
            "rounds": s.rounds,
            "schedule_s_median": statistics.median(sims),
            "tasks_per_s_schedule": n / statistics.median(sims),
            "build_s_median": statistics.median(builds),
            "tasks_per_s_build_and_schedule": n / (statistics.median(sims) + statistics.median(builds)),
        }
    return out


PRED_TIE_REL = 1e-3  # predicted gaps under 0.1 % are below the embedding model's resolution


def _median_ci(d: list[float], conf: float = 0.95) -> tuple[float, float]:
    """Distribution-free CI of the median (sign-test order statistics): no normality assumed,
    robust to the load spikes of a shared machine."""
    import math

    s, n = sorted(d), len(d)
    k = 0  # largest k with P(Binom(n, 1/2) <= k - 1) <= (1 - conf) / 2
    while k + 1 <= n // 2 and sum(math.comb(n, i) for i in range(k + 1)) / 2**n <= (1 - conf) / 2:
        k += 1
    return (s[k - 1], s[n - k]) if k else (s[0], s[-1])


def _paired(a: list[float], b: list[float]) -> dict:
    """Median per-round difference a - b and its 95 % CI; within noise when the CI contains 0."""
    d = [x - y for x, y in zip(a, b)]
    lo, hi = _median_ci(d)
    return {"median_ms": statistics.median(d), "ci95_ms": [lo, hi], "within_noise": lo <= 0 <= hi}


def _assignment(shards: list[dict]) -> tuple:
    """What a composed plan runs, up to rank naming: per rank the set of (table, row/col range,
    lookups) it serves. Equal keys are the same benchmark (rank labels do not change any rank's work)."""
    per: dict = {}
    for x in shards:
        per.setdefault(x["rank"], []).append(
            (x["table"], x["row_offset"], x["rows"], x["col_offset"], x["dim"], x["lookups"])
        )
    return tuple(sorted(tuple(sorted(v)) for v in per.values()))


def sharding(ranks=(2, 3, 4, 8), plans=("table", "row", "column", "greedy"), rounds: int = 41) -> dict:
    """Predicted plan ranking (simulator's embedding model on compose's shards) vs measured replay.

    Rules (also in the README):
      * Plans that compose to the same per-rank shard assignment (same tables, row/column ranges and
        lookups per rank, up to rank naming) are one benchmark: merged before ranking ("row≡greedy").
      * Measured time of a plan in a round = its slowest rank's replay (thread CPU ms) in that round;
        all plans' ranks replay interleaved (ABBA) for `rounds` rounds; a plan's figure = median.
      * Predicted pick: the lowest predicted slowest-rank time. Plans within PRED_TIE_REL (0.1 %) of
        it are a predicted tie (the model cannot resolve such gaps); a tie is broken by fewer shards
        (fixed per-shard costs the model leaves out), then the lower raw prediction.
      * Hit: the pick is the measured fastest. If the measured fastest is another plan *in the
        predicted tie*, it is a hit only when their paired per-round difference is within the
        round-to-round noise, i.e. the 95 % sign-test CI of the median paired difference contains 0
        (then printed as a tie, with the CI). A significant difference is a miss. Outside a predicted
        tie there is no noise allowance.
    """
    from engine.compose import compose, export, spec_from_dict
    from engine.compose.measure import alternate
    from engine.simulate import simulate
    from engine.simulate.whatif.sharding import EmbeddingModel, Shard, rank_us, tables_from_trace

    dlrm = _pair(SAMPLES / "dlrm", "dlrm")
    tables = tables_from_trace(dlrm)
    model = EmbeddingModel.fit(tables)
    own = simulate(dlrm, {"version": 1, "edits": [{"kind": "sharding", "ranks": list(ranks), "plans": list(plans)}]})
    tmp = Path(tempfile.mkdtemp(prefix="simshard_"))
    out: dict = {"model": {"source": model.source, "scale": model.scale}, "rounds": rounds, "cases": {}}
    hits, pairs_ok, pairs = 0, 0, 0
    for n in ranks:
        pred, traces, nshards, groups = {}, {}, {}, {}
        for plan in plans:
            spec = {
                "sources": [str(SAMPLES / "dlrm" / "dlrm_et.json.gz")],
                "segments": [{"selection": {}}],
                "sharding": {"kind": "embedding", "plan": plan, "ranks": n},
            }
            bench = compose(spec_from_dict(spec, base_dir=ROOT))
            key = _assignment(bench.meta["sharding"]["shards"])
            if key in groups:  # same benchmark as an earlier plan: measured and ranked once
                groups[key].append(plan)
                continue
            groups[key] = [plan]
            res = export(bench, tmp / f"{plan}_{n}")
            shards = [
                Shard(table=x["table"], rank=x["rank"], rows=x["rows"], dim=x["dim"], lookups=x["lookups"])
                for x in bench.meta["sharding"]["shards"]
            ]
            pred[plan] = max(rank_us(shards, n, model)) / 1000
            nshards[plan] = len(shards)
            for r, p in res["ranks"].items():
                traces[f"{plan}/{r}"] = _load(p)
        names = {g[0]: "≡".join(g) for g in groups.values()}
        merged = [names[p] for p in names if "≡" in names[p]]
        # thread-CPU ms per iteration of each trace's replay, every round, run alternately (ABBA)
        runs = alternate(traces, rounds, warmup=1, clock=time.thread_time)
        t = {k: r["runs_ms"] for k, r in runs.items()}
        per_round = {p: [max(t[f"{p}/{r}"][i] for r in range(n)) for i in range(rounds)] for p in pred}
        meas = {p: statistics.median(v) for p, v in per_round.items()}
        best = min(pred.values())
        tied = [p for p in pred if pred[p] <= best * (1 + PRED_TIE_REL)]
        pick = min(tied, key=lambda p: (nshards[p], pred[p]))
        p_rank = [pick] + sorted((p for p in pred if p != pick), key=lambda p: pred[p])
        m_rank = sorted(pred, key=lambda p: meas[p])

        # the pick against its measured rival: the measured fastest, or the runner-up when the pick won
        rival = m_rank[0] if m_rank[0] != pick else m_rank[-1] if len(m_rank) == 1 else m_rank[1]
        vs = _paired(per_round[pick], per_round[rival])  # all plans merged: the pick against itself
        verdict = "hit"
        if pick != m_rank[0]:
            if rival in tied and vs["within_noise"]:
                verdict = "tie (within noise)"
            else:  # outside a predicted tie a loss counts even within noise (shown for information)
                verdict = "miss (gap within noise)" if vs["within_noise"] else "miss (significant)"
        hit = not verdict.startswith("miss")
        hits += hit
        keys = list(pred)
        for i, a in enumerate(keys):
            for b in keys[i + 1 :]:
                pairs += 1
                if a in tied and b in tied:
                    pairs_ok += _paired(per_round[a], per_round[b])["within_noise"] or (meas[a] < meas[b]) == (
                        p_rank.index(a) < p_rank.index(b)
                    )
                else:
                    pairs_ok += (pred[a] < pred[b]) == (meas[a] < meas[b])
        noise = {p: statistics.median(abs(x - meas[p]) for x in v) for p, v in per_round.items()}
        out["cases"][str(n)] = {
            "merged": merged,
            "shards": {names[p]: nshards[p] for p in pred},
            "predicted_ms": {names[p]: pred[p] for p in pred},
            "predicted_tie": [names[p] for p in tied] if len(tied) > 1 else [],
            "measured_cpu_ms": {names[p]: meas[p] for p in pred},
            "round_mad_ms": {names[p]: noise[p] for p in pred},
            "predicted_ranking": [names[p] for p in p_rank],
            "measured_ranking": [names[p] for p in m_rank],
            "pick_vs_rival": {"rival": names[rival], **vs},
            "verdict": verdict,
            "fastest_picked": hit,
            "own_planner_ranking": [r["plan"] for r in own.extra["sharding"]["ranking"][str(n)]],
        }
        line = f"  {n} ranks: predicted {[names[p] for p in p_rank]} measured {[names[p] for p in m_rank]} -> {verdict}"
        if merged:
            line += f"; merged {merged}"
        if len(tied) > 1:
            line += f"; predicted tie {[names[p] for p in tied]} (picked {names[pick]})"
        lo, hi = vs["ci95_ms"]
        line += f"; {names[pick]}-{names[rival]} {vs['median_ms']:+.3f} ms, 95 % CI [{lo:+.3f}, {hi:+.3f}]"
        print(line, flush=True)
        print(
            "    " + ", ".join(f"{names[p]} {meas[p]:.2f} ms (pred {pred[p]:.3f}, MAD {noise[p]:.2f})" for p in m_rank)
        )
    out["fastest_picked_pct"] = 100 * hits / len(ranks)
    out["pairwise_order_pct"] = 100 * pairs_ok / pairs
    return out


def dp(ranks=(8, 64, 256, 1024)) -> dict:
    """Data-parallel what-if from one rank's trace (hta_trace_diff/control, rank 3 of 8)."""
    from engine.simulate import simulate

    f = SHARED / "hta_trace_diff" / "control.json.gz"
    if not f.exists():
        return {"skipped": f"{f} not found"}
    t0 = time.perf_counter()
    tr = _load(f)
    load_s = time.perf_counter() - t0
    out = {"trace": str(f.relative_to(ROOT.parent)), "load_s": load_s, "runs": {}}
    for n in ranks:
        t0 = time.perf_counter()
        r = simulate(tr, {"version": 1, "edits": [{"kind": "data_parallel", "ranks": n}]})
        wall = time.perf_counter() - t0
        out["runs"][str(n)] = {
            "predicted_iteration_ms": r.predicted_iteration_ms,
            "breakdown": r.breakdown,
            "dp": r.extra["dp"],
            "wall_s": wall,
            "tasks": r.graph.n_tasks,
        }
        print(f"  {n} ranks: {r.predicted_iteration_ms:.2f} ms in {wall:.2f} s", flush=True)
    return out


def costmodel() -> dict:
    """Held-out error of each cost family: microbenchmarks on this machine (every third size held
    out; thread CPU time, 1 thread; measurements cached) and the in-trace fits of the samples."""
    from engine.simulate import simulate
    from engine.simulate.calibrate import calibrate

    micro = calibrate("cpu", 1)
    in_trace = {}
    for model, _, edits in WHATIFS.values():
        if edits[0]["kind"] != "batch":
            continue
        r = simulate(_pair(SAMPLES / model, model), {"version": 1, "edits": edits})
        in_trace[model] = r.extra["cost_model"]
    return {"microbench": micro, "in_trace": in_trace}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="*", default=None)
    ap.add_argument("--rounds", type=int, default=3, help="fresh-capture rounds per what-if")
    ap.add_argument("--no-fresh", action="store_true", help="skip the wall-clock fresh-capture rounds")
    args = ap.parse_args(argv)
    sections = {
        "reproduction": reproduction,
        "whatif": lambda: whatif(args.rounds, fresh=not args.no_fresh),
        "speed": speed,
        "sharding": sharding,
        "dp": dp,
        "costmodel": costmodel,
    }
    results = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    for name, fn in sections.items():
        if args.only and name not in args.only:
            continue
        t0 = time.perf_counter()
        print(f"== {name}", flush=True)
        results[name] = fn()
        results[name + "_wall_s"] = round(time.perf_counter() - t0, 1)
        print(json.dumps(results[name], indent=1, default=str)[:4000], flush=True)
    import os
    import platform

    results["machine"] = {"cpu_count": os.cpu_count(), "platform": platform.platform(), "loadavg": os.getloadavg()}
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=1, default=str))
    print(f"wrote {RESULTS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
