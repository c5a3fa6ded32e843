"""A fleet of rank traces from one real Kineto trace: copies with per-rank perturbed durations.

Why: issue 22's scale checks (tests/test_fanout.py, benchmarks/scale.py) need many ranks
built from a real GPU trace, and no two ranks may be identical (a per-rank bug would hide).
Each copy declares its rank in `distributedInfo` and in its file name; every event's `dur` is
scaled by a factor in [0.95, 1.05] that depends on the rank and the event's position.
"""

from __future__ import annotations

import gzip
from pathlib import Path

import orjson


def make_fleet(source: Path, out_dir: Path, n_ranks: int) -> list[Path]:
    """Write `rank<r>_kineto.json` for r in range(n_ranks) under `out_dir`; their paths."""
    raw = Path(source).read_bytes()
    doc = orjson.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
    events = doc.get("traceEvents", [])
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for r in range(n_ranks):
        evs = []
        for i, ev in enumerate(events):
            if isinstance(ev, dict) and isinstance(ev.get("dur"), (int, float)):
                ev = {**ev, "dur": round(ev["dur"] * (0.95 + 0.1 * ((r * 7919 + i * 31) % 101) / 100), 3)}
            evs.append(ev)
        info = {**(doc.get("distributedInfo") or {}), "rank": r, "world_size": n_ranks}
        p = out_dir / f"rank{r}_kineto.json"
        p.write_bytes(orjson.dumps({**doc, "distributedInfo": info, "traceEvents": evs}))
        paths.append(p)
    return paths
