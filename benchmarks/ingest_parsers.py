"""Which JSON parser streams a big Kineto trace fastest in bounded memory (issue 22)?

    python benchmarks/ingest_parsers.py [--tile 5] [--trace PATH] [--out benchmarks/results/ingest_parsers.json]

Builds one big Kineto file by tiling a shared real trace in time (each copy's timestamps shifted
past the previous copy's end), then runs each candidate once in a fresh process (its own peak
RSS, `ru_maxrss`) over the uncompressed file and the gzip file:

- `orjson_whole`: today's loader's decode: the whole document at once (the JSON-decode floor;
  memory grows with the file);
- `simdjson_whole`: pysimdjson's parser; it needs the whole document in memory too (its
  bindings have no streaming mode), items converted to dicts;
- `ijson_yajl2_c`: ijson's C backend, `items(f, "traceEvents.item")`: a true stream;
- `msgspec_chunked` / `orjson_chunked`: engine.trace.store.stream's block scan (numpy finds where
  items end) with each run of complete items decoded by msgspec / orjson;
- `store_build`: the whole store ingestion (msgspec_chunked + parse_kineto + Parquet);
- `loader_today`: `engine.trace.load(..., use_cache=False)`, for reference.

Each candidate counts the "X" events it saw; they must agree. The candidates run in interleaved
rounds (`--repeat`, default 3) and the medians are reported: the machine is shared, so a change
of load during the run hits every candidate alike; the load average is recorded beside them.
"""

from __future__ import annotations

import argparse
import gc
import gzip
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

from engine import envvars

if TYPE_CHECKING:
    from benchmarks.report import num, table

ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(envvars.get("MYSTIQUE_SHARED_TRACES") or ROOT.parent / "shared" / "traces")
DEFAULT_TRACE = SHARED / "param_resnet" / "resnet_kineto.json.gz"
CANDIDATES = (
    "orjson_whole",
    "simdjson_whole",
    "ijson_yajl2_c",
    "msgspec_chunked",
    "orjson_chunked",
    "store_build",
    "loader_today",
)


def _count_x(items) -> int:
    return sum(1 for e in items if type(e) is dict and e.get("ph") == "X")


def _raw(path: Path) -> bytes:
    data = path.read_bytes()
    return gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data


def _prepare(name: str):
    """Import what the candidate needs (not timed: every candidate pays its imports once per
    process, and pandas/pyarrow would dwarf the parse of a small file)."""
    if name in ("orjson_whole", "orjson_chunked"):
        import orjson  # noqa: F401
    if name == "simdjson_whole":
        import simdjson  # noqa: F401
    if name == "ijson_yajl2_c":
        import ijson

        ijson.get_backend("yajl2_c")
    if name in ("msgspec_chunked", "orjson_chunked"):
        from engine.trace.store import stream  # noqa: F401
    if name == "store_build":
        import duckdb  # noqa: F401

        from engine.trace.store import ingest, sql  # noqa: F401
    if name == "loader_today":
        from engine.trace import loader  # noqa: F401


def run_one(name: str, path: Path) -> dict:
    """One candidate over one file, in this process."""
    _prepare(name)
    # The cyclic GC off for every candidate, as the loader and the store do while building: it
    # rescans the millions of fresh event dicts (measured: 1.85 s -> 1.36 s on one chunked run).
    gc.disable()
    base_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    t0 = time.perf_counter()
    if name == "orjson_whole":
        import orjson

        n = _count_x(orjson.loads(_raw(path))["traceEvents"])
    elif name == "simdjson_whole":
        import simdjson

        doc = simdjson.Parser().parse(_raw(path))
        n = _count_x(e.as_dict() if isinstance(e, simdjson.Object) else e for e in doc["traceEvents"])
    elif name == "ijson_yajl2_c":
        import ijson

        backend = ijson.get_backend("yajl2_c")
        opener = gzip.open if path.name.endswith(".gz") else open
        with opener(path, "rb") as fh:
            n = _count_x(backend.items(fh, "traceEvents.item", use_float=True))
    elif name in ("msgspec_chunked", "orjson_chunked"):
        from engine.trace.store import stream

        if name == "orjson_chunked":
            import orjson

            def dec(self, chunk: bytes) -> list:
                return orjson.loads(b"[" + chunk.strip(b", \t\r\n") + b"]")

            stream.KinetoScanner._decode = dec  # type: ignore[method-assign]
        n = 0
        for got in stream.scan(stream.iter_blocks(path), str(path)):
            if not isinstance(got, dict):
                n += _count_x(got)
    elif name == "store_build":
        from engine.trace.store import build, query

        build(path, use_cache=False)
        n = int(query(path, "SELECT count(*) AS n FROM events")["n"][0])
    elif name == "loader_today":
        from engine.trace import load

        n = len(load(path, use_cache=False).events)
    else:
        raise SystemExit(f"unknown candidate {name}")
    wall = time.perf_counter() - t0
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {
        "wall_s": round(wall, 3),
        "peak_rss_mb": round(rss_mb, 1),
        "rss_after_imports_mb": round(base_mb, 1),
        "x_events": n,
    }


def tile(src: Path, copies: int, out: Path) -> dict:
    """A Kineto file holding `copies` copies of `src`'s events, each shifted past the previous."""
    import orjson

    doc = orjson.loads(_raw(src))
    evs = doc["traceEvents"]
    ts = [e["ts"] for e in evs if isinstance(e, dict) and isinstance(e.get("ts"), (int, float))]
    ends = [e["ts"] + (e.get("dur") or 0) for e in evs if isinstance(e, dict) and isinstance(e.get("ts"), (int, float))]
    span = max(ends) - min(ts) + 1000
    tiled = []
    for k in range(copies):
        for e in evs:
            if isinstance(e, dict) and isinstance(e.get("ts"), (int, float)) and k:
                e = {**e, "ts": e["ts"] + k * span}
            tiled.append(e)
    doc["traceEvents"] = tiled
    out.write_bytes(orjson.dumps(doc))
    gz = out.with_suffix(".json.gz")
    with open(out, "rb") as fi, gzip.open(gz, "wb", compresslevel=3) as fo:
        while chunk := fi.read(1 << 24):
            fo.write(chunk)
    return {"source": str(src.relative_to(SHARED.parent)) if SHARED.parent in src.parents else str(src),
            "copies": copies, "items": len(tiled), "json_bytes": out.stat().st_size, "gzip_bytes": gz.stat().st_size}  # fmt: skip


def _medians(runs: list[dict]) -> list[dict]:
    """One row per (candidate, input): the median wall time and peak RSS over the rounds."""
    import statistics

    out = []
    keys = dict.fromkeys((r["candidate"], r["input"]) for r in runs)
    for cand, fmt in keys:
        rs = [r for r in runs if r["candidate"] == cand and r["input"] == fmt]
        ok = [r for r in rs if "wall_s" in r]
        if not ok:
            out.append({"candidate": cand, "input": fmt, "error": rs[0].get("error", "?")})
            continue
        out.append(
            {
                "candidate": cand,
                "input": fmt,
                "wall_s": round(statistics.median(r["wall_s"] for r in ok), 3),
                "wall_s_runs": [r["wall_s"] for r in ok],
                "peak_rss_mb": round(statistics.median(r["peak_rss_mb"] for r in ok), 1),
                "rss_after_imports_mb": round(statistics.median(r["rss_after_imports_mb"] for r in ok), 1),
                "x_events": ok[0]["x_events"],
            }
        )
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tile", type=int, default=5)
    ap.add_argument("--trace", type=Path, default=DEFAULT_TRACE)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "ingest_parsers.json")
    ap.add_argument("--repeat", type=int, default=3, help="interleaved rounds; medians are reported")
    ap.add_argument("--candidates", nargs="+", default=list(CANDIDATES), choices=CANDIDATES)
    ap.add_argument("--tile-into", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--one", nargs=2, metavar=("CANDIDATE", "FILE"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        print(json.dumps(run_one(args.one[0], Path(args.one[1]))))
        return 0
    if args.tile_into:
        print(json.dumps(tile(args.trace, args.tile, args.tile_into)))
        return 0
    with tempfile.TemporaryDirectory(prefix="ingest-bench-") as tmp:
        big = Path(tmp) / "tiled_kineto.json"
        # Tiled in a child: a child's ru_maxrss starts at its parent's peak (Linux keeps it
        # across fork and exec), so this process must never hold the tiled document.
        made = subprocess.run(
            [sys.executable, __file__, "--trace", str(args.trace), "--tile", str(args.tile), "--tile-into", str(big)],
            capture_output=True,
            text=True,
            check=True,
        )
        info = json.loads(made.stdout.strip().splitlines()[-1])
        env = {**os.environ, "PYTHONPATH": str(ROOT), "MYSTIQUE_CACHE_DIR": str(Path(tmp) / "cache")}
        runs = []
        # Rounds interleave the candidates, so a change of the machine's load hits all of them.
        for rnd in range(args.repeat):
            for fmt, f in (("json", big), ("gzip", big.with_suffix(".json.gz"))):
                for name in args.candidates:
                    r = subprocess.run(
                        [sys.executable, __file__, "--one", name, str(f)], capture_output=True, text=True, env=env
                    )
                    row = {"candidate": name, "input": fmt, "round": rnd}
                    if r.returncode:
                        row["error"] = (r.stderr.strip().splitlines() or ["?"])[-1][:200]
                    else:
                        row.update(json.loads(r.stdout.strip().splitlines()[-1]))
                    print(json.dumps(row), file=sys.stderr)
                    runs.append(row)
    runs = _medians(runs)
    counts = {r["x_events"] for r in runs if "x_events" in r}
    streaming = [
        r for r in runs if r["candidate"] in ("ijson_yajl2_c", "msgspec_chunked", "orjson_chunked") and "wall_s" in r
    ]
    best = min(streaming, key=lambda r: (r["wall_s"], r["peak_rss_mb"]))["candidate"] if streaming else None
    result = {
        "input": info,
        "load_average": os.getloadavg()[0],
        "cpus": os.cpu_count(),
        "x_events_agree": len(counts) == 1,
        "winner_streaming": best,
        "runs": runs,
    }
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "runs"}, indent=1))
    return 0


# -- its section of docs/figures.md, beside the code that writes its results. benchmarks/report.py
# runs `docs_section` (and the `_docs_*` helpers) on the results file without importing this file
# (so the report stays standard-library only), giving it the formatters named below.
def docs_section(d: dict) -> list[str]:
    """One big Kineto file built by tiling a shared real trace in time; each candidate runs in a
    fresh process, in interleaved rounds (medians; wall time after imports, cyclic GC off; peak RSS
    is the process's `ru_maxrss`, growth is peak minus RSS after imports), over the plain and the
    gzip file. `*_whole` parse the whole document (memory grows with the file); ijson and the
    `*_chunked` scans stream (memory bounded by one block)."""
    rows = [
        [
            r["candidate"],
            r["input"],
            num(r.get("wall_s"), 2),
            num(r.get("peak_rss_mb"), 0),
            num(r["peak_rss_mb"] - r["rss_after_imports_mb"], 0) if "peak_rss_mb" in r else "-",
            num(r.get("x_events")) if "x_events" in r else r.get("error", "-"),
        ]
        for r in d["runs"]
    ]
    i = d["input"]
    return table(["candidate", "input", "wall s", "peak RSS MiB", "RSS growth MiB", "X events"], rows) + [
        f"Input: {i['copies']} copies of `{i['source']}`: {i['items']:,} items, {i['json_bytes'] / 2**20:.0f} MiB JSON, "
        f"{i['gzip_bytes'] / 2**20:.0f} MiB gzip; load average {d['load_average']:.1f} on {d['cpus']} CPUs. "
        f"Fastest bounded-memory streamer: `{d['winner_streaming']}`.",
        "",
    ]


if __name__ == "__main__":
    sys.exit(main())
