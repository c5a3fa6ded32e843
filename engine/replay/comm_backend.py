"""Collective backends: the seam the plan runs recorded collectives through, and its registry.

The plan asks a `CollectiveBackend` for each collective (`prepare` returns a closure or raises
`DispatchError` with a `SkipReason`); backends come from a small registry (`BACKENDS`):
  "skip"   single-process replay: every collective skipped (COLLECTIVE_SINGLE_PROCESS)
  "torch"  `TorchDistBackend`: the collective runs on a real torch.distributed process group

`TorchDistBackend`: recorded collectives run on real torch.distributed process groups.

Each collective gets its own buffers, allocated once at plan time with the recorded shapes and
dtype (communication cost depends on sizes, not values; binding the replay's tensors would
make a collective wait on data the single-rank plan may have synthesized anyway). Consumers of
a collective's result read the tensors the trace says they read, as in any replay.

Async work (`async_op=True` in the trace, DDP's bucket all-reduces) is issued without waiting and
completed where the trace waits (see plan._async_waits), else at the end of the iteration.

Process groups: the default group ("0") is WORLD; every other recorded group is built with
`dist.new_group` by every rank in the same order (sorted by name), as c10d requires.

Mirror (SPMD) mode: every rank replays the same recorded rank R; peers and all_to_all splits
are mapped so the collectives still match (rank r receives from each peer what R's splits
assign to r).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Protocol

from engine.errors import TraceError
from engine.replay.collectives import Buf, CollectiveCall, CollKind
from engine.replay.reasons import SkipReason
from engine.replay.resolved import DispatchError


class CollectiveBackend(Protocol):
    """Runs recorded collectives. `prepare` returns a zero-argument closure for one recorded
    collective, or raises `DispatchError` (with a SkipReason) when it cannot; `wait(index)`
    completes the async work issued by plan step `index`; `drain()` completes all pending work
    (end of an iteration)."""

    def prepare(self, call: CollectiveCall, index: int) -> Callable[[], None]: ...

    def wait(self, index: int) -> None: ...

    def drain(self) -> None: ...


class SkipCollectives:
    """Single-process replay: every collective is skipped."""

    def prepare(self, call: CollectiveCall, index: int) -> Callable[[], None]:
        raise DispatchError(f"collective {call.describe()}", SkipReason.COLLECTIVE_SINGLE_PROCESS)

    def wait(self, index: int) -> None:
        return None

    def drain(self) -> None:
        return None


BACKENDS: dict[str, Callable[..., CollectiveBackend]] = {
    "skip": lambda **kw: SkipCollectives(),
    "torch": lambda **kw: TorchDistBackend(**kw),
}


def get_backend(name: str, **kw) -> CollectiveBackend:
    if name not in BACKENDS:
        raise TraceError(f"unknown collective backend {name!r}; choose one of {sorted(BACKENDS)}")
    return BACKENDS[name](**kw)


def _dtype(name: str):
    import torch

    dt = getattr(torch, name, None) if name else None
    return dt if isinstance(dt, torch.dtype) else torch.float32


def _even(n: int, w: int) -> list[int]:
    return [n // w + (1 if i < n % w else 0) for i in range(w)]


class TorchDistBackend:
    def __init__(
        self,
        *,
        rank: int,
        world_size: int,
        groups: dict[str, Any] | None = None,
        device: str = "cpu",
        mirror_of: int | None = None,
    ):
        self.rank, self.world, self.device = rank, world_size, device
        self.groups = groups or {}
        self.mirror_of = mirror_of
        self.pending: dict[int, tuple[Any, int]] = {}
        self.seq_index: dict[int, int] = {}
        self._cur = {"wait": 0, "step_wait": 0, "async": 0}
        self._counts: dict[str, dict[str, int]] = {}
        self.iter_wait_ns: list[int] = []
        self.iter_step_wait_ns: list[int] = []
        self.iter_async_ns: list[int] = []
        self.last_counts: dict[str, dict[str, int]] = {}

    # -- buffers -----------------------------------------------------------------------------
    def _alloc(self, b: Buf, rows: int | None = None):
        import torch

        shape = list(b.shape) or [1]
        if rows is not None:
            shape[0] = rows
        return torch.zeros(shape, dtype=_dtype(b.dtype), device=self.device)

    def _peer(self, p: int) -> int:
        if self.mirror_of is not None:
            return (self.rank + p - self.mirror_of) % self.world
        return p % self.world

    # -- the seam ----------------------------------------------------------------------------
    def prepare(self, call: CollectiveCall, index: int) -> Callable[[], None]:
        k = call.kind
        if call.seq is not None and k != CollKind.WAIT:
            self.seq_index[call.seq] = index
        if k == CollKind.WAIT:
            target = self.seq_index.get(call.seq) if call.seq is not None else None

            def wait() -> None:
                if target is not None:
                    self.wait(target, in_step=False)

            return wait
        ins = call.inputs or call.outputs
        if not ins and k != CollKind.BARRIER:
            raise DispatchError(f"{call.describe()}: no tensor recorded", SkipReason.COLLECTIVE_UNSUPPORTED)
        build = BUILDERS.get(k)
        if build is None:  # pragma: no cover - every CollKind but WAIT has a builder
            raise DispatchError(f"{call.describe()}", SkipReason.COLLECTIVE_UNSUPPORTED)
        run, nbytes = build(self, call, ins, self.groups.get(call.pg))
        kind, is_async, pending = k.value, call.async_op, self.pending
        counts = self._counts

        def step() -> None:
            t0 = time.perf_counter_ns()
            work = run(is_async)
            if is_async and work is not None:
                pending[index] = (work, t0)
            e = counts.setdefault(kind, {"count": 0, "bytes": 0})
            e["count"] += 1
            e["bytes"] += nbytes

        return step

    def wait(self, index: int, in_step: bool = True) -> None:
        item = self.pending.pop(index, None)
        if item is None:
            return
        work, t_issue = item
        t0 = time.perf_counter_ns()
        work.wait()
        t1 = time.perf_counter_ns()
        self._cur["wait"] += t1 - t0
        if in_step:
            self._cur["step_wait"] += t1 - t0
        self._cur["async"] += t1 - t_issue

    def drain(self) -> None:
        for index in list(self.pending):
            self.wait(index, in_step=False)

    def end_iteration(self, measured: bool) -> None:
        """Close one iteration's accounting (the session calls it after each iteration)."""
        if measured:
            self.iter_wait_ns.append(self._cur["wait"])
            self.iter_step_wait_ns.append(self._cur["step_wait"])
            self.iter_async_ns.append(self._cur["async"])
            self.last_counts = {k: dict(v) for k, v in self._counts.items()}
        self._cur = {"wait": 0, "step_wait": 0, "async": 0}
        self._counts.clear()


# -- one builder per collective kind: (backend, call, its recorded tensors, process group) ->
# (run(async_op) -> work, bytes moved); buffers are allocated here, once, not per iteration
Run = Callable[[bool], object]
Builder = Callable[[TorchDistBackend, CollectiveCall, list[Buf], Any], tuple[Run, int]]


def _all_reduce(be: TorchDistBackend, call: CollectiveCall, ins: list[Buf], group: Any) -> tuple[Run, int]:
    import torch.distributed as dist

    bufs = [be._alloc(b) for b in ins]

    def run(a: bool) -> object:
        works = [dist.all_reduce(t, group=group, async_op=a) for t in bufs]
        return works[-1]

    return run, sum(t.nbytes for t in bufs)


def _rooted(be: TorchDistBackend, call: CollectiveCall, ins: list[Buf], group: Any) -> tuple[Run, int]:
    """broadcast / reduce: a root is the same global rank on every rank, also under SPMD."""
    import torch.distributed as dist

    bufs = [be._alloc(b) for b in ins]
    root = call.root % be.world
    fn = dist.broadcast if call.kind == CollKind.BROADCAST else dist.reduce
    key = "src" if call.kind == CollKind.BROADCAST else "dst"

    def run(a: bool) -> object:
        works = [fn(t, **{key: root}, group=group, async_op=a) for t in bufs]
        return works[-1]

    return run, sum(t.nbytes for t in bufs)


def _all_to_all(be: TorchDistBackend, call: CollectiveCall, ins: list[Buf], group: Any) -> tuple[Run, int]:
    import torch.distributed as dist

    w = be.world
    if call.list_form:
        if len(call.inputs) != w or len(call.outputs) != w:
            raise DispatchError(
                f"{call.describe()}: {len(call.inputs)} tensors recorded for {w} ranks",
                SkipReason.COLLECTIVE_UNSUPPORTED,
            )
        srcs = [be._alloc(b) for b in call.inputs]
        dsts = [be._alloc(b) for b in call.outputs]
        return (lambda a: dist.all_to_all(dsts, srcs, group=group, async_op=a)), sum(t.nbytes for t in srcs)
    b_in = call.inputs[0]
    b_out = call.outputs[0] if call.outputs else b_in
    rows = b_in.shape[0] if b_in.shape else 1
    in_s, out_s = list(call.in_splits), list(call.out_splits)
    if be.mirror_of is not None or (in_s and len(in_s) != w) or (not in_s and rows % w):
        # SPMD: every rank sends what the recorded rank sends; rank r receives s[r] rows from each
        in_s = in_s if len(in_s) == w else _even(rows, w)
        out_s = [in_s[be.rank]] * w
    src = be._alloc(b_in, rows=sum(in_s) if in_s else None)
    dst = be._alloc(b_out, rows=sum(out_s) if out_s else None)
    ins_, outs_ = in_s or None, out_s or None
    return (lambda a: dist.all_to_all_single(dst, src, outs_, ins_, group=group, async_op=a)), src.nbytes


def _all_gather(be: TorchDistBackend, call: CollectiveCall, ins: list[Buf], group: Any) -> tuple[Run, int]:
    import torch.distributed as dist

    w, b_in = be.world, call.inputs[0]
    src = be._alloc(b_in)
    if call.list_form:
        dsts = [be._alloc(b_in) for _ in range(w)]
        return (lambda a: dist.all_gather(dsts, src, group=group, async_op=a)), src.nbytes
    rows = (b_in.shape[0] if b_in.shape else 1) * w
    dst = be._alloc(b_in, rows=rows) if b_in.shape else be._alloc(Buf(shape=(w,), dtype=b_in.dtype))
    return (lambda a: dist.all_gather_into_tensor(dst, src, group=group, async_op=a)), src.nbytes


def _reduce_scatter(be: TorchDistBackend, call: CollectiveCall, ins: list[Buf], group: Any) -> tuple[Run, int]:
    import torch.distributed as dist

    w = be.world
    b_out = call.outputs[0] if call.outputs else call.inputs[0]
    dst = be._alloc(b_out)
    if call.list_form:
        srcs = [be._alloc(b_out) for _ in range(w)]
        return (lambda a: dist.reduce_scatter(dst, srcs, group=group, async_op=a)), sum(t.nbytes for t in srcs)
    src = be._alloc(b_out, rows=(b_out.shape[0] if b_out.shape else 1) * w)
    return (lambda a: dist.reduce_scatter_tensor(dst, src, group=group, async_op=a)), src.nbytes


def _barrier(be: TorchDistBackend, call: CollectiveCall, ins: list[Buf], group: Any) -> tuple[Run, int]:
    import torch.distributed as dist

    return (lambda a: dist.barrier(group=group, async_op=a)), 0


def _p2p(be: TorchDistBackend, call: CollectiveCall, ins: list[Buf], group: Any) -> tuple[Run, int]:
    """send / recv: issued as isend/irecv; a blocking call waits for its works."""
    import torch.distributed as dist

    bufs = [be._alloc(b) for b in ins]
    peer = be._peer(call.root)
    if peer == be.rank:
        raise DispatchError(f"{call.describe()}: peer is this rank", SkipReason.COLLECTIVE_UNSUPPORTED)
    op = dist.isend if call.kind == CollKind.SEND else dist.irecv

    def run(a: bool) -> object:
        works = [op(t, peer, group=group) for t in bufs]
        if not a:
            for wk in works:
                if wk is not None:
                    wk.wait()
        return works[-1]

    return run, sum(t.nbytes for t in bufs)


def _gather_scatter(be: TorchDistBackend, call: CollectiveCall, ins: list[Buf], group: Any) -> tuple[Run, int]:
    import torch.distributed as dist

    t = be._alloc(ins[0])
    root = call.root % be.world
    lst = [be._alloc(ins[0]) for _ in range(be.world)] if be.rank == root else None
    if call.kind == CollKind.GATHER:
        return (lambda a: dist.gather(t, gather_list=lst, dst=root, group=group, async_op=a)), t.nbytes
    return (lambda a: dist.scatter(t, scatter_list=lst, src=root, group=group, async_op=a)), t.nbytes


BUILDERS: dict[CollKind, Builder] = {
    CollKind.ALL_REDUCE: _all_reduce,
    CollKind.BROADCAST: _rooted,
    CollKind.REDUCE: _rooted,
    CollKind.ALL_TO_ALL: _all_to_all,
    CollKind.ALL_GATHER: _all_gather,
    CollKind.REDUCE_SCATTER: _reduce_scatter,
    CollKind.BARRIER: _barrier,
    CollKind.SEND: _p2p,
    CollKind.RECV: _p2p,
    CollKind.GATHER: _gather_scatter,
    CollKind.SCATTER: _gather_scatter,
}
