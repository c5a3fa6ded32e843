"""The closures of a replay's timed loop: one per op, built once (see executor's docstring).

`make_step` runs a resolved operator (templates copied, tensors patched in from the slot
table, outputs stored, dead slots dropped; a failure is recorded and later iterations run the
output synthesis instead); `make_call_step` runs a prepared closure (a collective: its error is
fatal so a distributed run comes down together; a custom rebuild: recorded like any op); the
`_with_*` wrappers add lazy allocation, async-collective waits, CUDA streams and profiler labels.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Callable

import torch

from engine.errors import TraceError
from engine.replay.config import ReplayConfig
from engine.replay.guards import guard_of
from engine.replay.plan import OpStep, Plan
from engine.replay.tensors import StorageManager, empty_like_rec


def _synthesizer(st: OpStep, env: list, device: str) -> Callable[[], None]:
    """What runs in place of a failed op: outputs of the recorded shapes, dead slots dropped, so
    the ops after it still find tensors of the right shapes. Integer and bool outputs are zeros:
    they may be indices, offsets or lengths, and a kernel that trusts them (an embedding bag's
    backward, FBGEMM's sparse ops) would read wherever leftover memory points, a crash that
    depends on what the process ran before; zero is a valid index, offset and length for any
    non-empty input. Floating outputs stay uninitialized (no kernel indexes with them)."""
    outs, rel = st.outs, st.release

    def synthesize_outputs() -> None:
        for _, _, slot, rec in outs:
            t = empty_like_rec(rec, device)
            if not (t.dtype.is_floating_point or t.dtype.is_complex):
                t.zero_()
            env[slot] = t
        for s in rel:
            env[s] = None

    return synthesize_outputs


def _fail(st: OpStep, exc: Exception, failures: dict, steps: list, synthesize: Callable[[], None]) -> None:
    """Record an op's failure (one line) and make this and every later iteration synthesize its outputs."""
    msg = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    failures[st.index] = f"op {st.op_id} {st.name}: {type(exc).__name__}: {msg[:300]}"
    synthesize()
    steps[st.index] = synthesize


def make_step(st: OpStep, env: list, device: str, failures: dict, steps: list) -> Callable[[], None]:
    """The closure that runs one op (see module docstring)."""
    assert st.resolved is not None  # only resolved steps get a runnable closure
    ov = st.resolved.overload
    guard = guard_of(ov)
    pos_t = st.pos
    kw_t = st.kw
    pfix = [(p, slot) for w, p, sub, slot in st.fixups if w == "p" and sub is None]
    kfix = [(k, slot) for w, k, sub, slot in st.fixups if w == "k" and sub is None]
    # tensors inside list arguments (torch.cat's inputs, foreach ops), in the positional list
    # (0) or the keyword dict (1) of the call
    inner = [(int(w == "k"), key, sub, slot) for w, key, sub, slot in st.fixups if sub is not None]
    lists = list(dict.fromkeys((w, key) for w, key, _, _ in inner))
    single = len(ov._schema.returns) == 1
    outs = st.outs
    rel = st.release
    synth_cache: dict[int, torch.Tensor] = {}

    def synth(slot, rec):
        t = synth_cache.get(slot)
        if t is None:
            t = empty_like_rec(rec, device)
            if rec.numel == 0 or rec.dtype == "uint8":
                synth_cache[slot] = t  # e.g. cudnn reserve space: keep one
        return t

    synthesize_outputs = _synthesizer(st, env, device)

    def run() -> None:
        a = pos_t.copy()
        for p, slot in pfix:
            a[p] = env[slot]
        if kw_t:
            kw = kw_t.copy()
            for k, slot in kfix:
                kw[k] = env[slot]
        else:
            kw = kw_t
        if inner:  # copy each list first: the step's template must never change
            call = (a, kw)
            for w, key in lists:
                call[w][key] = list(call[w][key])
            for w, key, sub, slot in inner:
                call[w][key][sub] = env[slot]
        try:
            if guard is not None:
                guard(tuple(a), kw)
            res = ov(*a, **kw)
        except Exception as exc:  # noqa: BLE001 -- any op failure is recorded, never fatal
            _fail(st, exc, failures, steps, synthesize_outputs)
            return
        if outs:
            r = (res,) if single else res
            for p, sub, slot, rec in outs:
                if 0 <= p < len(r):
                    v = r[p]
                    if sub is not None:
                        v = v[sub] if isinstance(v, (list, tuple)) and sub < len(v) else None
                    env[slot] = v if isinstance(v, torch.Tensor) else synth(slot, rec)
                else:
                    env[slot] = synth(slot, rec)
        for s in rel:
            env[s] = None

    return run


def make_call_step(st: OpStep, env: list, device: str, failures: dict, steps: list) -> Callable[[], None]:
    """A prepared closure (collective or custom rebuild). A collective's error is fatal (a
    distributed run must come down, never continue out of step); a custom op's is recorded."""
    call, outs, rel = st.call, st.outs, st.release
    fatal = st.coll is not None

    synthesize_outputs = _synthesizer(st, env, device)

    def run() -> None:
        if fatal:
            res = call()
        else:
            try:
                res = call()
            except Exception as exc:  # noqa: BLE001 - recorded like any op failure
                _fail(st, exc, failures, steps, synthesize_outputs)
                return
        for p, sub, slot, rec in outs:
            v = res[p] if isinstance(res, (list, tuple)) and 0 <= p < len(res) else None
            if sub is not None:
                v = v[sub] if isinstance(v, (list, tuple)) and sub < len(v) else None
            env[slot] = v if isinstance(v, torch.Tensor) else empty_like_rec(rec, device)
        for s in rel:
            env[s] = None

    return run


def with_waits(fn, backend, waits: list[int]):
    def run() -> None:
        for w in waits:
            backend.wait(w)
        fn()

    return run


def skip_step(st: OpStep, env: list) -> Callable[[], None]:
    rel = st.release

    def run() -> None:
        for s in rel:
            env[s] = None

    return run


def with_lazy(fn, mats, drops, env, store: StorageManager, gen):
    def run() -> None:
        for e in mats:
            env[e.slot] = store.standalone(e, gen)
        fn()
        for s in drops:
            env[s] = None

    return run


def with_stream(fn, stream, waits, main: bool = False):
    """Run `fn` on `stream` after it waits for `waits`. On the main (current) stream no stream
    context is entered: `torch.cuda.stream(...)` costs host time on every op (a context object,
    a current-stream query, two stream switches), and most ops of a trace run on the main stream."""
    if main:
        if not waits:
            return fn

        def run_main() -> None:
            for w in waits:
                stream.wait_stream(w)
            fn()

        return run_main

    def run() -> None:
        for w in waits:
            stream.wait_stream(w)
        with torch.cuda.stream(stream):
            fn()

    return run


def _with_label(fn, label: str):
    rf = torch.profiler.record_function

    def run() -> None:
        with rf(label):
            fn()

    return run


def busy_wait_ns(ns: int) -> None:
    end = time.perf_counter_ns() + ns
    while time.perf_counter_ns() < end:
        pass


@contextlib.contextmanager
def _stderr_kept_unless_failed():
    """Hold what C++ code prints on fd 2 (Kineto's "Failed to write to log file!") and pass it
    on only when the export worked: a failed export is reported in our one line instead."""
    import tempfile

    result: dict = {"ok": False}
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):
        yield result
        return
    with tempfile.TemporaryFile() as held:
        os.dup2(held.fileno(), 2)
        try:
            yield result
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            if result["ok"]:
                held.seek(0)
                text = held.read()
                if text:
                    os.write(2, text)


def profile_iteration(plan: Plan, steps, config: ReplayConfig, sync, groups=()) -> str:
    """One extra labelled iteration under torch.profiler; returns the gzipped Chrome trace path.
    `groups`: (recorded step name, start, end) plan ranges (executor.step_groups), each labelled
    with its `ProfilerStep#N` name so that the replay's trace has the original's steps."""
    import gzip
    import shutil

    from torch.profiler import ProfilerActivity, profile

    labelled = [_with_label(fn, f"et:{st.op_id}:{st.name}") for fn, st in zip(steps, plan.steps)]
    rf = torch.profiler.record_function
    spans = list(groups) or [(None, 0, len(labelled))]
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if config.is_cuda else [])
    out_dir = config.out_dir
    assert out_dir is not None  # the caller profiles only with an output folder
    out_dir.mkdir(parents=True, exist_ok=True)
    raw = out_dir / "replay_kineto.json"
    from engine.chatter import drop_chatter

    # the profiler prints USDT/STAGE lines to fd 2 on start and stop: not for the user's eyes
    with drop_chatter(), profile(activities=acts) as prof, torch.profiler.record_function("ReplayIteration#0"):
        for name, start, end in spans:
            with rf(name) if name else contextlib.nullcontext():
                for fn in labelled[start:end]:
                    fn()
        sync()
    from engine.outdir import atomic_copy

    gz = out_dir / "replay_kineto.json.gz"
    # Kineto writes `<raw>.tmp` and renames it; on a full disk it fails with no reason given and
    # leaves that file behind (issue 26), so both names are cleaned up and the reason is found
    # by a probe write (engine.outdir.prepare names ENOSPC, EDQUOT, EROFS, EACCES)
    leftovers = (raw, raw.with_name(raw.name + ".tmp"))
    try:
        with _stderr_kept_unless_failed() as result:
            try:
                prof.export_chrome_trace(str(raw))
                result["ok"] = ok = raw.is_file() and raw.stat().st_size > 0
            except (OSError, RuntimeError):
                ok = False
        if not ok:
            from engine.outdir import prepare

            for f in leftovers:
                with contextlib.suppress(OSError):
                    os.remove(f)
            try:
                prepare(out_dir)
            except TraceError as exc:
                raise TraceError(
                    f"cannot write the replay's Kineto trace: {exc.problem.split(': ')[-1]}", raw
                ) from None
            free = os.statvfs(out_dir).f_bavail * os.statvfs(out_dir).f_frsize
            why = f"no space left on device ({free >> 10} KiB free)" if free < 1 << 20 else "the profiler wrote nothing"
            raise TraceError(f"cannot write the replay's Kineto trace: {why}", raw)

        def _gzip(src, dst):
            with gzip.GzipFile(fileobj=dst, mode="wb") as z:
                shutil.copyfileobj(src, z)

        atomic_copy(raw, gz, _gzip)  # a failed write keeps the previous trace
    finally:
        for f in leftovers:
            with contextlib.suppress(OSError):
                os.remove(f)
    return str(gz)
