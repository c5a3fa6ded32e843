"""Run a replay plan: warm-up, measured iterations, per-op times, optional profile and metrics.

Timing fidelity is the point of the product, so the measured loop is a flat list of closures
built once (`make_step`): each closure copies a pre-built argument template, patches the
tensors in from the slot table, calls the pre-resolved `OpOverload` and stores/drops slots.
No name lookups, no JSON, no dict building in the loop. Iteration time is the wall time of the
whole op sequence (plus the original's host gaps when asked), synchronized on CUDA.

Robustness: a failing op never aborts the replay. Its error is recorded (coverage by_reason),
its outputs are synthesized from the recorded shapes/dtypes so dependents still run, and the
closure is swapped for that synthesis so later iterations stay clean.
"""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from engine.errors import TraceError
from engine.progress import Progress, report
from engine.replay.commstats import breakdown, executed_collectives
from engine.replay.config import ReplayConfig
from engine.replay.memory import available_bytes, estimate, release_skipped, skip_oversized
from engine.replay.metacheck import skip_over_meta
from engine.replay.plan import Plan, build_plan
from engine.replay.reasons import SkipReason
from engine.replay.result import OpStatus, PerOpRow, ReplayResult, coverage_report
from engine.replay.steps import (
    busy_wait_ns,
    make_call_step,
    make_step,
    profile_iteration,
    skip_step,
    with_lazy,
    with_stream,
    with_waits,
)
from engine.replay.tensors import StorageManager
from engine.trace.ranks import of_rank, ranks_of

if TYPE_CHECKING:
    from engine.trace.model import Trace


def require_device(cfg: ReplayConfig) -> None:
    """TraceError when the config asks for CUDA on a machine without it (checked where a replay
    starts, not in ReplayConfig, so a config is built and read without torch)."""
    if cfg.is_cuda and not torch.cuda.is_available():
        raise TraceError(f"replay device {cfg.device!r} requested but CUDA is not available")


def _target_device(cfg: ReplayConfig) -> str:
    require_device(cfg)
    if cfg.device == "cuda":
        return f"cuda:{torch.cuda.current_device()}"
    return cfg.device


def _rank_ops(trace: Trace, rank):
    ops = trace.ops
    if len(ops) == 0:
        raise TraceError("trace has no execution-trace operators to replay (Kineto-only trace?)")
    if rank is None:
        rank = int(ops["rank"].min())
    sub = of_rank(ops, rank)
    if len(sub) == 0:
        raise TraceError(f"trace has no operators on rank {rank}; ranks: {ranks_of(ops)}")
    return sub, rank


def replay(
    trace: Trace, *, config: ReplayConfig, op_ids=None, progress: Progress | None = None, rank: int | None = None
) -> ReplayResult:
    """Replay `trace` (one rank) per `config`; `op_ids`: exact ET ids to run (e.g. a Subgraph's
    `replay_ids`), default: the operator-selection rule of `config.mode` over the whole rank."""
    if config.out_dir is not None:  # an unusable output folder fails now, not after the run
        from engine.outdir import OutputLock

        with OutputLock(config.out_dir, "replay"):
            return _replay(trace, config=config, op_ids=op_ids, progress=progress, rank=rank)
    return _replay(trace, config=config, op_ids=op_ids, progress=progress, rank=rank)


def _replay(trace: Trace, *, config: ReplayConfig, op_ids, progress: Progress | None, rank: int | None) -> ReplayResult:
    with ReplaySession(trace, config=config, op_ids=op_ids, progress=progress, rank=rank) as session:
        total = config.warmup + config.iters
        for it in range(config.warmup):
            session.run_iteration(measured=False)
            report(progress, 0.3 + 0.65 * (it + 1) / total, f"warm-up {it + 1}/{config.warmup}")
        session.start_metrics()
        for it in range(config.iters):
            session.run_iteration(measured=True)
            report(progress, 0.3 + 0.65 * (config.warmup + it + 1) / total, f"iteration {it + 1}/{config.iters}")
        session.stop_metrics()
        res = session.finish()
    report(progress, 1.0, "done")
    return res


class ReplaySession:
    """A prepared replay that runs iterations on demand (benchmarks interleave it with the
    original to cancel machine-load drift). Use as a context manager: it sets the thread count
    and denormal flushing for the replay and restores them on exit."""

    def __init__(
        self,
        trace: Trace,
        *,
        config: ReplayConfig,
        op_ids=None,
        progress: Progress | None = None,
        rank: int | None = None,
        collectives=None,
        meta_bytes: dict[int, int | None] | None = None,
    ):
        """`meta_bytes`: the plan's meta-device output sizes computed by a distributed launcher
        (engine.replay.metacheck.meta_sizes); None: computed here."""
        from engine.graph import replay_ops
        from engine.replay.custom import CustomOps
        from engine.replay.selection import by_replay_mode, with_comm_records

        ops, rank = _rank_ops(trace, rank)
        self.config, self.rank, self.trace = config, rank, trace
        self.collectives = collectives
        device = self.device = _target_device(config)
        ids = list(op_ids) if op_ids is not None else replay_ops(trace, config.mode, rank=rank)
        if collectives is not None:
            ids = with_comm_records(ops, ids)
        ids = by_replay_mode(ops, ids, config.replay_mode)
        report(progress, 0.0, f"planning {len(ids)} ops")
        plan = self.plan = build_plan(
            ops,
            ids,
            device=device,
            allow_trace_code=config.allow_trace_code,
            progress=(lambda f, m: report(progress, 0.2 * f, m)),
            collectives=collectives,
            custom=CustomOps(seed=config.seed),
        )
        # an ET recorded over N profiler steps replays N steps per iteration (result.median_step_ms);
        # the profiled iteration labels each one with its recorded name (step_groups)
        self.step_groups = step_groups(ops, [st.op_id for st in plan.steps])
        self.steps_per_iteration = max(1, len(self.step_groups))
        avail = available_bytes(device)
        if skip_over_meta(plan, avail, meta_bytes):  # outputs larger than recorded (arange(N), eye(n), outer)
            release_skipped(plan)
        est = self.est_initial = estimate(plan, avail)
        lazy = config.lazy is True or (config.lazy == "auto" and est.eager_peak_bytes > avail)
        if est.eager_peak_bytes > avail and config.lazy is False:
            raise TraceError(
                f"replay needs about {est.eager_peak_bytes / 2**30:.1f} GiB on {device} but only "
                f"{avail / 2**30:.1f} GiB is free; use lazy allocation (--lazy)"
            )
        if lazy:
            skip_oversized(plan, avail)
            est = estimate(plan, avail)
            if est.lazy_peak_bytes > avail:
                raise TraceError(
                    f"replay needs about {est.lazy_peak_bytes / 2**30:.1f} GiB on {device} even "
                    f"with lazy allocation, only {avail / 2**30:.1f} GiB is free"
                )
        _skip_orphans(plan)
        self.lazy, self.est, self.progress = lazy, est, progress
        from engine.replay.memory import rss_bound

        self.rss_bound = rss_bound(
            est.lazy_peak_bytes if lazy else est.eager_peak_bytes,
            len(plan.steps),
            profile=bool(config.profile and config.out_dir is not None),
            metrics=config.metrics,
            rss_now=None,
        )
        self.n_threads = config.num_threads or _meta_threads(trace)
        self.iter_ms: list[float] = []
        self.gpu_iter_ms: list[float] = []
        self.op_ns: list[list[int]] = []
        self.failures: dict[int, str] = {}
        self._saved: tuple | None = None
        self._sampler = None
        self._built = False

    def __enter__(self) -> ReplaySession:
        self._saved = (torch.get_num_threads(),)
        if self.n_threads:
            torch.set_num_threads(self.n_threads)
        if self.device == "cpu":
            torch.set_flush_denormal(True)
        if not self._built:
            self._build()
        return self

    def __exit__(self, *exc) -> None:
        if self._saved is not None:
            torch.set_num_threads(self._saved[0])
            if self.device == "cpu":
                torch.set_flush_denormal(False)
        self.stop_metrics()

    def _build(self) -> None:
        plan, device, config, lazy = self.plan, self.device, self.config, self.lazy
        self.gen = gen = torch.Generator().manual_seed(config.seed)
        self.env = env = [None] * plan.n_slots  # type: list[Any]
        self.store = store = StorageManager(device=device, seed=config.seed, placement=plan.placement)
        steps: list[Callable[[], None]] = []
        externals = list(plan.externals.values())
        mats: dict[int, list] = {}
        drops: dict[int, list] = {}
        if lazy:
            for e in externals:
                mats.setdefault(e.first_use, []).append(e)
                drops.setdefault(e.last_use, []).append(e.slot)
        else:
            store.plan(externals)
            # progress inside synthesis (issue 13: a whole-resnet replay showed one static message
            # for the whole fill): by bytes filled, at most every 0.2 s
            total_b = max(store.total_bytes(), 1)
            done_b, last_t = 0, 0.0
            for i, e in enumerate(externals):
                try:
                    env[e.slot] = store.materialize(e, gen)
                except (RuntimeError, ValueError) as exc:
                    raise TraceError(f"cannot synthesize input tensor {e.rec.tensor_id}: {exc}") from None
                done_b += e.rec.nbytes()
                now = time.perf_counter()
                if now - last_t > 0.2 or i == len(externals) - 1:
                    last_t = now
                    report(
                        self.progress,
                        0.2 + 0.1 * min(done_b / total_b, 1.0),
                        f"synthesizing inputs {i + 1}/{len(externals)} ({done_b / 2**20:,.0f} MB)",
                    )
        stream_map = {}
        if device.startswith("cuda") and config.streams:
            from engine.replay.streams import assign_streams

            stream_map = assign_streams(self.trace, plan, rank=self.rank)
        self.n_streams = len(stream_map)
        current = torch.cuda.current_stream() if stream_map else None  # assign_streams' main stream
        for st in plan.steps:
            if not st.runnable:
                fn = skip_step(st, env)
            elif st.call is not None:
                fn = make_call_step(st, env, device, self.failures, steps)
            else:
                fn = make_step(st, env, device, self.failures, steps)
            if st.waits and self.collectives is not None:
                fn = with_waits(fn, self.collectives, st.waits)
            if lazy and (st.index in mats or st.index in drops):
                fn = with_lazy(fn, mats.get(st.index, []), drops.get(st.index, []), env, store, gen)
            if st.stream is not None and st.stream in stream_map:
                stream = stream_map[st.stream]
                waits = [stream_map[w] for w in st.wait_streams if w in stream_map]
                fn = with_stream(fn, stream, waits, main=stream == current)
            steps.append(fn)
        self.steps = steps
        self.gaps = measured_host_gaps(plan) if config.host_gaps else None
        cuda = device.startswith("cuda")
        dev_sync = (lambda: torch.cuda.synchronize(device)) if cuda else (lambda: None)
        backend = self.collectives
        if backend is not None:

            def sync() -> None:
                backend.drain()  # async collectives complete inside the iteration they belong to
                dev_sync()

            self.sync = sync
        else:
            self.sync = dev_sync
        # CUDA: an event after each op gives its GPU time, at a few µs of host time per op; the
        # measured iterations record them only when asked (config.op_events) or on a distributed
        # rank, else one extra pass in finish() does (per_op_pass)
        self.events = [torch.cuda.Event(enable_timing=True) for _ in range(len(steps) + 1)] if cuda else None
        self.op_events = cuda and (config.op_events or backend is not None)
        self._per_op_pass = False
        self._built = True

    def run_iteration(self, measured: bool = True) -> float:
        """Run the whole op sequence once; returns its wall time in ms (recorded if measured)."""
        steps, gaps, n = self.steps, self.gaps, len(self.steps)
        pc = time.perf_counter_ns
        times = [0] * n
        gc_was = gc.isenabled()
        gc.disable()
        per_op_events = self.events is not None and (self.op_events or self._per_op_pass)
        try:
            evs = self.events
            t0 = pc()
            prev = t0
            if evs is not None and not per_op_events:
                # CUDA, timed: the start and end events only (the ops' GPU times: per_op_pass)
                evs[0].record()
                if gaps is None:
                    for fn in steps:
                        fn()
                else:
                    for k in range(n):
                        if gaps[k]:
                            busy_wait_ns(gaps[k])
                        steps[k]()
                evs[n].record()
            elif evs is not None:
                # CUDA: an event after each op gives per-op GPU time (host time is only launch)
                evs[0].record()
                for k in range(n):
                    g = gaps[k] if gaps is not None else 0
                    if g:
                        busy_wait_ns(g)
                        prev = pc()
                    steps[k]()
                    evs[k + 1].record()
                    now = pc()
                    times[k] = now - prev
                    prev = now
            elif gaps is None:
                for k in range(n):
                    steps[k]()
                    now = pc()
                    times[k] = now - prev
                    prev = now
            else:
                for k in range(n):
                    g = gaps[k]
                    if g:
                        busy_wait_ns(g)
                        prev = pc()
                    steps[k]()
                    now = pc()
                    times[k] = now - prev
                    prev = now
            self.sync()
            t1 = pc()
        finally:
            if gc_was:
                gc.enable()
        ms = (t1 - t0) / 1e6
        end = getattr(self.collectives, "end_iteration", None)
        if end is not None:
            end(measured)
        if self._per_op_pass:
            assert evs is not None  # the per-op pass runs on CUDA only
            self.op_ns.append([int(evs[k].elapsed_time(evs[k + 1]) * 1e6) for k in range(n)])
        elif measured:
            self.iter_ms.append(ms)
            if evs is not None:
                self.gpu_iter_ms.append(evs[0].elapsed_time(evs[n]))
                if per_op_events:
                    times = [int(evs[k].elapsed_time(evs[k + 1]) * 1e6) for k in range(n)]
            if evs is None or per_op_events:
                self.op_ns.append(times)
        return ms

    def per_op_pass(self) -> None:
        """CUDA without op_events: one unmeasured iteration with an event after every op gives
        the per-op GPU times (the timed iterations recorded only their start and end)."""
        if self.events is None or self.op_events or not self.iter_ms:
            return
        self._per_op_pass = True
        try:
            self.run_iteration(measured=False)
        finally:
            self._per_op_pass = False

    def start_metrics(self) -> None:
        if self._sampler is None:
            self._sampler = _sampler(self.config, self.device)
            if self._sampler is not None:
                self._sampler.start()

    def stop_metrics(self) -> None:
        if self._sampler is not None and not getattr(self, "_sampler_stopped", False):
            self._sampler.stop()
            self._sampler_stopped = True

    def finish(self) -> ReplayResult:
        """Profile (if asked), free tensors and build the result."""
        plan, config = self.plan, self.config
        self.per_op_pass()
        kineto_path = None
        paths: dict[str, str] = {}
        # The replayed ET file (this rank's, in a multi-rank trace) and its sha256: compare reads
        # its `mystique_origin` provenance (composed ETs) and checks the bytes are the same.
        et_src = replayed_et(self.trace, self.rank)
        if et_src and et_src.get("path"):
            paths["et"] = str(et_src["path"])
            if et_src.get("sha256"):
                paths["et_sha256"] = str(et_src["sha256"])
        if config.profile and config.out_dir is not None:
            kineto_path = profile_iteration(plan, self.steps, config, self.sync, self.step_groups)
            paths["kineto"] = kineto_path
        for i in range(plan.n_slots):
            self.env[i] = None
        self.store.release()
        coverage, skipped = coverage_report(plan.steps, self.failures)
        per_op: list[PerOpRow] = []
        op_ns = self.op_ns
        for k, st in enumerate(plan.steps):
            dur = statistics.median(row[k] for row in op_ns) / 1e3 if op_ns else 0.0
            status = (
                OpStatus.SKIPPED
                if (st.reason or st.index in self.failures)
                else (OpStatus.SUBSTITUTED if st.substitution else OpStatus.REPLAYED)
            )
            row = PerOpRow(
                op_id=st.op_id, name=st.name, category=st.category, phase=st.phase, dur_us=round(dur, 3), status=status
            )
            if st.coll is not None:
                row["collective"] = st.coll.kind.value
            per_op.append(row)
        metrics: dict[str, Any] = {"samples": {}, "summary": {}}
        if self._sampler is not None:
            self.stop_metrics()
            try:
                df = self._sampler.samples
                metrics = {"samples": {c: df[c].tolist() for c in df.columns}, "summary": self._sampler.summary()}
            except (KeyError, ValueError, AttributeError) as exc:
                metrics["error"] = f"{type(exc).__name__}: {exc}"
        notes = (
            [
                "per_op dur_us is GPU time between CUDA events recorded after each op (on the main stream)"
                + ("" if self.op_events else ", in one extra iteration after the timed ones")
            ]
            if self.gpu_iter_ms
            else []
        )
        from engine.replay.worldhint import mirror_hint

        # one rank of a multi-rank job replayed alone: say what it records and how to run it whole
        hint = mirror_hint(self.trace, self.rank, dict(coverage), paths.get("et"))
        if hint:
            notes = [*notes, hint["text"]]
        return ReplayResult(
            iteration_ms=list(self.iter_ms),
            gpu_iteration_ms=list(self.gpu_iter_ms),
            steps_per_iteration=self.steps_per_iteration,
            per_op=per_op,
            coverage=coverage,
            device=self.device,
            metrics=metrics,
            kineto_path=kineto_path,
            paths=paths,
            source=source_of(self.trace, self.rank),
            skipped_ops=skipped,
            warnings=notes,
            memory={
                **self.est_initial.to_dict(),
                "lazy": self.lazy,
                "planned_peak_bytes": self.est.lazy_peak_bytes if self.lazy else self.est.eager_peak_bytes,
                "rss_bound_bytes": self.rss_bound,  # upper bound of the process's peak RSS (memory.rss_bound)
            },
            config={
                "warmup": config.warmup,
                "iters": config.iters,
                "mode": config.mode,
                "host_gaps": config.host_gaps,
                "host_tensors_on_cpu": bool(plan.placement and plan.placement.keep_host),
                "num_threads": torch.get_num_threads(),
                "rank": self.rank,
                "streams": getattr(self, "n_streams", 0),
                "replay_mode": str(config.replay_mode),
            },
            breakdown=breakdown(plan, self.op_ns, self.iter_ms, self.collectives),
            collectives=executed_collectives(plan, self.collectives),
        )


def step_groups(ops, op_ids: list[int]) -> list[tuple[str, int, int]]:
    """(recorded step name, first plan index, end index) of each recorded step the plan's ops
    fall in, in plan order; an op outside every step joins the step before it (the first one's
    when it leads). [] when the ET has no step nodes."""
    from engine.trace.steps import step_owners

    owners = step_owners(ops, op_ids)
    names = dict(zip(ops["id"].astype(int).tolist(), ops["name"].astype(str).tolist(), strict=True))
    groups: list[list] = []
    for k, o in enumerate(owners):
        if o is not None and (not groups or groups[-1][0] != o):
            groups.append([o, k])
    out = []
    for j, (o, start) in enumerate(groups):
        end = groups[j + 1][1] if j + 1 < len(groups) else len(op_ids)
        out.append((names[o], 0 if j == 0 else start, end))
    return out


def _meta_threads(trace: Trace) -> int | None:
    """The capture's intra-op thread count: from trace meta, else from the `<name>_meta.json`
    written by `mystique capture` next to the ET file. Thread count dominates CPU step time
    (2 threads on a loaded 2-core machine can be 10x slower than 1), so it must match."""
    meta = trace.meta
    v = meta.get("num_threads") or meta.get("capture", {}).get("num_threads")
    if isinstance(v, int) and v > 0:
        return v
    from engine.trace.layout import meta_for

    for src in meta.get("sources") or []:
        if src.get("kind") != "execution_trace" or not src.get("path"):
            continue
        try:
            v = (meta_for(src["path"], loose=False) or {}).get("num_threads")
        except TraceError:  # an unreadable meta only means "no thread count"
            continue
        if isinstance(v, int) and v > 0:
            return v
    return None


def _skip_orphans(plan: Plan) -> None:
    """Ops reading an output of an op skipped for memory cannot run either."""
    dead: set[int] = set()
    for st in plan.steps:
        if st.runnable and any(s in dead for s in st.in_slots):
            st.reason = SkipReason.MEMORY_DEPENDENCY
            st.detail = f"op {st.op_id} {st.name} reads an output of an op skipped for memory"
        if not st.runnable:
            dead.update(slot for _, _, slot, _ in st.outs)


def _sampler(config: ReplayConfig, device: str):
    if not config.metrics:
        return None
    try:
        from engine.metrics import MetricsSampler
    except ImportError:
        return None
    return MetricsSampler(interval_s=0.02, device=device)


def measured_host_gaps(plan: Plan) -> list[int]:
    """Original CPU time (ns) between the end of op k-1 and the start of op k (linked Kineto)."""
    out = [0] * len(plan.steps)
    prev_end = None
    for k, st in enumerate(plan.steps):
        ts, dur = st.k_ts_us, st.k_dur_us
        if ts == ts and dur == dur:  # not NaN
            if prev_end is not None and ts > prev_end:
                out[k] = int((ts - prev_end) * 1e3)
            prev_end = ts + dur
    return out


def replayed_et(trace: Trace, rank) -> dict[str, Any] | None:
    """The ET source document of `rank` (the first ET when the rank is not recorded): a
    distributed rank names its own file, not rank 0's, so compare maps its ids through the right
    provenance (issue 21)."""
    srcs = [s for s in (trace.meta.get("sources") or []) if s.get("kind") == "execution_trace"]
    mine = [s for s in srcs if rank is not None and s.get("rank") == rank]
    return (mine or srcs)[0] if srcs else None


def source_of(trace: Trace, rank) -> dict:
    """Content hashes of the ET document(s) of `rank` that were replayed (ReplayResult.source)."""
    srcs = [s for s in (trace.meta.get("sources") or []) if s.get("kind") == "execution_trace"]
    mine = [s for s in srcs if rank is None or s.get("rank") == rank] or srcs
    out: dict = {"traces": [{"path": s.get("path"), "sha256": s.get("sha256")} for s in mine if s.get("sha256")]}
    derived: list[str] = []
    for s in mine:  # an exported benchmark: its completion marker lists the traces it came from
        from pathlib import Path

        from engine import jsonio
        from engine.trace.layout import MARKER

        mk = Path(str(s.get("path", "")).split("!", 1)[0]).parent / MARKER
        try:
            doc = jsonio.loads(mk.read_bytes()) if mk.is_file() else {}
        except (OSError, jsonio.JSONDecodeError):
            doc = {}
        derived += [x["sha256"] for x in doc.get("sources", []) if isinstance(x, dict) and x.get("sha256")]
    if derived:
        out["derived_from"] = sorted(set(derived))
    return out


__all__ = ["ReplaySession", "replay"]
