"""Structural validation of a composed (or any chakra-layout) ET: what a replay relies on.

Checks: the document has the 1.1.x chakra keys; node ids are unique ints; every ctrl_deps
names an existing node (or the root itself); every tensor a replayed node reads was produced
by an earlier node or is an external input (listed, so a replay knows what to synthesize);
and, with `meta=True`, recorded output shapes agree with a meta-tensor run of the ops.
"""

from __future__ import annotations

import gzip
import os
from pathlib import Path
from typing import Any

from engine import jsonio
from engine.compose.nodes import ROOT_NAME, external_reads
from engine.errors import TraceError

_NODE_KEYS = ("id", "name", "ctrl_deps", "inputs", "outputs", "attrs")
_ATTRS = ("rf_id", "fw_parent", "seq_id", "scope", "tid", "fw_tid", "op_schema")


def _load(src: Any) -> tuple[dict, str | None]:
    if isinstance(src, dict):
        return src, None
    p = Path(src)
    try:
        raw = p.read_bytes()
        if raw[:2] == b"\x1f\x8b":
            raw = gzip.decompress(raw)
        return jsonio.loads(raw), str(p)
    except (OSError, jsonio.JSONDecodeError) as e:
        raise TraceError(f"cannot read ET: {e}", p) from None


def validate_et(src: str | os.PathLike | dict, *, meta: bool = True, strict: bool = True) -> dict:
    """Validate an ET (path or dict). Returns a report; `strict` raises TraceError on problems."""
    doc, path = _load(src)
    problems: list[str] = []
    for k in ("schema", "pid", "time", "start_ts", "finish_ts", "nodes"):
        if k not in doc:
            problems.append(f"missing top-level key '{k}'")
    nodes = doc.get("nodes") or []
    ids: dict[int, dict] = {}
    for n in nodes:
        miss = [k for k in _NODE_KEYS if k not in n]
        if miss:
            problems.append(f"node {n.get('id')} lacks {', '.join(miss)}")
            continue
        if not isinstance(n["id"], int) or n["id"] in ids:
            problems.append(f"duplicate or non-integer node id {n['id']!r}")
        ids[n["id"]] = n
        names = {a.get("name") for a in n["attrs"]}
        if not set(_ATTRS) <= names:
            problems.append(f"node {n['id']} attrs lack {', '.join(sorted(set(_ATTRS) - names))}")
    roots = [n for n in nodes if n.get("name") == ROOT_NAME]
    if not roots:
        problems.append(f"no root node '{ROOT_NAME}'")
    for n in nodes:
        p = n.get("ctrl_deps")
        if p not in ids and p != n.get("id"):
            problems.append(f"node {n['id']} ctrl_deps {p} does not exist")
    # data deps: over the replay set (highest rebuildable node per call path)
    replay = _replay_ids(nodes, ids)
    external: dict = {}
    for n, key, _, _, _ in external_reads(sorted((ids[i] for i in replay), key=lambda x: x["id"])):
        external.setdefault(key, n["id"])
    report: dict[str, Any] = {
        "path": path,
        "nodes": len(nodes),
        "replay_ops": len(replay),
        "external_inputs": len(external),
        "problems": problems,
    }
    if meta and not problems:
        from engine.compose.meta_check import propagate

        rep = propagate(nodes, replay, scale=1.0, mutate=False, strict=False)
        report["meta"] = rep.to_dict()
        problems.extend(rep.mismatches)
    if problems and strict:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise TraceError(f"invalid ET: {problems[0]}{more}", path)
    return report


def _replay_ids(nodes: list[dict], ids: dict) -> list[int]:
    """The replay rule of engine.graph.replayset on node dicts (top rebuildable op per path)."""
    import re

    from engine.trace.categories import classify

    op_name = re.compile(r"^[A-Za-z_]\w*::[A-Za-z_][\w.]*$")

    def rebuildable(n) -> bool:
        if not op_name.match(n["name"]) or classify(n["name"]) in ("annotation", "autograd"):
            return False
        schema = next((a.get("value") for a in n["attrs"] if a.get("name") == "op_schema"), "")
        return bool(schema) or bool((n.get("inputs") or {}).get("values"))

    out = []
    for n in nodes:
        if not rebuildable(n):
            continue
        p, ok = n["ctrl_deps"], True
        while p in ids and p != ids[p]["ctrl_deps"]:
            if rebuildable(ids[p]):
                ok = False
                break
            p = ids[p]["ctrl_deps"]
        if ok:
            out.append(n["id"])
    return sorted(out)


__all__ = ["validate_et"]
