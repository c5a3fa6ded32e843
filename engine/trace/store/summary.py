"""`mystique info`'s objects (engine.trace.summary) of a trace read through its store.

Why: a trace over the whole-table budget (engine.trace.store.handle) must not be decoded whole
to be summarised. Every key is computed by DuckDB over the store's columns (counts, sums,
min/max) or from the manifest (sources, ranks, iterations), so memory does not grow with the
trace; names are classified once per distinct name, as the loader's path does. The objects
equal `summarize_sources(load(...))` key for key (tests/test_store_open.py), plus one warning
saying the trace was read through the store.
"""

from __future__ import annotations

import pandas as pd

from engine.trace.summary import _TOP, KEYS, _warnings, class_rows, declared

_HOST = ("cpu_op", "user_annotation")


def _where(src: int | None) -> str:
    return "" if src is None else f"WHERE src = {int(src)}"


def _and(src: int | None) -> str:
    return "" if src is None else f"AND src = {int(src)}"


def _steps(con, src: int | None) -> dict:
    """step_ms/step_source as engine.trace.summary._steps, from the rows that can be steps (host
    step names, user annotations) and two zero-length rows per rank at its extremes."""
    from engine.trace.steps import STEP_PREFIX, WINDOW, measured_steps

    cand = con.execute(
        "SELECT rank, cat, name, ts_us, dur_us FROM events WHERE (starts_with(name, ?) OR cat = 'user_annotation') "
        f"{_and(src)} ORDER BY ev",
        [STEP_PREFIX],
    ).df()
    ext = con.execute(
        f"SELECT rank, min(ts_us) AS lo, max(ts_us + dur_us) AS hi FROM events {_where(src)} GROUP BY rank"
    ).df()
    if not len(ext):
        return {"step_ms": None, "step_source": None}
    edges = pd.DataFrame(
        {
            "rank": pd.concat([ext["rank"], ext["rank"]], ignore_index=True),
            "cat": "",
            "name": "",
            "ts_us": pd.concat([ext["lo"], ext["hi"]], ignore_index=True),
            "dur_us": 0.0,
        }
    )
    ms = measured_steps(pd.concat([cand, edges], ignore_index=True))
    mean = None if ms.spans.empty or ms.step_source == WINDOW else float(ms.spans["dur_us"].mean()) / 1e3
    return {"step_ms": None if mean is None else round(mean, 6), "step_source": ms.step_source}


def _kernel_classes(con, src: int | None) -> list[dict]:
    from engine.trace.kernels import classify_kernel
    from engine.trace.vocab import GPU_CATS

    cats = ", ".join(f"'{c}'" for c in GPU_CATS)
    t = con.execute(
        f"SELECT name, cat, count(*) AS n, sum(dur_us) AS d FROM events WHERE cat IN ({cats}) {_and(src)} "
        "GROUP BY name, cat"
    ).df()
    if not len(t):
        return []
    t["class"] = [classify_kernel(str(n), str(c)).value for n, c in zip(t["name"], t["cat"], strict=True)]
    g = t.groupby("class", sort=False).agg(kernels=("n", "sum"), dur_us=("d", "sum")).reset_index()
    total = float(g["dur_us"].sum())
    g["share"] = g["dur_us"] / total if total > 0 else 0.0
    return class_rows(g.sort_values(["dur_us", "class"], ascending=[False, True]))


def _object(trace, con, src: dict | None) -> dict:
    from engine.trace.categories import categorize
    from engine.trace.model import CATEGORIES

    meta = trace.meta
    i = None if src is None else int(src["src"])
    if src is None and len(meta["sources"]) == 1:
        src = meta["sources"][0]
    ranks = [int(r) for r in con.execute(f"SELECT DISTINCT rank FROM events {_where(i)} ORDER BY rank").df()["rank"]]
    lo, hi, kernels, cpu_ops = con.execute(
        "SELECT min(ts_us), max(ts_us + dur_us), count(*) FILTER (cat = 'kernel'), count(*) FILTER (cat = 'cpu_op') "
        f"FROM events {_where(i)}"
    ).fetchone()
    host = con.execute(
        f"SELECT name, count(*) AS n FROM events WHERE cat IN {_HOST} {_and(i)} GROUP BY name ORDER BY name"
    ).df()
    by_cat: dict[str, int] = {}
    if len(host):
        cats = categorize(host["name"].astype("category"))
        counts = pd.Series(host["n"].to_numpy()).groupby(pd.Series(cats, dtype=str).to_numpy()).sum()
        by_cat = {c: int(counts.get(c, 0)) for c in CATEGORIES if int(counts.get(c, 0))}
    top = con.execute(
        "SELECT name, count(*) AS size, coalesce(sum(dur_us), 0) AS total, count(dur_us) AS has, min(ev) AS first "
        f"FROM events WHERE cat = 'cpu_op' {_and(i)} GROUP BY name ORDER BY total DESC, size DESC, first LIMIT {_TOP}"
    ).df()
    rank_decl, world = declared(src, ranks, meta)
    iters = [it for it in meta.get("iterations", []) if it.get("rank") in ranks]
    warnings = _warnings(meta, src) + [f"read through the trace store: {meta['whole_table']}"]
    obj = {
        "path": src["path"] if src else ", ".join(s["path"] for s in meta["sources"]),
        "kind": "kineto",
        "schema": "",
        "nodes": 0,
        "events": int(src.get("events", 0)) if src else int(meta.get("events", 0)),
        "rank": rank_decl,
        "ranks": ranks,
        "world_size": world,
        "link_rate": None,
        "ops_by_category": by_cat,
        "time_span_us": None if lo is None else round(float(hi) - float(lo), 3),
        "top_ops": [
            {
                "name": str(r["name"]),
                "count": int(r["size"]),
                "dur_us": round(float(r["total"]), 3) if r["has"] else None,
            }
            for _, r in top.iterrows()
        ],
        "kernels": int(kernels or 0),
        "kernel_classes": _kernel_classes(con, i),
        "cpu_ops": int(cpu_ops or 0),
        "iterations": iters if lo is not None else [],
        **_steps(con, i),
        "warnings": warnings,
        "resources": [],
    }
    assert tuple(obj) == KEYS
    return obj


def summarize_store(trace) -> dict:
    """The whole trace as one object (engine.trace.summary.summarize's keys)."""
    con = trace.connect()
    try:
        return _object(trace, con, None)
    finally:
        con.close()


def summarize_store_sources(trace) -> list[dict]:
    """One object per stored document, in input order (engine.trace.summary.summarize_sources)."""
    sources = trace.meta["sources"]
    if len(sources) <= 1:
        return [summarize_store(trace)]
    con = trace.connect()
    try:
        return [_object(trace, con, s) for s in sources]
    finally:
        con.close()


__all__ = ["summarize_store", "summarize_store_sources"]
