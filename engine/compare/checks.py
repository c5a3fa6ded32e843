"""Is this replay result a finished replay of *this* original? Checked before comparing.

Why: `compare` used to accept anything: a replay of another trace (exit 0, error 376,826 %), a
result left by a killed run, a folder holding only the replay's Kineto trace, a GPU original
against a CPU replay. Each of these produced confident, meaningless numbers. Now:
  * a replay result records the content hashes of the ET it ran (and, for a composed benchmark,
    of the traces it was composed from, engine.compose.marker); one that matches none of the
    original's ET hashes is refused;
  * a folder whose newest run never finished (a RUNNING marker left by a killed run,
    engine.outdir) or that holds a replay Kineto trace but no replay.json is refused;
  * per_op rows must be objects (a `null` row is refused with its index, never a crash:
    `ReplayResult.from_json` checks that as it reads);
  * a device mismatch (GPU original, CPU replay) is a warning: the comparison is still useful
    for coverage and op mix, but not for times.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from engine.errors import TraceError
from engine.trace.vocab import GPU_CATS

if TYPE_CHECKING:
    from engine.replay.result import ReplayResult
    from engine.trace.model import Trace


def check_replay_folder(path: str | os.PathLike) -> None:
    """Refuse a replay output folder whose newest run did not finish, or a Kineto-only leftover."""
    from engine.outdir import stale_run

    p = Path(path)
    folder = p if p.is_dir() else p.parent
    why = stale_run(folder)
    if why:
        raise TraceError(f"stale replay folder: {why}; its replay.json (if any) is from an earlier run", folder)
    if p.is_dir() and not (p / "replay.json").is_file():
        leftovers = sorted(f.name for f in p.glob("replay_kineto*.json*"))
        if leftovers:
            raise TraceError(
                f"holds the replay's Kineto trace ({leftovers[0]}) but no replay.json: the replay did not finish "
                "(run it again), or pass the Kineto file itself to compare traces",
                p,
            )


def original_hashes(trace: Trace) -> set[str]:
    return {
        str(s["sha256"])
        for s in (getattr(trace, "meta", {}) or {}).get("sources", [])
        if s.get("kind") == "execution_trace" and s.get("sha256")
    }


def check_source(original: Trace, replay: ReplayResult, path: str | None, warnings: list[str]) -> None:
    """Refuse a replay whose recorded source hashes match none of the original's ETs."""
    src = replay.source
    mine = original_hashes(original)
    if not isinstance(src, dict) or not (src.get("traces") or src.get("derived_from")):
        if mine:
            warnings.append(
                "replay result records no source trace hash (written by an older version): "
                "cannot confirm it is a replay of this original"
            )
        return
    theirs = {str(t.get("sha256")) for t in src.get("traces") or [] if isinstance(t, dict) and t.get("sha256")}
    theirs |= {str(h) for h in src.get("derived_from") or []}
    if mine and theirs and not (mine & theirs):
        ran = next((t.get("path") for t in src.get("traces") or [] if isinstance(t, dict)), "?")
        raise TraceError(
            f"replay result is a replay of another trace ({ran}, sha256 {sorted(theirs)[0][:12]}...), "
            f"not of this original (sha256 {sorted(mine)[0][:12]}...)",
            path,
        )


def original_device(original: Trace, meta: dict | None) -> str | None:
    """'cuda' / 'cpu' for the original: the capture meta, else GPU activity or CUDA tensors."""
    dev = (meta or {}).get("device")
    if dev:
        return "cuda" if str(dev).startswith("cuda") else str(dev)
    ev = getattr(original, "events", None)
    if ev is not None and len(ev) and "cat" in ev and ev["cat"].astype(str).isin(GPU_CATS).any():
        return "cuda"
    t = getattr(original, "tensors", None)
    if t is not None and len(t) and "device" in t:
        devs = set(t["device"].astype(str).unique().tolist())
        if any(d.startswith("cuda") for d in devs):
            return "cuda"
        if devs & {"cpu"}:
            return "cpu"
    return None


def check_device(original: Trace, meta: dict | None, replay: ReplayResult, warnings: list[str]) -> None:
    o = original_device(original, meta)
    r = replay.device
    r_kind = "cuda" if r.startswith("cuda") else (r or None)
    if o and r_kind and o != r_kind:
        warnings.append(
            f"device mismatch: the original ran on {o}, the replay on {r}; "
            "times are not comparable (coverage and op mix still are)"
        )


__all__ = ["check_device", "check_replay_folder", "check_source", "original_device"]
