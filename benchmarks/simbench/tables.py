"""README tables from benchmarks/results/simulate.json (`benchmarks/simulate.py --tables`), so the
README shows exactly what the benchmark measured."""

from __future__ import annotations

from collections.abc import Iterable


def _pct(x: float) -> str:
    return f"{x:+.2f} %"


def _table(head: str, rows: Iterable[Iterable[str]]) -> list[str]:
    """Markdown table lines: the header (written as its cells joined by " | "), its separator,
    one line per row of cells."""
    n = len(head.split(" | "))
    return [f"| {head} |", _line(["---"] * n), *(_line(r) for r in rows)]


def _line(cells: Iterable[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def reproduction(r: dict) -> list[str]:
    head = "trace | ranks | tasks | measured ms | predicted ms | error"
    rows = (
        (
            f"`{t['trace']}`",
            str(len(t["ranks"])),
            f"{t['tasks']:,}",
            f"{t['measured_ms']:.2f}",
            f"{t['predicted_ms']:.2f}",
            _pct(t["error_pct"]),
        )
        for t in r["traces"]
    )
    return [
        *_table(head, rows),
        "",
        f"mean |error| {r['mean_abs_error_pct']:.3f} %, max {r['max_abs_error_pct']:.3f} %. Excluded (no ProfilerStep "
        "span): " + ", ".join(f"`{x['trace']}`" for x in r["excluded"]),
    ]


def _whatif_row(name: str, e: dict) -> tuple[str, ...]:
    m = e["measured"]
    fresh = e.get("fresh_captures", {}).get("rounds", [])
    return (
        name,
        f"{e['predicted_ratio']:.3f}",
        f"{m['ratio_wall']:.3f} ({m['base_wall_ms']:.1f} → {m['variant_wall_ms']:.1f} ms)",
        _pct(e["error_pct_wall"]),
        f"{m['ratio_cpu']:.3f} ({m['base_cpu_ms']:.1f} → {m['variant_cpu_ms']:.1f} ms)",
        _pct(e["error_pct_cpu"]),
        ", ".join(f"{x:.1f}" for x in m["loadavg_1m_at_rounds"]),
        ", ".join(f"{x['error_pct']:+.1f} % (load {x['loadavg_1m']:.1f})" for x in fresh),
    )


def whatif(r: dict) -> list[str]:
    head = (
        "what-if | predicted ratio | measured ratio, wall-clock | error (wall) | "
        "measured ratio, thread CPU | error (CPU) | load at rounds | "
        "fresh captures: error of predicted vs captured step"
    )
    return _table(head, (_whatif_row(name, e) for name, e in r.items()))


def _sharding_row(name: str, c: dict) -> tuple[str, ...]:
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
    return (name, f"{pred}{tie}", meas, gap, verdict)


def sharding(r: dict) -> list[str]:
    head = (
        "case | predicted ranking (ms, slowest rank) | "
        "measured ranking (thread CPU ms, slowest rank, median) | "
        "pick − fastest: median, 95 % CI (noise band) | verdict"
    )
    return [
        *_table(head, (_sharding_row(name, c) for name, c in r["cases"].items())),
        "",
        f"Fastest plan picked in {r['hit_within_noise_pct']:.0f} % of {r['n_cases']} cases within noise, "
        f"{r['strict_hit_pct']:.0f} % strictly; plan pairs ordered correctly {r['pairwise_order_pct']:.0f} %; "
        f"{r['rounds']} interleaved rounds per case.",
    ]


def speed(r: dict) -> list[str]:
    head = (
        "trace | events | tasks | graph build ms | schedule ms | "
        "tasks/s end to end (build + schedule) | tasks/s scheduler alone | `simulate()` tasks_per_s | "
        "load"
    )
    rows = (
        (
            f"`{name}`",
            f"{s['events']:,}",
            f"{s['tasks']:,}",
            f"{s['build_s_median'] * 1e3:.1f}",
            f"{s['schedule_s_median'] * 1e3:.1f}",
            f"{s['tasks_per_s_build_and_schedule'] / 1e6:.2f} M",
            f"{s['tasks_per_s_schedule'] / 1e6:.2f} M",
            f"{s['simulate_api_tasks_per_s_median'] / 1e6:.2f} M",
            f"{s['loadavg_1m']:.1f}",
        )
        for name, s in r.items()
    )
    return _table(head, rows)


def dp(r: dict) -> list[str]:
    head = "DP ranks | predicted ms | communication ms | exposed comm ms | wall s"
    rows = (
        (
            str(n),
            f"{x['predicted_iteration_ms']:.2f}",
            f"{x['breakdown'].get('communication_ms', x['breakdown'].get('communication', 0)):.2f}",
            f"{x['breakdown'].get('exposed_communication_ms', x['breakdown'].get('exposed_communication', 0)):.2f}",
            f"{x['wall_s']:.2f}",
        )
        for n, x in r.get("runs", {}).items()
    )
    return _table(head, rows)


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
