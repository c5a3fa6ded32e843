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
        import torch.distributed as dist

        k, w, group = call.kind, self.world, self.groups.get(call.pg)
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
        run: Callable[[bool], object]
        nbytes = 0
        if k == CollKind.ALL_REDUCE:
            bufs = [self._alloc(b) for b in ins]
            nbytes = sum(t.nbytes for t in bufs)

            def run(a, bufs=bufs):
                works = [dist.all_reduce(t, group=group, async_op=a) for t in bufs]
                return works[-1]
        elif k in (CollKind.BROADCAST, CollKind.REDUCE):
            bufs = [self._alloc(b) for b in ins]
            nbytes = sum(t.nbytes for t in bufs)
            root = call.root % w  # a root is the same global rank on every rank, also under SPMD
            fn = dist.broadcast if k == CollKind.BROADCAST else dist.reduce
            key = "src" if k == CollKind.BROADCAST else "dst"

            def run(a, bufs=bufs, fn=fn, root=root, key=key):
                works = [fn(t, **{key: root}, group=group, async_op=a) for t in bufs]
                return works[-1]
        elif k == CollKind.ALL_TO_ALL and call.list_form:
            if len(call.inputs) != w or len(call.outputs) != w:
                raise DispatchError(
                    f"{call.describe()}: {len(call.inputs)} tensors recorded for {w} ranks",
                    SkipReason.COLLECTIVE_UNSUPPORTED,
                )
            src = [self._alloc(b) for b in call.inputs]
            dst = [self._alloc(b) for b in call.outputs]
            nbytes = sum(t.nbytes for t in src)

            def run(a, src=src, dst=dst):
                return dist.all_to_all(dst, src, group=group, async_op=a)
        elif k == CollKind.ALL_TO_ALL:
            b_in = call.inputs[0]
            b_out = call.outputs[0] if call.outputs else b_in
            rows = b_in.shape[0] if b_in.shape else 1
            in_s, out_s = list(call.in_splits), list(call.out_splits)
            if self.mirror_of is not None or (in_s and len(in_s) != w) or (not in_s and rows % w):
                # SPMD: every rank sends what the recorded rank sends; rank r receives s[r] rows from each
                in_s = in_s if len(in_s) == w else _even(rows, w)
                out_s = [in_s[self.rank]] * w
            src = self._alloc(b_in, rows=sum(in_s) if in_s else None)
            dst = self._alloc(b_out, rows=sum(out_s) if out_s else None)
            nbytes = src.nbytes

            def run(a, src=src, dst=dst, in_s=in_s or None, out_s=out_s or None):
                return dist.all_to_all_single(dst, src, out_s, in_s, group=group, async_op=a)
        elif k == CollKind.ALL_GATHER:
            b_in = call.inputs[0]
            src = self._alloc(b_in)
            nbytes = src.nbytes
            if call.list_form:
                dst = [self._alloc(b_in) for _ in range(w)]

                def run(a, src=src, dst=dst):
                    return dist.all_gather(dst, src, group=group, async_op=a)
            else:
                rows = (b_in.shape[0] if b_in.shape else 1) * w
                dst = self._alloc(b_in, rows=rows) if b_in.shape else self._alloc(Buf(shape=(w,), dtype=b_in.dtype))

                def run(a, src=src, dst=dst):
                    return dist.all_gather_into_tensor(dst, src, group=group, async_op=a)
        elif k == CollKind.REDUCE_SCATTER:
            b_out = call.outputs[0] if call.outputs else call.inputs[0]
            dst = self._alloc(b_out)
            if call.list_form:
                src = [self._alloc(b_out) for _ in range(w)]
                nbytes = sum(t.nbytes for t in src)

                def run(a, src=src, dst=dst):
                    return dist.reduce_scatter(dst, src, group=group, async_op=a)
            else:
                rows = (b_out.shape[0] if b_out.shape else 1) * w
                src = self._alloc(b_out, rows=rows)
                nbytes = src.nbytes

                def run(a, src=src, dst=dst):
                    return dist.reduce_scatter_tensor(dst, src, group=group, async_op=a)
        elif k == CollKind.BARRIER:

            def run(a):
                return dist.barrier(group=group, async_op=a)
        elif k in (CollKind.SEND, CollKind.RECV):
            bufs = [self._alloc(b) for b in ins]
            nbytes = sum(t.nbytes for t in bufs)
            peer = self._peer(call.root)
            if peer == self.rank:
                raise DispatchError(f"{call.describe()}: peer is this rank", SkipReason.COLLECTIVE_UNSUPPORTED)
            send = k == CollKind.SEND

            def run(a, bufs=bufs, peer=peer, send=send):
                works = [(dist.isend if send else dist.irecv)(t, peer, group=group) for t in bufs]
                if not a:
                    for wk in works:
                        if wk is not None:
                            wk.wait()
                return works[-1]
        elif k in (CollKind.GATHER, CollKind.SCATTER):
            b = ins[0]
            t = self._alloc(b)
            nbytes = t.nbytes
            root = call.root % w
            lst = [self._alloc(b) for _ in range(w)] if self.rank == root else None
            if k == CollKind.GATHER:

                def run(a, t=t, lst=lst, root=root):
                    return dist.gather(t, gather_list=lst, dst=root, group=group, async_op=a)
            else:

                def run(a, t=t, lst=lst, root=root):
                    return dist.scatter(t, scatter_list=lst, src=root, group=group, async_op=a)
        else:  # pragma: no cover - every CollKind is handled above
            raise DispatchError(f"{call.describe()}", SkipReason.COLLECTIVE_UNSUPPORTED)
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
