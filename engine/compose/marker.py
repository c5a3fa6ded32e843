"""Completion marker of an exported benchmark folder (`COMPLETE.json`, written last).

Why: export writes one ET per rank; a compose killed at rank 3 of 8 used to leave a folder that
`mystique replay` ran as a complete 4-rank benchmark (exit 0). Now export removes any old marker
first, writes every file atomically, and writes the marker last with the world size, each rank
file's size and content hash, and the content hashes of the source traces. The reading side
(`check_folder`: the folder is replayed only when the marker matches the rank files on disk) is
engine.trace.layout's, where every command asks what a path is; this module writes the marker.
"""

from __future__ import annotations

import os
from pathlib import Path

from engine.trace.layout import MARKER, check_folder, file_sha256, rank_files


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


__all__ = ["MARKER", "check_folder", "file_sha256", "marker_doc", "rank_files"]
