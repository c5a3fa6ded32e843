"""Number of layers: duplicate a module's tasks (forward and backward) and rewire them.

How: for every module annotation `nn.Module: NAME` with NAME fully matching `module`, the
forward span (the annotation and everything inside it on its thread, plus GPU work launched
from it) is copied `copies` times right after the original, and every later event of the rank
moves back by the inserted time (enclosing spans grow). The backward span is the range of
autograd nodes whose sequence numbers belong to the forward ops, and is copied the same way.
The graph is then built from the rewritten events, so copies get their launch, sync and
thread edges like the original ("rewired like the original").

The optimizer's time grows with the parameter count: with an ET, the module's share of the
parameters is read from the tensors the optimizer's ops take (storages also used by the
module's forward ops); without one, from the module's share of forward time. Optimizer-phase
tasks are scaled by 1 + copies x share.

Assumptions: copies behave like the original (same shapes, same kernels, same overheads);
activation memory and cache effects of a deeper model are ignored.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Annotated

import numpy as np
import pandas as pd

from engine.rules import Between
from engine.simulate.whatif.spec import Edit, register
from engine.trace.vocab import GPU_CATS
from engine.user_regex import Regex, compile_user

if TYPE_CHECKING:
    from engine.simulate.whatif.context import EditContext
    from engine.trace.model import Trace

OPT_SPAN = re.compile(r"^## optimizer ##$|^Optimizer\.step")


def _end(ev: pd.DataFrame) -> np.ndarray:
    return ev["ts_us"].to_numpy(np.float64) + ev["dur_us"].to_numpy(np.float64)


def insert_time(ev: pd.DataFrame, rank: int, at: float, length: float) -> pd.DataFrame:
    """Open a gap of `length` us at time `at` on one rank: later events move, spanning ones grow."""
    ts = ev["ts_us"].to_numpy(np.float64).copy()
    dur = ev["dur_us"].to_numpy(np.float64).copy()
    on = ev["rank"].to_numpy() == rank
    later = on & (ts >= at)
    span = on & (ts < at) & (ts + dur > at)
    ts[later] += length
    dur[span] += length
    ev = ev.copy()
    ev["ts_us"] = ts
    ev["dur_us"] = dur
    return ev


def span_rows(ev: pd.DataFrame, head: int) -> np.ndarray:
    """Rows inside host event `head`'s span on its thread, plus GPU tasks they launched."""
    r = ev.iloc[head]
    return _span_rows(ev, head, float(r["ts_us"]), float(r["ts_us"] + r["dur_us"]))


def _span_rows(ev: pd.DataFrame, anchor: int, lo: float, hi: float) -> np.ndarray:
    """Rows on `anchor`'s thread within [lo, hi], plus the GPU tasks they launched."""
    r = ev.iloc[anchor]
    ts = ev["ts_us"].to_numpy(np.float64)
    same = (
        (ev["rank"].to_numpy() == r["rank"])
        & (ev["pid"].astype(str).to_numpy() == str(r["pid"]))
        & (ev["tid"].astype(str).to_numpy() == str(r["tid"]))
    )
    rows = np.flatnonzero(same & (ts >= lo) & (_end(ev) <= hi + 1e-9))
    corr = ev["correlation"].to_numpy(dtype=np.float64, na_value=np.nan)
    cset = corr[rows][np.isfinite(corr[rows])]
    if len(cset):
        gpu = ev["cat"].astype(str).isin(GPU_CATS).to_numpy() & (ev["rank"].to_numpy() == r["rank"])
        rows = np.union1d(rows, np.flatnonzero(gpu & np.isin(corr, cset)))
    return rows


def duplicate(
    ev: pd.DataFrame, rows: np.ndarray, lo: float, hi: float, rank: int, copies: int, tag: str
) -> pd.DataFrame:
    """Insert `copies` copies of `rows` (whose host span is [lo, hi]) right after hi."""
    length = hi - lo
    block = ev.iloc[rows]
    corr_base = float(np.nanmax(ev["correlation"].to_numpy(dtype=np.float64, na_value=np.nan), initial=0.0)) + 1
    out = insert_time(ev, rank, hi, copies * length)
    added = []
    next_ev = int(ev["ev"].max()) + 1
    for c in range(1, copies + 1):
        cp = block.copy()
        cp["ts_us"] = cp["ts_us"].to_numpy(np.float64) + c * length
        if cp["correlation"].notna().any():
            cp["correlation"] = cp["correlation"] + int(corr_base) * c
        cp["_copy"] = f"{tag}#{c}"
        cp["ev"] = np.arange(next_ev, next_ev + len(cp), dtype=np.int64)
        next_ev += len(cp)
        added.append(cp)
    out = pd.concat([out, *added], ignore_index=True)
    for col in ("cat", "name", "pid", "tid"):
        if col in ev and isinstance(ev[col].dtype, pd.CategoricalDtype):
            out[col] = out[col].astype("category")
    return out


def param_share(trace: Trace, ev: pd.DataFrame, rows: np.ndarray) -> float | None:
    """Share of the model's parameter elements used by the ops of `rows` (needs an ET)."""
    ops, ten = trace.ops, trace.tensors
    if ops is None or len(ops) == 0 or "phase" not in ops:
        return None
    opt_ops = ops.loc[ops["phase"].astype(str) == "optimizer", "id"].to_numpy()
    fwd_ops = ops.loc[ops["phase"].astype(str) == "forward", "id"].to_numpy()
    tin = ten[ten["io"].astype(str) == "in"]
    opt_st = set(tin.loc[tin["op_id"].isin(opt_ops) & (tin["numel"] > 1), "storage_id"].tolist())
    # parameters: read by forward ops and by the optimizer, never written by a forward op
    # (storage ids are reused after frees, so an activation can share an id with a parameter)
    writers = ops.loc[(ops["phase"].astype(str) == "forward") & (ops["category"].astype(str) != "view"), "id"]
    made = set(ten.loc[(ten["io"].astype(str) == "out") & ten["op_id"].isin(writers), "storage_id"].tolist())
    fwd = tin[tin["op_id"].isin(fwd_ops) & tin["storage_id"].isin(opt_st - made)]
    if fwd.empty:
        return None
    opt_t = tin[tin["op_id"].isin(opt_ops) & tin["storage_id"].isin(set(fwd["storage_id"].tolist()))]
    sizes = opt_t.groupby("storage_id")["numel"].max()  # as the optimizer sees it (no expanded views)
    mine_ops = ev["op_id"].iloc[rows].dropna().astype(np.int64).to_numpy() if "op_id" in ev else []
    mine = fwd.loc[fwd["op_id"].isin(mine_ops), "storage_id"].unique()
    total = float(sizes.sum())
    return float(sizes.loc[mine].sum()) / total if total > 0 else None


@register("layers", stage="events")
class Layers(Edit):
    module: Annotated[str | None, Regex()] = None  # None: the repeated block stack (whatif/blocks.py)
    copies: Annotated[int, Between(1, 1000, why="a typo must not schedule a huge graph")] = 1

    def apply(self, ctx: EditContext) -> None:
        ev = ctx.events.reset_index(drop=True)
        if "_scale" not in ev:
            ev["_scale"] = 1.0
        names = ev["name"].astype(str)
        module, found = self.module, None
        if module is None:
            from engine.simulate.whatif.blocks import find_block_stack
            from engine.simulate.whatif.spec import SpecError

            module, found = find_block_stack(ev)
            if module is None:
                cands = "; ".join(found["candidates"]) or "no indexed nn.Module or user annotation"
                raise SpecError("module", f"no repeated block stack found (candidates: {cands}); give a module regex")
            ctx.warnings.append(
                f"layers: no module given; copying the repeated block stack {module!r} "
                f"({found['instances']} {found['source']} instances)"
            )
        rx = compile_user(module, "module")
        heads = [
            int(i)
            for i in np.flatnonzero(names.str.startswith("nn.Module: ").to_numpy())
            if rx.fullmatch(names.iat[i][len("nn.Module: ") :])
        ]
        if found is not None and found.get("source") == "user annotation":
            user = (ev["cat"].astype(str) == "user_annotation").to_numpy()
            heads = [int(i) for i in np.flatnonzero(user) if rx.fullmatch(names.iat[i])]
        if not heads:
            from engine.simulate.whatif.spec import SpecError

            raise SpecError("module", f"no 'nn.Module: ...' annotation fully matches {module!r}")
        head_ev = ev["ev"].to_numpy()[heads]
        head_ts = ev["ts_us"].to_numpy()[heads]
        shares: dict[str, float] = {}  # per module name: every recorded step repeats the modules
        for hid in head_ev[np.argsort(-head_ts)]:  # latest first: earlier positions stay valid
            i = int(np.flatnonzero(ev["ev"].to_numpy() == hid)[0])
            rank = int(ev["rank"].iat[i])
            rows = span_rows(ev, i)
            share = param_share(ctx.trace, ev, rows)
            fwd_lo, fwd_hi = float(ev["ts_us"].iat[i]), float(ev["ts_us"].iat[i] + ev["dur_us"].iat[i])
            seqs = ev["seq_num"].iloc[rows].dropna().unique() if "seq_num" in ev else []
            bwd = np.flatnonzero(
                names.str.startswith("autograd::engine::evaluate_function").to_numpy()
                & ev["seq_num"].isin(seqs).to_numpy()
                & (ev["rank"].to_numpy() == rank)
            )
            if share is None:
                share = self._time_share(ev, fwd_hi - fwd_lo)
            shares[names.iat[i]] = share
            if len(bwd):  # backward first (it is later in time), then forward
                lo = float(ev["ts_us"].to_numpy()[bwd].min())
                hi = float(_end(ev)[bwd].max())
                b_rows = self._range_rows(ev, bwd[0], lo, hi)
                self._check_size(len(ev) + self.copies * len(b_rows), names.iat[i])
                ev = duplicate(ev, b_rows, lo, hi, rank, self.copies, f"bwd:{hid}")
            else:
                ctx.warnings.append(f"layers: no backward nodes found for module event {hid}; forward only")
            i = int(np.flatnonzero(ev["ev"].to_numpy() == hid)[0])
            f_rows = span_rows(ev, i)
            self._check_size(len(ev) + self.copies * len(f_rows), names.iat[i])
            ev = duplicate(ev, f_rows, fwd_lo, fwd_hi, rank, self.copies, f"fwd:{hid}")
            names = ev["name"].astype(str)
        share_total = float(sum(shares.values()))
        opt = np.flatnonzero(names.map(lambda s: bool(OPT_SPAN.search(s))).to_numpy())
        factor = 1.0 + self.copies * share_total
        in_opt = np.zeros(len(ev), bool)  # nested optimizer spans: each task scaled once
        for oi in opt:
            in_opt[span_rows(ev, int(oi))] = True
        ev.loc[in_opt, "_scale"] = ev.loc[in_opt, "_scale"].to_numpy() * factor
        ctx.events = ev
        ctx.report.setdefault("layers", []).append(
            {
                "module": module,
                "inferred": found,
                "matched": len(heads),
                "copies": self.copies,
                "param_share": round(share_total, 4),
                "optimizer_factor": round(factor, 4),
            }
        )

    def _check_size(self, n_events: int, module: str) -> None:
        """Refuse a copy step whose result would not fit (engine.simulate.budget), before making it."""
        from engine.errors import TraceError
        from engine.simulate.budget import check_tasks
        from engine.simulate.whatif.spec import SpecError

        try:
            check_tasks(n_events, f"copying {module!r} {self.copies:,} times")
        except TraceError as exc:
            raise SpecError("copies", exc.problem + "; lower copies or match fewer modules") from None

    @staticmethod
    def _range_rows(ev: pd.DataFrame, anchor: int, lo: float, hi: float) -> np.ndarray:
        return _span_rows(ev, anchor, lo, hi)

    @staticmethod
    def _time_share(ev: pd.DataFrame, span_us: float) -> float:
        names = ev["name"].astype(str)
        fwd = ev.loc[names == "## forward ##", "dur_us"]
        return float(span_us / fwd.iloc[0]) if len(fwd) and fwd.iloc[0] > 0 else 0.0
