"""Single-trace load: the store build of one big Kineto trace against the JSON-decode floor.

    python benchmarks/scale.py --only load [--quick]

Inputs: one shared real GPU trace with `ProfilerStep#N` spans (tracelens_mi300_resnet_ckpt)
tiled in time to 1M, 4M and 16M `traceEvents` items (quick: 200k, 400k) by
engine.testing.tiled.make_tiled (copies of the step window shifted by the step period, ids
offset per copy), written as plain JSON to the scratch folder and deleted after measuring. A
control row tiles param_resnet (no steps; light `args`, many flows: the case where decoding is
cheapest, so the ratio is hardest) at the smallest size.

Two measurements per size, each in a FRESH process (peak RSS = that child's VmHWM; its
ru_maxrss would report the parent's if larger, carried across fork+exec), timed inside the child
around the work only (imports excluded; wall and CPU seconds), best wall of `rounds` (floor and
load interleaved):

- floor: the least work any loader of this JSON must do. The file is read in
  `engine.trace.store.stream.BLOCK` blocks, the vectorised scan finds the end of every
  `traceEvents` item, and every run of items is decoded by msgspec into plain Python objects
  (dicts, lists, strings, numbers: every key of every item), then dropped. That is the fastest
  streaming decoder measured here (benchmarks/ingest_parsers.py: faster than ijson's C backend;
  orjson/simdjson need the whole document). Nothing is kept, converted or written.
- typed decode (a stricter control, reported beside): the same scan decoding each item into the
  store's own typed msgspec Structs (engine/trace/store/rows.py: only the kept fields), nothing
  else: the decode the load itself pays, so load / typed decode is the cost of everything else
  (hashing, columns, Parquet).
- load: `engine.trace.store.build(path, use_cache=False, scheduler="serial")`: hash the file (the
  store's content key), scan, decode, build the `events`/`flows` columns, write Parquet (zstd).

Targets at every size: load peak RSS <= 2 GiB, load wall <= 1.5x the floor's wall measured in the
same run. Both run with the default limits: a streamed file is bounded by the disk that receives
its store (safe_io.max_stream_bytes), not by a share of RAM.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from engine import envvars

ROOT = Path(__file__).resolve().parents[2]
SHARED = Path(envvars.get("MYSTIQUE_SHARED_TRACES") or ROOT.parent / "shared" / "traces")
TRACE = SHARED / "tracelens_mi300_resnet_ckpt" / "resnet_act_checkpoint.json.gz"
CONTROL = SHARED / "param_resnet" / "resnet_kineto.json.gz"
MAX_RSS_MIB = 2048
MAX_RATIO = 1.5

_CHILD = r"""
import json, sys, time
from pathlib import Path
mode, path = sys.argv[1], Path(sys.argv[2])
c0 = time.process_time()
if mode == "floor":
    from engine.trace import safe_io
    from engine.trace.store import stream
    c0, t0 = time.process_time(), time.perf_counter()
    items = 0
    for got in stream.scan(stream.iter_blocks(path, safe_io.max_stream_bytes()), str(path)):
        if isinstance(got, list):
            items += len(got)
        del got
    out = {"items": items}
elif mode == "typed":
    from engine.trace import safe_io
    from engine.trace.store import rows, stream
    c0, t0 = time.process_time(), time.perf_counter()
    items = 0
    for got in stream.scan(stream.iter_blocks(path, safe_io.max_stream_bytes()), str(path), rows.DECODER):
        if isinstance(got, list):
            items += len(got)
        del got
    out = {"items": items}
else:
    from engine.trace.store import build
    import engine.trace.store.ingest, engine.trace.store.rows  # imports outside the timed region
    c0, t0 = time.process_time(), time.perf_counter()
    store = build(path, use_cache=False, scheduler="serial")
    m = json.loads((store / "manifest.json").read_text())
    out = {"items": sum(s["events"] for s in m["sources"]), "rows": m["sources"][0]["rows"],
           "parquet_bytes": sum(p.stat().st_size for p in store.rglob("*.parquet"))}
wall, cpu = time.perf_counter() - t0, time.process_time() - c0
# VmHWM, not ru_maxrss: Linux carries a parent's high-water mark across fork+exec into ru_maxrss
hwm = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM:"))
out.update(wall_s=wall, cpu_s=cpu, peak_rss_mib=hwm / 1024)
print(json.dumps(out))
"""


def _child(mode: str, path: Path, cache: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MYSTIQUE_CACHE_DIR": str(cache)}
    r = subprocess.run(
        [sys.executable, "-c", _CHILD, mode, str(path)], capture_output=True, text=True, env=env, cwd=ROOT, check=False
    )
    if r.returncode:
        raise RuntimeError(f"{mode} child failed on {path.name}: {r.stderr.strip()[-500:]}")
    shutil.rmtree(cache, ignore_errors=True)  # the store of this build: not needed, and big
    return json.loads(r.stdout.strip().splitlines()[-1])


def _measure(source: Path, n: int, scratch: Path, rounds: int) -> dict:
    from engine.testing.tiled import make_tiled

    path = scratch / f"tiled_{n}.json"
    t0 = time.perf_counter()
    facts = make_tiled(source, path, n)
    gen_s = time.perf_counter() - t0
    runs: dict[str, list[dict]] = {"floor": [], "typed": [], "load": []}
    load0 = os.getloadavg()[0]
    try:
        for _ in range(rounds):
            for mode in ("floor", "typed", "load"):
                runs[mode].append(_child(mode, path, scratch / "cache"))
    finally:
        path.unlink(missing_ok=True)
    load1 = os.getloadavg()[0]
    best = {m: min(v, key=lambda r: r["wall_s"]) for m, v in runs.items()}
    assert best["floor"]["items"] == best["load"]["items"] == facts["items"], (best, facts)
    fl, ld, ty = best["floor"], best["load"], best["typed"]
    peak = max(r["peak_rss_mib"] for r in runs["load"])
    return {
        "source": os.path.relpath(source, SHARED),
        "items": facts["items"],
        "json_mib": round(facts["json_bytes"] / 2**20, 1),
        "copies": facts["copies"],
        "generate_s": round(gen_s, 1),
        "rows": ld["rows"],
        "parquet_mib": round(ld["parquet_bytes"] / 2**20, 1),
        "floor": {
            "wall_s": round(fl["wall_s"], 2),
            "cpu_s": round(fl["cpu_s"], 2),
            "peak_rss_mib": round(max(r["peak_rss_mib"] for r in runs["floor"])),
            "events_per_s": round(fl["items"] / fl["wall_s"]),
        },
        "load": {
            "wall_s": round(ld["wall_s"], 2),
            "cpu_s": round(ld["cpu_s"], 2),
            "peak_rss_mib": round(peak),
            "events_per_s": round(ld["items"] / ld["wall_s"]),
        },
        "typed_decode": {"wall_s": round(ty["wall_s"], 2), "cpu_s": round(ty["cpu_s"], 2)},
        "ratio_wall": round(ld["wall_s"] / fl["wall_s"], 2),
        "ratio_over_typed_decode": round(ld["wall_s"] / ty["wall_s"], 2),
        "ratio_cpu": round(ld["cpu_s"] / fl["cpu_s"], 2),
        "all_walls_s": {m: [round(r["wall_s"], 2) for r in v] for m, v in runs.items()},
        "load_average": [round(load0, 2), round(load1, 2)],
        "rss_ok": peak <= MAX_RSS_MIB,
        "ratio_ok": ld["wall_s"] <= MAX_RATIO * fl["wall_s"],
    }


def run(quick: bool, scratch: Path) -> dict:
    scratch.mkdir(parents=True, exist_ok=True)
    sizes = [200_000, 400_000] if quick else [1_000_000, 4_000_000, 16_000_000]
    rows = []
    for n in sizes:
        rows.append(_measure(TRACE, n, scratch, 2 if quick else 3 if n <= 4_000_000 else 1))
        print(f"  load {n:,}: {json.dumps({k: rows[-1][k] for k in ('floor', 'load', 'ratio_wall')})}", flush=True)
    control = _measure(CONTROL, sizes[0], scratch, 2 if quick else 3)
    every = [*rows, control]
    return {
        "sizes": rows,
        "control": control,
        "targets": {"peak_rss_mib_max": MAX_RSS_MIB, "load_over_floor_max": MAX_RATIO},
        "cpus": os.cpu_count(),
        "summary": {
            "items": [r["items"] for r in rows],
            "load_s": [r["load"]["wall_s"] for r in rows],
            "floor_s": [r["floor"]["wall_s"] for r in rows],
            "ratio": [r["ratio_wall"] for r in rows],
            "peak_rss_mib": [r["load"]["peak_rss_mib"] for r in rows],
            "ratio_over_typed_decode": [r["ratio_over_typed_decode"] for r in rows],
            "control_ratio": control["ratio_wall"],
            "rss_ok": all(r["rss_ok"] for r in every),
            "ratio_ok": all(r["ratio_ok"] for r in every),
        },
    }
