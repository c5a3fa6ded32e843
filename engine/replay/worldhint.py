"""What a one-rank ET of a multi-rank job records, and how to replay it with its collectives.

A single-process replay skips every collective ("collective (single-process replay)"). When the
trace holds one rank of a larger job (issue 21 item 7) that is silent loss: this module reads
the world the trace records (the default process group's size from `## process_group:init ##`,
else Kineto's `distributedInfo.world_size`, else the largest `pg_size` a collective names) and
the recorded process groups, and words the one-line hint: replay it as that many symmetric ranks
with `--mirror-rank R --world-size N`.
"""

from __future__ import annotations

import json
from typing import Any

from engine.replay.reasons import SkipReason


def recorded_world_size(trace: Any) -> int | None:
    """The job's world size as the trace records it; None when it records none."""
    from engine.replay.seqcheck import recorded_group_configs

    ops = trace.ops
    names = ops["name"].astype(str) if len(ops) else None
    for g in recorded_group_configs(trace):
        if str(g.get("pg_name", "")) == "0":
            size = g.get("group_size") or len(g.get("ranks") or [])
            if isinstance(size, int) and size > 0:
                return size
    w = (trace.meta or {}).get("world_size")
    if isinstance(w, int) and w > 0:
        return w
    best = 0
    if names is not None and "attrs" in ops.columns:
        for attrs in ops.loc[ops["category"].astype(str) == "communication", "attrs"]:
            try:
                a = json.loads(attrs) if isinstance(attrs, str) and attrs else {}
            except ValueError:
                continue
            size = a.get("pg_size") if isinstance(a, dict) else None
            if isinstance(size, int) and size > best:
                best = size
    return best or None


def mirror_hint(trace: Any, rank: int | None, coverage: dict, source: str | None = None) -> dict | None:
    """{world_size, rank, groups, skipped, command, text} when a single-process replay skipped the
    collectives of a trace that records a world of >1 ranks but holds fewer; else None."""
    skipped = int((coverage.get("by_reason") or {}).get(SkipReason.COLLECTIVE_SINGLE_PROCESS.value, 0))
    if not skipped or not len(trace.ops):
        return None
    held = sorted(int(r) for r in trace.ops["rank"].unique())
    world = recorded_world_size(trace)
    if world is None or world <= len(held):
        return None
    from engine.replay.seqcheck import process_groups

    r = rank if rank is not None else held[0]
    groups = process_groups(trace)
    names = ", ".join(f"{g['name']} {g['ranks'] or '?'}" for g in groups) or "the default group only"
    cmd = f"mystique replay {source or 'TRACE'} --mirror-rank {r} --world-size {world}"
    text = (
        f"this ET is rank {r} of a {world}-rank job (process groups: {names}); its {skipped} collectives "
        f"were skipped as single-process replay: run `{cmd}` to replay it on {world} symmetric ranks"
    )
    return {"world_size": world, "rank": r, "groups": groups, "skipped": skipped, "command": cmd, "text": text}


__all__ = ["mirror_hint", "recorded_world_size"]
