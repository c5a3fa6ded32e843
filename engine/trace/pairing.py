"""Is this Kineto trace the partner of this ET? (rank, process id, operator overlap)

Why: an ET of rank 0 loaded with the Kineto trace of rank 3 (or of another run) used to crash
the linker with an IndexError, or link a handful of ops by coincidence and report times that
belong to another process. When exactly one ET and one Kineto trace are loaded together the
user means them as a pair, so a mismatch is bad input: one `TraceError` naming the Kineto
file, the ranks, the process ids and how many ET ops it holds. Several files (a folder of
ranks) are paired per rank by the loader and are not checked here.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from engine.errors import TraceError

_PID = re.compile(rb'"pid"\s*:\s*(\d+)')
_EDGE = 4096
MIN_OVERLAP = 0.05  # below this fraction of ET ops found in the Kineto trace (with other pids): not a pair


def et_pid(data: bytes) -> int | None:
    """The top-level `pid` of an ET document (ETs write it before or after `nodes`)."""
    for part in (data[:_EDGE], data[-_EDGE:]):
        m = _PID.search(part)
        if m:
            return int(m.group(1))
    return None


def _pair(sources: list[dict]) -> tuple[dict, dict] | None:
    ets = [s for s in sources if s["kind"] == "execution_trace"]
    ks = [s for s in sources if s["kind"] == "kineto"]
    return (ets[0], ks[0]) if len(ets) == 1 and len(ks) == 1 else None


def rf_overlap(ops: pd.DataFrame, events: pd.DataFrame) -> tuple[int, int]:
    """(ET ops whose record-function id and name occur among the Kineto host events, ET ops)."""
    if len(ops) == 0:
        return 0, 0
    rf = ops["rf_id"].to_numpy()
    names = ops["name"].astype(str).to_numpy()
    ok = rf >= 0
    k_rf = events["rf_id"].to_numpy(dtype=np.int64, na_value=-1)
    if not (k_rf >= 0).any():
        k_rf = events["external_id"].to_numpy(dtype=np.int64, na_value=-1)
    k = set(zip(k_rf.tolist(), events["name"].astype(str).tolist()))
    hits = sum(1 for r, n in zip(rf[ok].tolist(), names[ok].tolist()) if (r, n) in k)
    return hits, int(ok.sum())


def _describe(et: dict, k: dict, hits: int, n: int) -> str:
    et_rank = "undeclared" if et.get("rank_declared") is None else et["rank_declared"]
    k_rank = "undeclared" if k.get("rank_in_file") is None else k["rank_in_file"]
    et_pid_s = et.get("pid") if et.get("pid") is not None else "?"
    k_pids = ",".join(map(str, k.get("pids") or [])) or "?"
    return (
        f"ET rank {et_rank} (pid {et_pid_s}) vs Kineto rank {k_rank} (pid {k_pids}); "
        f"{hits} of {n} ET ops occur in this Kineto trace"
    )


def check_ranks(sources: list[dict], ops: pd.DataFrame, events: pd.DataFrame) -> None:
    """Before linking: one ET and one Kineto trace that declare different ranks."""
    pair = _pair(sources)
    if pair is None:
        return
    et, k = pair
    if et.get("rank_declared") is None or k.get("rank_in_file") is None:
        return
    if int(et["rank_declared"]) != int(k["rank_in_file"]):
        hits, n = rf_overlap(ops, events)
        raise TraceError(
            f"Kineto trace is not the partner of {et['path']}: different ranks ({_describe(et, k, hits, n)}); "
            "give the Kineto trace of the same rank",
            k["path"],
        )


def check_link(sources: list[dict], link_info: dict | None) -> None:
    """After linking: other process ids and (almost) no ET op found in the Kineto trace."""
    pair = _pair(sources)
    if pair is None or not link_info:
        return
    et, k = pair
    n = int(link_info.get("et_ops") or 0)
    hits = int(link_info.get("linked") or 0)
    pids = k.get("pids") or []
    pid_differs = et.get("pid") is not None and bool(pids) and et["pid"] not in pids
    if n >= 20 and pid_differs and hits < MIN_OVERLAP * n:
        raise TraceError(
            f"Kineto trace is not the partner of {et['path']}: another process ({_describe(et, k, hits, n)}); "
            "give the Kineto trace captured with this ET",
            k["path"],
        )


def kineto_pids(events: pd.DataFrame) -> list[int]:
    """Process ids of a Kineto trace's host operators."""
    if len(events) == 0:
        return []
    host = events["cat"].astype(str).isin(["cpu_op", "user_annotation"])
    out = set()
    for p in events.loc[host, "pid"].astype(str).unique().tolist():
        try:
            out.add(int(float(p)))
        except ValueError:
            continue
    return sorted(out)


__all__ = ["check_link", "check_ranks", "et_pid", "kineto_pids", "rf_overlap"]
