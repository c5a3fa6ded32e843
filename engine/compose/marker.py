"""Completion marker of an exported benchmark folder (`COMPLETE.json`, written last).

Why: export writes one ET per rank; a compose killed at rank 3 of 8 used to leave a folder that
`mystique replay` ran as a complete 4-rank benchmark (exit 0). Now export removes any old marker
first, writes every file atomically, and writes the marker last with the world size, each rank
file's size and content hash, and the content hashes of the source traces. A folder is replayed
only when the marker is there and the rank files on disk are exactly the ones it lists (and as
many as the spec's world size). Replays of the folder record the source hashes so `compare`
can check a composed replay against the right original.
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

from engine import jsonio
from engine.errors import TraceError

MARKER = "COMPLETE.json"
_RANK_FILE = re.compile(r"^rank_(\d+)\.et\.json(\.gz)?$")


def file_sha256(path: str | os.PathLike) -> str | None:
    h = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
    except OSError:
        return None
    return h.hexdigest()


def rank_files(folder: Path) -> dict[int, Path]:
    out = {}
    for f in folder.iterdir():
        m = _RANK_FILE.match(f.name)
        if m and f.is_file():
            out[int(m.group(1))] = f
    return out


def marker_doc(world_size: int, ranks: dict[int, str], sources: list[str]) -> dict:
    return {
        "complete": True,
        "world_size": world_size,
        "ranks": {
            str(r): {"file": Path(p).name, "bytes": os.path.getsize(p), "sha256": file_sha256(p)}
            for r, p in sorted(ranks.items())
        },
        "sources": [{"path": s, "sha256": file_sha256(s)} for s in sources],
    }


def _spec_world_size(folder: Path) -> int | None:
    try:
        spec = jsonio.loads((folder / "spec.json").read_bytes())
    except (OSError, jsonio.JSONDecodeError):
        return None
    if not isinstance(spec, dict):
        return None
    sh = spec.get("sharding")
    if not isinstance(sh, dict):
        return 1 if "segments" in spec else None  # a spec without sharding has one rank
    from engine.compose.shard.kinds import sharding_from_dict

    try:
        return sharding_from_dict(sh).world_size
    except TraceError:
        return None  # a bad sharding is the spec's problem to report; the marker check stays lenient


def check_folder(folder: str | os.PathLike) -> dict:
    """The marker of a complete exported benchmark; a one-line TraceError when incomplete."""
    p = Path(folder)
    on_disk = rank_files(p)
    want = _spec_world_size(p)
    mk = p / MARKER
    if not mk.is_file():
        raise TraceError(
            f"incomplete benchmark folder: no {MARKER} (compose was interrupted or is still running); "
            f"{len(on_disk)} rank file(s) on disk"
            + (f" of the spec's {want}" if want is not None else "")
            + "; compose it again",
            p,
        )
    try:
        doc = jsonio.loads(mk.read_bytes())
    except (OSError, jsonio.JSONDecodeError) as exc:
        raise TraceError(f"unreadable completion marker: {exc}".splitlines()[0], mk) from None
    if not isinstance(doc, dict) or not isinstance(doc.get("ranks"), dict):
        raise TraceError("completion marker is not a benchmark marker", mk)
    listed = {int(r) for r in doc["ranks"]}
    world = doc.get("world_size")
    if want is not None and world != want:
        raise TraceError(f"completion marker says {world} ranks but spec.json says {want}", p)
    if set(on_disk) != listed:
        missing = sorted(listed - set(on_disk))
        extra = sorted(set(on_disk) - listed)
        raise TraceError(
            f"benchmark folder does not match its completion marker: {len(on_disk)} rank file(s) on disk, "
            f"{len(listed)} expected"
            + (f"; missing ranks {missing[:8]}" if missing else "")
            + (f"; unexpected ranks {extra[:8]}" if extra else ""),
            p,
        )
    for r, f in on_disk.items():
        size = doc["ranks"][str(r)].get("bytes")
        if size is not None and f.stat().st_size != size:
            raise TraceError(f"rank {r} file changed after compose ({f.stat().st_size} bytes, marker says {size})", f)
    return doc


__all__ = ["MARKER", "check_folder", "file_sha256", "marker_doc", "rank_files"]
