"""A fleet of rank traces from one real Kineto trace: copies with per-rank perturbed durations.

Why: issue 22's scale checks (tests/test_fanout.py, benchmarks/scale.py) need many ranks
built from a real GPU trace, and no two ranks may be identical (a per-rank bug would hide).
Each copy declares its rank in `distributedInfo` and in its file name; every event's `dur` is
scaled by a factor in [0.95, 1.05] that depends on the rank and the event's position.
"""

from __future__ import annotations

import gzip
from pathlib import Path

import orjson

from engine.trace.vocab import STEP_PREFIX


def make_fleet(source: Path, out_dir: Path, n_ranks: int) -> list[Path]:
    """Write `rank<r>_kineto.json` for r in range(n_ranks) under `out_dir`; their paths."""
    raw = Path(source).read_bytes()
    doc = orjson.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
    events = doc.get("traceEvents", [])
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for r in range(n_ranks):
        evs = []
        for i, ev in enumerate(events):
            if isinstance(ev, dict) and isinstance(ev.get("dur"), (int, float)):
                ev = {**ev, "dur": round(ev["dur"] * (0.95 + 0.1 * ((r * 7919 + i * 31) % 101) / 100), 3)}
            evs.append(ev)
        info = {**(doc.get("distributedInfo") or {}), "rank": r, "world_size": n_ranks}
        p = out_dir / f"rank{r}_kineto.json"
        p.write_bytes(orjson.dumps({**doc, "distributedInfo": info, "traceEvents": evs}))
        paths.append(p)
    return paths


# ---- a fleet written straight into a trace store (issue 22's 32-512 rank checks) ----

STEP = STEP_PREFIX


def make_fleet_store(source: Path, n_ranks: int, out_dir: Path, seed: int = 0, *, tiles: int = 1) -> Path:
    """A trace store of `n_ranks` copies of `source` (one Kineto rank), written as Parquet directly.

    Why not `make_fleet` + ingestion: 512 ranks of ~200k events are ~100 GB of JSON and an hour
    of parsing; here the source is ingested once (engine.trace.store.build) and each rank is
    the same Arrow table with new `ts_us`/`dur_us` columns, so a rank costs one Parquet write.
    `tiles` repeats the source's span that many times in time (correlation, external and flow
    ids offset per tile, `ProfilerStep#N` renumbered), to reach ~200k events from a ~75k one.
    Per rank and event, `dur_us` is scaled by a factor in [0.95, 1.05] drawn from
    (seed, rank), so no two ranks are identical. Communication kernels keep their end time (their
    start moves): in a real job the members of a collective end together and the early ones wait,
    which is what the simulator's matching checks (engine/simulate/collectives.py).
    Layout and manifest as engine/trace/store/ingest.py writes them (docs/store.md), under
    `out_dir` (created; must be empty or absent); returns `out_dir`.
    """
    import json

    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    from engine.trace.store import build
    from engine.trace.vocab import GPU_CATS, is_backend_comm, is_comm

    out_dir = Path(out_dir)
    if out_dir.exists() and any(out_dir.iterdir()):
        raise FileExistsError(f"{out_dir} is not empty")
    base = build(Path(source), scheduler="serial")
    manifest = json.loads((base / "manifest.json").read_text())
    src0 = manifest["sources"][0]
    rec_path = base / "events" / f"rank={src0['rank']}" / "src=0" / "part.parquet"
    ev1 = pq.read_table(rec_path)
    span = _span(ev1)
    ev = _tile_events(ev1, tiles, span)
    fl = _tile_flows(pq.read_table(base / "flows" / f"rank={src0['rank']}" / "src=0" / "part.parquet"), tiles, span)
    iters = _tile_iters(src0.get("iterations") or [], tiles, span)
    names = ev.column("name").combine_chunks().dictionary_encode()
    cats = ev.column("cat").combine_chunks().dictionary_encode()
    # the transfer of a collective (engine.simulate.collectives.comm_mask): a communication GPU
    # task, or a backend op (gloo:/nccl:) on the host
    dev_comm = np.array([is_comm(str(s)) for s in names.dictionary.to_pylist()], bool)
    host_comm = np.array([is_backend_comm(str(s)) for s in names.dictionary.to_pylist()], bool)
    gpu_cat = np.array([str(s) in GPU_CATS for s in cats.dictionary.to_pylist()], bool)
    ni = names.indices.to_numpy(zero_copy_only=False)
    gi = gpu_cat[cats.indices.to_numpy(zero_copy_only=False)]
    comm = (dev_comm[ni] & gi) | (host_comm[ni] & ~gi)
    ts = ev.column("ts_us").to_numpy()
    dur = ev.column("dur_us").to_numpy()
    end = ts + dur
    i_ts, i_dur = ev.schema.get_field_index("ts_us"), ev.schema.get_field_index("dur_us")
    sources = []
    ev0 = 0
    for r in range(n_ranks):
        f = np.random.default_rng([seed, r]).uniform(0.95, 1.05, len(dur))
        d = dur * f
        t = np.where(comm, end - d, ts)
        tab = ev.set_column(i_dur, "dur_us", pa.array(d)).set_column(i_ts, "ts_us", pa.array(t))
        for name, table in (("events", tab), ("flows", fl)):
            part = out_dir / name / f"rank={r}" / f"src={r}" / "part.parquet"
            part.parent.mkdir(parents=True, exist_ok=True)
            pq.write_table(table, part, compression="zstd")
        sources.append(
            {
                **src0,
                "src": r,
                "ev0": ev0,
                "path": f"{source}#fleet-rank{r}",
                "rank": r,
                "rank_in_file": r,
                "world_size": n_ranks,
                "events": src0["events"] * tiles,
                "rows": {"events": tab.num_rows, "flows": fl.num_rows},
                "iterations": [{**it, "rank": r} for it in iters],
            }
        )
        ev0 += tab.num_rows
    doc = {
        "store_version": manifest["store_version"],
        "content_hash": f"fleet:{manifest['content_hash']}:{n_ranks}:{seed}:{tiles}",
        "sources": sources,
        "skipped": [],
        "fleet": {"source": str(source), "ranks": n_ranks, "seed": seed, "tiles": tiles},
    }
    (out_dir / "manifest.json").write_text(json.dumps(doc, default=str))
    return out_dir


def _span(ev) -> float:
    import numpy as np

    ts = ev.column("ts_us").to_numpy()
    end = ts + ev.column("dur_us").to_numpy()
    return float(np.ceil(np.nanmax(end) - np.nanmin(ts))) + 1.0 if len(ts) else 0.0


def _offset_int(col, k: int):
    """An integer column with `k * (max + 1)` added to every present value (ids unique per tile)."""
    import pyarrow.compute as pc

    top = pc.max(col).as_py()
    return col if top is None or k == 0 else pc.add(col, (top + 1) * k)


def _tile_events(ev, tiles: int, span: float):
    """The events table repeated `tiles` times, each copy shifted by the source's span."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if tiles <= 1:
        return ev
    names = ev.column("name").combine_chunks().dictionary_encode()
    steps = [s for s in names.dictionary.to_pylist() if s and s.startswith(STEP) and s[len(STEP) :].isdigit()]
    nums = [int(s[len(STEP) :]) for s in steps]
    width = (max(nums) - min(nums) + 1) if nums else 0
    parts = []
    for k in range(tiles):
        cols = {}
        for field in ev.schema:
            c = ev.column(field.name)
            if field.name == "ts_us":
                c = pc.add(c, span * k)
            elif field.name in ("correlation", "external_id"):
                c = _offset_int(c, k)
            elif field.name == "ev":
                c = pc.add(c, ev.num_rows * k)
            elif field.name == "name" and width and k:
                new = [
                    f"{STEP}{int(s[len(STEP) :]) + width * k}" if s in steps else s
                    for s in names.dictionary.to_pylist()
                ]
                c = pa.DictionaryArray.from_arrays(names.indices, pa.array(new, pa.string())).cast(pa.string())
            cols[field.name] = c
        parts.append(pa.table(cols, schema=ev.schema))
    return pa.concat_tables(parts).combine_chunks()


def _tile_flows(fl, tiles: int, span: float):
    import pyarrow as pa
    import pyarrow.compute as pc

    if tiles <= 1:
        return fl
    parts = []
    for k in range(tiles):
        cols = {f.name: fl.column(f.name) for f in fl.schema}
        cols["ts_us"] = pc.add(cols["ts_us"], span * k)
        cols["id"] = _offset_int(cols["id"], k)
        parts.append(pa.table(cols, schema=fl.schema))
    return pa.concat_tables(parts).combine_chunks()


def _tile_iters(iters: list[dict], tiles: int, span: float) -> list[dict]:
    nums = [int(it["name"][len(STEP) :]) for it in iters if str(it.get("name", ""))[len(STEP) :].isdigit()]
    width = (max(nums) - min(nums) + 1) if nums else 0
    out = []
    for k in range(max(1, tiles)):
        for it in iters:
            name = str(it["name"])
            if k and width and name[len(STEP) :].isdigit():
                name = f"{STEP}{int(name[len(STEP) :]) + width * k}"
            out.append({**it, "name": name, "ts_us": it["ts_us"] + span * k})
    return out


PLANTED_MIXES: dict[str, dict[str, float]] = {
    "llm_train": {"gemm": 0.5, "attention": 0.2, "memory": 0.15, "all_reduce": 0.1, "idle": 0.05},
    "cnn_train": {"conv": 0.6, "memory": 0.25, "gemm": 0.05, "host": 0.1},
    "recsys": {"embedding": 0.35, "all_to_all": 0.25, "gemm": 0.2, "memory": 0.1, "host": 0.1},
    "host_bound_infer": {"gemm": 0.15, "memory": 0.1, "host": 0.6, "idle": 0.15},
    "comm_bound": {"all_reduce": 0.45, "gemm": 0.25, "memory": 0.1, "idle": 0.2},
}
"""Planted time mixes of a synthetic job fleet (`planted_fleet`): the groups a suite must find."""
_KERNEL_OF = {
    "gemm": "volta_sgemm_128x64_nn",
    "conv": "void implicit_convolve_sgemm<float, float, 128, 6, 7, 3, 3, 5, 1, false, true, true>",
    "attention": "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128, 128, 4>>",
    "memory": "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>",
    "embedding": "void split_embedding_codegen_forward_unweighted_kernel<float, float, float, long, 5ul>",
    "all_reduce": "ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)",
    "all_to_all": "ncclDevKernel_SendRecv_AllToAll(ncclDevKernelArgsStorage<4096ul>)",
}


def planted_fleet(
    out_dir: Path, n_jobs: int, *, seed: int = 0, steps: int = 3, step_us: float = 10_000.0, kernel_us: float = 50.0
) -> list[tuple[Path, str]]:
    """`n_jobs` small GPU Kineto traces under `out_dir`, each drawn from one of `PLANTED_MIXES`
    (round robin) with Dirichlet noise: (path, planted group) per job. Each step is a
    `ProfilerStep#N` span holding runs of kernels of each class (launched by a cpu_op and a
    cudaLaunchKernel), host-only work (`host`: a cpu_op while the GPU idles) and gaps (`idle`)."""
    import random

    import numpy as np

    rng = np.random.default_rng(seed)
    shuffle = random.Random(seed)
    out_dir.mkdir(parents=True, exist_ok=True)
    groups = list(PLANTED_MIXES)
    jobs = []
    for j in range(n_jobs):
        group = groups[j % len(groups)]
        mix = PLANTED_MIXES[group]
        keys = list(mix)
        share = rng.dirichlet([300.0 * mix[k] for k in keys])
        evs: list[dict] = [
            {"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": "python"}},
            {"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": "main"}},
        ]
        t, corr = 0.0, 0
        for s in range(steps):
            start = t
            parts = list(zip(keys, share))
            shuffle.shuffle(parts)
            for key, sh in parts:
                span = float(sh) * step_us
                if key == "idle":
                    t += span
                    continue
                if key == "host":
                    evs.append(
                        {"ph": "X", "cat": "cpu_op", "name": "aten::to", "pid": 1, "tid": 1, "ts": t, "dur": span}
                    )
                    t += span
                    continue
                n = max(1, round(span / kernel_us))
                d = span / n
                for _ in range(n):
                    corr += 1
                    evs.append(
                        {"ph": "X", "cat": "cpu_op", "name": "aten::op", "pid": 1, "tid": 1, "ts": t, "dur": 2.0}
                    )
                    evs.append(
                        {
                            "ph": "X",
                            "cat": "cuda_runtime",
                            "name": "cudaLaunchKernel",
                            "pid": 1,
                            "tid": 1,
                            "ts": t + 0.5,
                            "dur": 1.0,
                            "args": {"correlation": corr},
                        }
                    )
                    evs.append(
                        {
                            "ph": "X",
                            "cat": "kernel",
                            "name": _KERNEL_OF[key],
                            "pid": 0,
                            "tid": 7,
                            "ts": t,
                            "dur": d,
                            "args": {"device": 0, "stream": 7, "correlation": corr},
                        }
                    )
                    t += d
            evs.append(
                {
                    "ph": "X",
                    "cat": "user_annotation",
                    "name": f"{STEP}{s}",
                    "pid": 1,
                    "tid": 1,
                    "ts": start,
                    "dur": t - start,
                }
            )
        path = out_dir / f"job{j:04d}_{group}.json"
        path.write_bytes(orjson.dumps({"traceEvents": evs, "deviceProperties": [{"id": 0, "name": "Synthetic GPU"}]}))
        jobs.append((path, group))
    return jobs
