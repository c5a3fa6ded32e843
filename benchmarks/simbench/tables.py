"""README tables from benchmarks/results/simulate.json (`benchmarks/simulate.py --tables`), so the
README shows exactly what the benchmark measured."""

from __future__ import annotations


def _pct(x: float) -> str:
    return f"{x:+.2f} %"


def reproduction(r: dict) -> list[str]:
    out = ["| trace | ranks | tasks | measured ms | predicted ms | error |", "| --- | --- | --- | --- | --- | --- |"]
    for t in r["traces"]:
        out.append(
            f"| `{t['trace']}` | {len(t['ranks'])} | {t['tasks']:,} | {t['measured_ms']:.2f} | "
            f"{t['predicted_ms']:.2f} | {_pct(t['error_pct'])} |"
        )
    out.append("")
    out.append(
        f"mean |error| {r['mean_abs_error_pct']:.3f} %, max {r['max_abs_error_pct']:.3f} %. Excluded (no ProfilerStep "
        "span): " + ", ".join(f"`{x['trace']}`" for x in r["excluded"])
    )
    return out


def whatif(r: dict) -> list[str]:
    out = [
        "| what-if | predicted ratio | measured ratio, wall-clock | error (wall) | measured ratio, thread CPU "
        "| error (CPU) | load at rounds | fresh captures: error of predicted vs captured step |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name, e in r.items():
        m = e["measured"]
        fresh = e.get("fresh_captures", {}).get("rounds", [])
        out.append(
            f"| {name} | {e['predicted_ratio']:.3f} | {m['ratio_wall']:.3f} ({m['base_wall_ms']:.1f} → "
            f"{m['variant_wall_ms']:.1f} ms) | {_pct(e['error_pct_wall'])} | {m['ratio_cpu']:.3f} "
            f"({m['base_cpu_ms']:.1f} → {m['variant_cpu_ms']:.1f} ms) | {_pct(e['error_pct_cpu'])} | "
            + ", ".join(f"{x:.1f}" for x in m["loadavg_1m_at_rounds"])
            + " | "
            + ", ".join(f"{x['error_pct']:+.1f} % (load {x['loadavg_1m']:.1f})" for x in fresh)
            + " |"
        )
    return out


def sharding(r: dict) -> list[str]:
    out = [
        "| case | predicted ranking (ms, slowest rank) | measured ranking (thread CPU ms, slowest rank, median) "
        "| pick − fastest: median, 95 % CI (noise band) | verdict |",
        "| --- | --- | --- | --- | --- |",
    ]
    for name, c in r["cases"].items():
        pred = " < ".join(f"{p} {c['predicted_ms'][p]:.2f}" for p in c["predicted_ranking"])
        meas = " < ".join(f"{p} {c['measured_cpu_ms'][p]:.2f}" for p in c["measured_ranking"])
        v = c["pick_minus_fastest"]
        lo, hi = v["ci95_ms"]
        blo, bhi = c["noise_band_pct"]
        verdict = "hit" if c["strict_hit"] else "hit within noise" if c["hit_within_noise"] else "miss"
        gap = (
            "—"
            if c["pick"] == c["fastest"]
            else f"{c['pick']} − {c['fastest']}: {v['median_ms']:+.2f} ms [{lo:+.2f}, {hi:+.2f}] ({blo:+.1f} %, {bhi:+.1f} %)"
        )
        tie = f" (tie: {' = '.join(c['predicted_tie'])})" if c["predicted_tie"] else ""
        out.append(f"| {name} | {pred}{tie} | {meas} | {gap} | {verdict} |")
    out.append("")
    out.append(
        f"Fastest plan picked in {r['hit_within_noise_pct']:.0f} % of {r['n_cases']} cases within noise, "
        f"{r['strict_hit_pct']:.0f} % strictly; plan pairs ordered correctly {r['pairwise_order_pct']:.0f} %; "
        f"{r['rounds']} interleaved rounds per case."
    )
    return out


def speed(r: dict) -> list[str]:
    out = [
        "| trace | events | tasks | graph build ms | schedule ms | tasks/s end to end (build + schedule) "
        "| tasks/s scheduler alone | `simulate()` tasks_per_s | load |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name, s in r.items():
        out.append(
            f"| `{name}` | {s['events']:,} | {s['tasks']:,} | {s['build_s_median'] * 1e3:.1f} | "
            f"{s['schedule_s_median'] * 1e3:.1f} | {s['tasks_per_s_build_and_schedule'] / 1e6:.2f} M | "
            f"{s['tasks_per_s_schedule'] / 1e6:.2f} M | {s['simulate_api_tasks_per_s_median'] / 1e6:.2f} M | "
            f"{s['loadavg_1m']:.1f} |"
        )
    return out


def dp(r: dict) -> list[str]:
    out = [
        "| DP ranks | predicted ms | communication ms | exposed comm ms | wall s |",
        "| --- | --- | --- | --- | --- |",
    ]
    for n, x in r.get("runs", {}).items():
        b = x["breakdown"]
        out.append(
            f"| {n} | {x['predicted_iteration_ms']:.2f} | {b['communication']:.2f} | "
            f"{b['exposed_communication']:.2f} | {x['wall_s']:.2f} |"
        )
    return out


def costmodel(r: dict) -> list[str]:
    m = r["microbench"]
    parts = [f"{k} {v['heldout_err_pct']:.1f} %" for k, v in m["curves"].items() if v.get("heldout_err_pct")]
    parts += [f"{k} {v['heldout_err_pct']:.1f} %" for k, v in m["embedding"].items() if v.get("heldout_err_pct")]
    return ["Held-out error (microbenchmarks, every third shape held out): " + ", ".join(parts)]


SECTIONS = {"reproduction": reproduction, "whatif": whatif, "sharding": sharding, "speed": speed, "dp": dp}
SECTIONS["costmodel"] = costmodel


def render(results: dict) -> str:
    out = []
    for name, fn in SECTIONS.items():
        if name in results:
            out += [f"#### {name}", "", *fn(results[name]), ""]
    return "\n".join(out)
