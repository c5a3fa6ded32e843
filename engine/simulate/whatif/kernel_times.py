"""Oracle kernel times: each GPU task takes its duration from another trace of the same program
(another GPU, another library version, a microbenchmark run): Lumos's "what if the kernels took
what they take on the new GPU", answered with measured kernel times.

How: on both sides, every GPU task (kernel, memcpy, memset) belongs to the outermost operator
around its launch (launch_ops.top_ops). The two sequences of launching operators, keyed by name
and recorded "Input Dims", are aligned in order (`align`: difflib's longest matching blocks, a linear greedy pass on long
traces); a GPU task of
a matched operator takes the duration of the task at the same position within the other side's
operator. Where the operator launches a different number of GPU tasks there (vendors split work
differently: a fused kernel, an extra memset), its tasks share the other side's total for that
operator in their own proportions. Unmatched operators keep their own kernel times. When one side recorded no
input dims (no `record_shapes`), both match on name and order alone (`matched_on` says which). Below
`MIN_MATCHED` of this trace's GPU tasks matched, the edit refuses, naming what did not match.

Assumptions: the two traces ran the same program with the same shapes; the host side, launch
order and dependencies stay this trace's (only GPU durations change); kernels of an operator that
did not match keep their measured time.
"""

from __future__ import annotations

import difflib
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import numpy as np

from engine.rules import NonEmpty
from engine.simulate.whatif.launch_ops import task_dims, top_ops
from engine.simulate.whatif.spec import Edit, SpecError, register

if TYPE_CHECKING:
    from engine.simulate.whatif.context import EditContext

MIN_MATCHED = 0.9


class Side:
    """One trace's launching operators in order: key (name, dims) and their GPU tasks in order."""

    def __init__(self, g, events, trace):
        t = g.tasks
        gpu = np.flatnonzero(t["gpu"].to_numpy(bool))
        top = top_ops(g)[gpu]
        dims = task_dims(g, events, trace)
        names = t["name"].astype(str).to_numpy()
        rank = t["rank"].to_numpy(np.int64)
        ts = t["ts_us"].to_numpy(np.float64)
        lt = np.where(g.launcher[gpu] >= 0, ts[np.maximum(g.launcher[gpu], 0)], ts[gpu])
        # operators by host start; GPU tasks without an operator share one key per launching call
        host_ts = np.where(top >= 0, ts[np.maximum(top, 0)], lt)
        order = np.lexsort((ts[gpu], lt, host_ts, rank[gpu]))
        self.gpu, self.top, self.dur = gpu[order], top[order], t["dur_us"].to_numpy(np.float64)[gpu[order]]
        self.rank = rank[self.gpu]
        self.ops: dict[int, list[tuple]] = {}  # rank -> [(key, [positions in self.gpu])]
        self.names = names
        self.has_dims = bool(dims)
        prev = None
        for pos, (r, op) in enumerate(zip(self.rank.tolist(), self.top.tolist())):
            key: tuple[str, tuple[tuple[int, ...], ...]] = ("(no operator)", ())
            if op >= 0:
                key = (names[op], tuple(tuple(s) for s in dims.get(op, ())))
            ident = (r, op if op >= 0 else -1 - pos)
            seq = self.ops.setdefault(r, [])
            if ident != prev:
                seq.append((key, []))
                prev = ident
            seq[-1][1].append(pos)


DIFFLIB_MAX = 4_000_000  # len(a) x len(b) up to which difflib aligns (its cost grows with the product)
WINDOW = 64  # the greedy alignment's look-ahead, in operators


def align(a: list, b: list) -> list[tuple[int, int]]:
    """Index pairs of equal keys of two operator sequences, in order. Identical sequences pair up
    directly; short ones by difflib (longest matching blocks); long ones greedily: equal heads
    pair, and at a difference the side whose next common key is nearer (within `WINDOW`) skips
    ahead (linear time: two runs of one program differ locally, an extra op here and there)."""
    if a == b:
        return list(zip(range(len(a)), range(len(b))))
    if len(a) * len(b) <= DIFFLIB_MAX:
        sm = difflib.SequenceMatcher(None, a, b, autojunk=False)
        return [(m.a + k, m.b + k) for m in sm.get_matching_blocks() for k in range(m.size)]
    pairs: list[tuple[int, int]] = []
    i = j = 0
    while i < len(a) and j < len(b):
        if a[i] == b[j]:
            pairs.append((i, j))
            i, j = i + 1, j + 1
            continue
        db = next((k for k in range(1, WINDOW) if j + k < len(b) and b[j + k] == a[i]), None)
        da = next((k for k in range(1, WINDOW) if i + k < len(a) and a[i + k] == b[j]), None)
        if db is not None and (da is None or db <= da):
            j += db
        elif da is not None:
            i += da
        else:
            i, j = i + 1, j + 1
    return pairs


def match(mine: Side, other: Side) -> tuple[np.ndarray, np.ndarray, Counter]:
    """New duration per GPU task of `mine` (NaN: unmatched), whether its operator re-split the
    other side's total, and the unmatched operator names with their GPU task counts."""
    new = np.full(len(mine.gpu), np.nan)
    split = np.zeros(len(mine.gpu), bool)
    missed: Counter = Counter()
    ranks_other = sorted(other.ops)
    for r, seq in mine.ops.items():
        oseq = other.ops.get(r) or (other.ops[ranks_other[0]] if len(ranks_other) == 1 else [])
        # a trace recorded without shapes (or a fleet rank read from a store) has no dims: then
        # both sides match on names and order alone
        use_dims = mine.has_dims and other.has_dims
        a = [k if use_dims else k[0] for k, _ in seq]
        b = [k if use_dims else k[0] for k, _ in oseq]
        hit = np.zeros(len(seq), bool)
        for ia, ib in align(a, b):
            hit[ia] = True
            pa, pb = seq[ia][1], oseq[ib][1]
            db = other.dur[pb]
            if len(pa) == len(pb):
                new[pa] = db
            else:
                own = mine.dur[pa]
                w = own / own.sum() if own.sum() > 0 else np.full(len(pa), 1 / len(pa))
                new[pa] = w * db.sum()
                split[pa] = True
        for ia in np.flatnonzero(~hit).tolist():
            missed[seq[ia][0][0]] += len(seq[ia][1])
    return new, split, missed


@register("kernel_times")
class KernelTimes(Edit):
    source: Annotated[str, NonEmpty()]  # the other trace of the same program

    def apply(self, ctx: EditContext) -> None:
        from engine.errors import TraceError
        from engine.simulate.graph import build_graph
        from engine.trace import load

        path = Path(self.source)
        if not path.exists():
            raise SpecError("source", f"{self.source}: no such file")
        try:
            other_trace = load(str(path))
        except TraceError as exc:
            raise SpecError("source", f"{self.source}: {exc}") from None
        if other_trace.events is None or not len(other_trace.events):
            raise SpecError("source", f"{self.source}: no Kineto events (kernel times need a Kineto trace)")
        g = ctx.graph
        mine = Side(g, ctx.events, ctx.trace)
        if not len(mine.gpu):
            raise SpecError("source", "this trace has no GPU tasks whose times could be replaced")
        og = build_graph(other_trace.events, ctx.config)
        other = Side(og, other_trace.events, other_trace)
        new, split, missed = match(mine, other)
        ok = np.isfinite(new)
        frac = float(ok.mean())
        if frac < MIN_MATCHED:
            worst = ", ".join(f"{name} x{n}" for name, n in missed.most_common(4))
            raise SpecError(
                "source",
                f"{self.source}: only {100 * frac:.1f} % of this trace's {len(new):,} GPU tasks matched an operator "
                f"of the same name and input dims there (need {100 * MIN_MATCHED:.0f} %; not the same program?); "
                f"unmatched: {worst}",
            )
        old = mine.dur
        f = np.ones(g.n_tasks)
        pos = ok & (old > 0)
        f[mine.gpu[pos]] = new[pos] / old[pos]
        g.scale_tasks(f)
        zero = ok & (old <= 0) & (new > 0)  # a zero-length task owns a zero segment: set it
        if zero.any():
            g.pt_d[g.tasks["ep"].to_numpy(np.int64)[mine.gpu[zero]]] = new[zero]
        ctx.report.setdefault("kernel_times", []).append(
            {
                "source": self.source,
                "gpu_tasks": len(new),
                "matched_fraction": round(frac, 4),
                "matched_time_fraction": round(float(old[ok].sum() / old.sum()) if old.sum() > 0 else 1.0, 4),
                "resplit_tasks": int(split.sum()),
                "matched_on": "name, input dims, order" if mine.has_dims and other.has_dims else "name, order",
                "gpu_ms_before": round(float(old.sum()) / 1e3, 3),
                "gpu_ms_after": round(float(np.where(ok, new, old).sum()) / 1e3, 3),
                "unmatched": dict(missed.most_common(5)),
            }
        )
