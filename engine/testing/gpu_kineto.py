"""GPU-shaped Kineto traces made from the project's own CPU captures, with the truth beside them.

Why: the suite must exercise everything a CUDA trace carries (runtime calls, kernels on several
streams, correlation ids, `ac2g` flows, memcpy/memset, `cuda_sync` events, cudaEventRecord /
cudaStreamWaitEvent pairs, several ranks, `External id`-only linking) on a machine with no GPU
and without the real traces in ../shared. `gpuify` takes a Kineto document captured by
`engine.capture` (host ops only) and adds the device side a CUDA run would have recorded: each
leaf host op that does work launches one kernel (memcpy for copies, memset for fills, an NCCL
kernel for collectives) from inside its own time span, kernels queue per stream in launch
order, every second kernel on the second stream is followed by an event record on it and a wait
on the first stream, and the step ends with a device synchronize. The ET is left as captured,
so ET <-> Kineto linking is the real one.

`GpuTruth` is what was added, counted by the generator itself (never by the loader under
test): tests compare the loader's tables with it.

Layout of what is written (`write_gpu_run`): `<out>/<name>_et.json.gz` (the capture's ET,
copied) and `<out>/<name>_kineto.json.gz` per rank; with several ranks `<name>` carries
`_rank<r>` so `engine.trace.load(out)` reads the folder as one multi-rank run.
"""

from __future__ import annotations

import copy
import gzip
import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# Host ops that launch no device work (views, metadata, allocation, autograd bookkeeping).
NO_WORK = frozenset(
    """aten::view aten::_unsafe_view aten::reshape aten::t aten::transpose aten::permute aten::expand
aten::as_strided aten::slice aten::select aten::squeeze aten::unsqueeze aten::detach detach aten::alias
aten::resolve_conj aten::resolve_neg aten::empty aten::empty_strided aten::empty_like aten::size
aten::stride aten::numel aten::lift_fresh aten::result_type aten::to aten::contiguous aten::flatten
aten::unflatten aten::split aten::chunk aten::unbind aten::narrow aten::view_as aten::expand_as""".split()
)
COPY_OPS = frozenset(("aten::copy_", "aten::_to_copy", "aten::clone"))
FILL_OPS = frozenset(("aten::zero_", "aten::fill_", "aten::zeros", "aten::ones", "aten::full"))

CBID = {"cudaLaunchKernel": 211, "cudaMemcpyAsync": 41, "cudaMemsetAsync": 51, "cudaEventRecord": 135}
CBID.update({"cudaStreamWaitEvent": 147, "cudaDeviceSynchronize": 165})


@dataclass(kw_only=True, slots=True)
class GpuTruth:
    """What `gpuify` added to one rank's Kineto document (counted as it was written)."""

    rank: int
    world_size: int
    kernels: int = 0  # cat "kernel" (NCCL kernels included)
    nccl_kernels: int = 0
    memcpy: int = 0  # cat "gpu_memcpy"
    memset: int = 0  # cat "gpu_memset"
    runtime: int = 0  # cat "cuda_runtime" (launches, event record/wait, synchronize)
    syncs: int = 0  # cat "cuda_sync"
    event_records: int = 0
    stream_waits: int = 0
    flows: int = 0  # "ac2g" s/f events (two per launch)
    streams: tuple[int, ...] = ()
    device: int = 0
    link: str = "rf_id"  # how host ops name their ET node: "rf_id" or "external_id"
    gpu_us_by_rf: dict[int, float] = field(default_factory=dict)  # ET rf_id -> GPU µs launched by it
    stream_by_rf: dict[int, int] = field(default_factory=dict)  # ET rf_id -> stream of its launch

    @property
    def gpu_events(self) -> int:
        return self.kernels + self.memcpy + self.memset

    @property
    def gpu_busy_us(self) -> float:
        return round(sum(self.gpu_us_by_rf.values()), 3)


def _leaves(host: list[dict]) -> list[dict]:
    """Host ops with no other host op inside them on the same thread, in time order."""
    by_thread: dict[tuple, list[dict]] = {}
    for e in host:
        by_thread.setdefault((str(e.get("pid")), str(e.get("tid"))), []).append(e)
    out = []
    for evs in by_thread.values():
        evs.sort(key=lambda e: (float(e["ts"]), -float(e.get("dur", 0))))
        for i, e in enumerate(evs):
            end = float(e["ts"]) + float(e.get("dur", 0))
            if i + 1 == len(evs) or float(evs[i + 1]["ts"]) >= end:
                out.append(e)
    out.sort(key=lambda e: float(e["ts"]))
    return out


def gpuify(
    doc: dict,
    *,
    rank: int = 0,
    world_size: int = 1,
    streams: tuple[int, int] = (7, 20),
    comm_stream: int = 25,
    device: int = 0,
    link: str = "rf_id",
    ext_offset: int = 1000,
) -> tuple[dict, GpuTruth]:
    """A copy of the Kineto `doc` with the device side of a CUDA run added (module docstring).

    link="external_id" drops "Record function id" and shifts every "External id" by
    `ext_offset`, like traces older than PyTorch 2.1 (the loader must vote the offset).
    """
    if link not in ("rf_id", "external_id"):
        raise ValueError(f"link must be 'rf_id' or 'external_id', not {link!r}")
    out = copy.deepcopy(doc)
    evs: list[dict] = out["traceEvents"]
    truth = GpuTruth(rank=rank, world_size=world_size, streams=(*streams, comm_stream), device=device, link=link)
    host = [e for e in evs if e.get("ph") == "X" and e.get("cat") == "cpu_op"]
    added: list[dict] = []
    free = dict.fromkeys(truth.streams, 0.0)
    corr = 100_000
    n_second = 0

    def runtime(name: str, op: dict, ts: float, dur: float, c: int) -> dict:
        ext = (op.get("args") or {}).get("External id", -1)
        truth.runtime += 1
        return {
            "ph": "X", "cat": "cuda_runtime", "name": name, "pid": op["pid"], "tid": op["tid"],
            "ts": round(ts, 3), "dur": round(dur, 3), "args": {"External id": ext, "cbid": CBID[name], "correlation": c},
        }  # fmt: skip

    def device_event(cat: str, name: str, op: dict, launch: dict, stream: int, c: int, dur: float) -> dict:
        ts = max(launch["ts"] + launch["dur"] + 2.0, free[stream] + 0.5)
        free[stream] = ts + dur
        ext = (op.get("args") or {}).get("External id", -1)
        flow = {"id": c, "cat": "ac2g", "name": "ac2g"}
        added.append({"ph": "s", "pid": op["pid"], "tid": op["tid"], "ts": launch["ts"], **flow})
        added.append({"ph": "f", "pid": device, "tid": stream, "ts": round(ts, 3), "bp": "e", **flow})
        truth.flows += 2
        return {
            "ph": "X", "cat": cat, "name": name, "pid": device, "tid": stream, "ts": round(ts, 3), "dur": dur,
            "args": {"External id": ext, "device": device, "stream": stream, "correlation": c},
        }  # fmt: skip

    for op in _leaves(host):
        name = str(op.get("name", ""))
        dur_op = float(op.get("dur", 0))
        if name in NO_WORK or dur_op <= 0:
            continue
        args = op.get("args") or {}
        rf = args.get("Record function id", args.get("External id"))
        corr += 1
        t0 = float(op["ts"])
        if name in COPY_OPS:
            api, cat, kname, stream = "cudaMemcpyAsync", "gpu_memcpy", "Memcpy DtoD (Device -> Device)", streams[0]
            truth.memcpy += 1
        elif name in FILL_OPS:
            api, cat, kname, stream = "cudaMemsetAsync", "gpu_memset", "Memset (Device)", streams[0]
            truth.memset += 1
        elif name.startswith("c10d::") or name == "record_param_comms":
            api, cat, stream = "cudaLaunchKernel", "kernel", comm_stream
            kname = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"
            truth.kernels += 1
            truth.nccl_kernels += 1
        else:
            second = corr % 4 == 3
            api, cat, stream = "cudaLaunchKernel", "kernel", streams[1] if second else streams[0]
            kname = f"void synthetic_kernel<{name.replace('aten::', '')}>(float*, float const*, int)"
            truth.kernels += 1
        launch = runtime(api, op, t0 + 0.25 * dur_op, 0.1 * dur_op, corr)
        dur = 2.0 + (corr % 7) * 1.5
        gpu = device_event(cat, kname, op, launch, stream, corr, dur)
        added += [launch, gpu]
        if isinstance(rf, int):
            truth.gpu_us_by_rf[rf] = round(truth.gpu_us_by_rf.get(rf, 0.0) + dur, 3)
            truth.stream_by_rf[rf] = stream
        if stream == streams[1]:
            n_second += 1
            if n_second % 2 == 0:  # later work on stream 0 waits for this kernel
                rec_c, wait_c = corr + 50_000, corr + 60_000
                added.append(runtime("cudaEventRecord", op, t0 + 0.4 * dur_op, 0.05 * dur_op, rec_c))
                wait = runtime("cudaStreamWaitEvent", op, t0 + 0.5 * dur_op, 0.05 * dur_op, wait_c)
                added.append(wait)
                sync_ts = max(wait["ts"] + 1.0, free[streams[0]])
                added.append({
                    "ph": "X", "cat": "cuda_sync", "name": "Stream Wait Event", "pid": device, "tid": streams[0],
                    "ts": round(sync_ts, 3), "dur": 1.0,
                    "args": {"External id": args.get("External id", -1), "cuda_sync_kind": "Stream Wait Event",
                             "wait_on_stream": streams[1], "wait_on_cuda_event_record_corr_id": rec_c,
                             "stream": streams[0], "correlation": wait_c, "device": device},
                })  # fmt: skip
                free[streams[0]] = max(free[streams[0]], gpu["ts"] + gpu["dur"])  # the wait holds stream 0
                truth.event_records += 1
                truth.stream_waits += 1
                truth.syncs += 1
    if host:
        last = max(host, key=lambda e: float(e["ts"]) + float(e.get("dur", 0)))
        t_end = float(last["ts"]) + float(last.get("dur", 0)) + 1.0
        done = max([t_end, *free.values()])
        sync = runtime("cudaDeviceSynchronize", last, t_end, done - t_end + 1.0, corr + 70_000)
        sync["args"]["External id"] = -1
        added.append(sync)
        added.append({
            "ph": "X", "cat": "cuda_sync", "name": "Context Sync", "pid": device, "tid": -1,
            "ts": round(done, 3), "dur": 1.0,
            "args": {"cuda_sync_kind": "Context Sync", "stream": -1, "correlation": corr + 70_000, "device": device},
        })  # fmt: skip
        truth.syncs += 1
    added.append({"ph": "M", "name": "process_name", "pid": device, "args": {"name": f"GPU {device}"}})
    for s in truth.streams:
        added.append({"ph": "M", "name": "thread_name", "pid": device, "tid": s, "args": {"name": f"stream {s}"}})
    evs.extend(added)
    out["deviceProperties"] = [
        {"id": device, "name": "Synthetic GPU (engine.testing.gpu_kineto)", "totalGlobalMem": 16 * 2**30}
    ]
    out["distributedInfo"] = {"backend": "nccl", "rank": rank, "world_size": world_size}
    if link == "external_id":
        for e in evs:
            a = e.get("args")
            if isinstance(a, dict):
                a.pop("Record function id", None)
                if isinstance(a.get("External id"), int) and a["External id"] >= 0:
                    a["External id"] += ext_offset
    return out, truth


def _read(path: Path) -> Any:
    return json.loads(gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes())


def _write(path: Path, doc: Any) -> None:
    path.write_bytes(gzip.compress(json.dumps(doc).encode(), compresslevel=1, mtime=0))


def write_gpu_run(
    sample_dir: str | Path, out_dir: str | Path, *, ranks: int | None = None, **gpuify_kw: Any
) -> list[tuple[Path, Path, GpuTruth]]:
    """GPU-shaped copies of one captured sample (a `sample_traces/<name>/` folder) in `out_dir`.

    Every rank the capture has is converted; `ranks=N` instead makes an N-rank run from rank 0
    (its ET copied per rank). Returns [(et_path, kineto_path, truth)] in rank order.
    """
    src, out = Path(sample_dir), Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    kinetos = sorted(src.glob("*_kineto.json.gz"))
    if not kinetos:
        raise FileNotFoundError(f"no *_kineto.json.gz in {src}")
    pairs = [(k.with_name(k.name.replace("_kineto.json.gz", "_et.json.gz")), k) for k in kinetos]
    if ranks is not None:
        pairs = [pairs[0]] * ranks
    world = len(pairs)
    written = []
    for r, (et, kin) in enumerate(pairs):
        base = src.name if world == 1 else f"{src.name}_rank{r}"
        et_out, kin_out = out / f"{base}_et.json.gz", out / f"{base}_kineto.json.gz"
        shutil.copyfile(et, et_out)
        doc, truth = gpuify(_read(kin), rank=r, world_size=world, **gpuify_kw)
        _write(kin_out, doc)
        written.append((et_out, kin_out, truth))
    return written
