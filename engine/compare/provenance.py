"""Provenance of a composed benchmark's ops: composed ET node id -> the original's node.

`engine.compose` renumbers nodes and writes, on each exported node, the documented key
`mystique_origin: {"id", "segment", "repeat", "source"}` (see engine.compose.build). A replay of
a composed ET reports the *composed* ids, so compare must map them back through this field;
matching by raw id would pair unrelated ops (an embedding_bag with a linear).
"""

from __future__ import annotations

import gzip
import os
from pathlib import Path
from typing import TYPE_CHECKING

from engine import jsonio

if TYPE_CHECKING:
    from engine.replay.result import ReplayResult

ORIGIN_KEY = "mystique_origin"


def read_provenance(et_path: str | os.PathLike) -> dict[int, dict]:
    """{composed node id: {"id", "segment", "repeat", "source", "name"}} from an exported ET;
    {} when the file is not a composed ET (no node carries the key) or cannot be read."""
    p = Path(str(et_path).split("!", 1)[0])
    try:
        raw = p.read_bytes()
        if raw[:2] == b"\x1f\x8b":
            raw = gzip.decompress(raw)
        doc = jsonio.loads(raw)
    except (OSError, ValueError, EOFError):
        return {}
    nodes = doc.get("nodes") if isinstance(doc, dict) else None
    out: dict[int, dict] = {}
    for n in nodes or []:
        o = n.get(ORIGIN_KEY) if isinstance(n, dict) else None
        if isinstance(o, dict) and "id" in o:
            out[int(n["id"])] = {**o, "id": int(o["id"]), "name": str(n.get("name", ""))}
    return out


def replay_provenance(replay: ReplayResult) -> dict[int, dict]:
    """Provenance for a replay result: from the ET it ran (`paths["et"]`), when composed."""
    et = replay.paths.get("et")
    return read_provenance(et) if et else {}


def rank_sides(replay: ReplayResult) -> list[tuple[int | None, list[dict], dict[int, dict]]]:
    """[(rank, per-op rows, provenance)]: one entry per rank of a distributed replay (each rank's
    own replay.json rows, mapped through the ET that rank replayed: its ids are not rank 0's),
    else one entry (rank None) for the result itself. A rank whose replay.json cannot be read
    falls back to the merged rows (the slowest rank's) and that rank's ET."""
    ranks = replay.ranks or []
    if len(ranks) < 2:
        return [(None, [dict(x) for x in replay.per_op], replay_provenance(replay))]
    from engine import jsonio

    here = replay.paths.get("replay_json")
    out: list[tuple[int | None, list[dict], dict[int, dict]]] = []
    for i, entry in enumerate(ranks):
        r = int(entry.get("rank", i))
        cands = [entry.get("replay_json")] + ([str(Path(here).parent / f"rank{r}" / "replay.json")] if here else [])
        doc = None
        for c in (c for c in cands if c):
            try:
                doc = jsonio.loads(Path(c).read_bytes())
                break
            except (OSError, ValueError):
                continue
        if not isinstance(doc, dict) or not isinstance(doc.get("per_op"), list):
            slowest = int((replay.config or {}).get("slowest_rank") or 0)
            et = replay.paths.get(f"et_rank{slowest}") or replay.paths.get("et")
            return [(slowest, [dict(x) for x in replay.per_op], read_provenance(et) if et else {})]
        et = entry.get("et") or (doc.get("paths") or {}).get("et")
        out.append((r, doc["per_op"], read_provenance(et) if et else {}))
    return out


__all__ = ["ORIGIN_KEY", "rank_sides", "read_provenance", "replay_provenance"]
