"""The composed benchmark: per-rank ET node lists and what composing them recorded.

`compose(spec)` (engine.compose.build) makes one; the transforms and sharding kinds edit it in
place; `export` writes it. It lives apart from all of them, so each imports the type from here
and none imports another's module for it. `rank_summary` is the one reading of a rank's ops,
inputs and memory (the composer's memory bound, `summary()`, the export's README and the
Compose page read it).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from engine.compose.context import ComposeContext
from engine.compose.nodes import is_defined, tensors_of
from engine.compose.spec import BenchmarkSpec
from engine.trace.vocab import COMM_PREFIXES


@dataclass(kw_only=True, slots=True)
class Benchmark:
    """Composed benchmark: per-rank ET node lists (chakra 1.1.1 dicts, root first) + metadata.

    `replay_ids[rank]` are the node ids a replay runs (one level per call path); `meta` holds
    the batch size, transforms applied, sharding plan, per-rank lookups, collectives, warnings;
    `context` what the transforms read about the sources (engine.compose.context; not exported).
    """

    spec: BenchmarkSpec
    ranks: dict[int, list[dict]]
    replay_ids: dict[int, list[int]]
    meta: dict = field(default_factory=dict)
    context: ComposeContext = field(default_factory=ComposeContext)

    @property
    def world_size(self) -> int:
        return len(self.ranks)

    def et_doc(self, rank: int = 0) -> dict:
        """The rank's ET as a JSON-ready dict (schema 1.1.1-chakra.0.0.4)."""
        nodes = self.ranks[rank]
        doc: dict[str, Any] = {
            "schema": "1.1.1-chakra.0.0.4",
            "pid": 0,
            "time": self.meta.get("time", ""),
            "start_ts": 0,
            "finish_ts": 0,
            "nodes": nodes,
        }
        if self.world_size > 1:
            doc["distributedInfo"] = {"rank": rank, "world_size": self.world_size, "backend": "nccl"}
        return doc

    def summary(self) -> dict:
        return {
            "name": self.spec.name,
            "world_size": self.world_size,
            "ranks": {r: rank_summary(self, r) for r in sorted(self.ranks)},
            "meta": {k: v for k, v in self.meta.items() if k != "time"},
        }


def rank_summary(bench: Benchmark, rank: int) -> dict:
    """Op counts, external inputs and a memory estimate (bytes of distinct storages) of one rank."""
    nodes = bench.ranks[rank]
    replay = set(bench.replay_ids[rank])
    produced: set = set()
    ext: dict = {}
    storages: dict = {}
    comm = 0
    comm_bytes = 0
    for n in nodes:
        if n["id"] not in replay:
            continue
        if n["name"].startswith(COMM_PREFIXES):
            comm += 1
            comm_bytes += int(next((a["value"] for a in n["attrs"] if a["name"] == "comm_bytes"), 0) or 0)
        for io, _, _, _, v in tensors_of(n):
            if not is_defined(v):
                continue
            key = (v[0], v[1])
            nbytes = int(v[3]) * int(v[4])
            storages[v[1]] = max(storages.get(v[1], 0), (int(v[2]) + int(v[3])) * int(v[4]))
            if io == "out":
                produced.add(key)
            elif key not in produced and key not in ext:
                ext[key] = nbytes
    return {
        "nodes": len(nodes),
        "replay_ops": len(replay),
        "communication_ops": comm,
        "communication_bytes": comm_bytes,
        "external_inputs": len(ext),
        "external_input_bytes": int(sum(ext.values())),
        "estimated_memory_bytes": int(sum(storages.values())),
    }
