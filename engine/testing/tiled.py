"""A big single Kineto trace from a real one: its `ProfilerStep#N` window tiled in time.

Why: issue 22's load checks need traces of millions of events that look like a real one (the
same mix of categories, names, args and flows), written without ever holding the document:
copy k of the step window (every item whose `ts` lies between the first step's start and the
last step's end) is shifted by k step periods, its ids (`correlation`, `External id`,
`Record function id`, `Sequence number`, flow `id`) are offset so each copy is distinct, and
its `ProfilerStep#N` spans are renumbered, so the result reads as one long run of steps. Items
outside the window (metadata, warm-up) are written once, before the copies. The output is plain
JSON written in batches: memory holds the source trace, not the output.
"""

from __future__ import annotations

import gzip
from pathlib import Path

import orjson

from engine.trace.vocab import STEP_PREFIX

_ID_ARGS = ("correlation", "External id", "Record function id", "Sequence number")


def _window(events: list) -> tuple[float, float, int]:
    """(start, end, steps) of the ProfilerStep spans (host side); the whole trace when it has none."""
    steps = [
        e
        for e in events
        if isinstance(e, dict)
        and e.get("ph") == "X"
        and str(e.get("name", "")).startswith(STEP_PREFIX)
        and e.get("cat") not in ("gpu_user_annotation",)
    ]
    if steps:
        t0 = min(float(e["ts"]) for e in steps)
        t1 = max(float(e["ts"]) + float(e.get("dur", 0)) for e in steps)
        return t0, t1, len(steps)
    ts = [float(e["ts"]) for e in events if isinstance(e, dict) and isinstance(e.get("ts"), (int, float))]
    return min(ts), max(ts) + 1.0, 0


def _copy(e: dict, k: int, shift: float, id_step: int, step_no: dict[str, str]) -> dict:
    e = {**e, "ts": e["ts"] + k * shift}
    if isinstance(e.get("id"), int):
        e["id"] += k * id_step
    args = e.get("args")
    if isinstance(args, dict):
        a = {**args}
        for key in _ID_ARGS:
            if type(a.get(key)) is int and a[key] >= 0:
                a[key] += k * id_step
        e["args"] = a
    name = e.get("name")
    if isinstance(name, str) and name in step_no:
        e["name"] = step_no[name]
    return e


def make_tiled(source: Path, out: Path, n_events: int) -> dict:
    """Write a Kineto trace of about `n_events` items (at least, whole copies) to `out`; its facts."""
    raw = Path(source).read_bytes()
    doc = orjson.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
    events = doc.get("traceEvents", [])
    t0, t1, n_steps = _window(events)
    inside = [e for e in events if isinstance(e, dict) and isinstance(e.get("ts"), (int, float)) and t0 <= e["ts"] < t1]
    in_ids = {id(e) for e in inside}
    outside = [e for e in events if id(e) not in in_ids]
    shift = (t1 - t0) * 1.001
    id_step = 1
    for e in events:
        if isinstance(e, dict):
            if type(e.get("id")) is int:
                id_step = max(id_step, e["id"] + 1)
            args = e.get("args")
            if isinstance(args, dict):
                for key in _ID_ARGS:
                    if type(args.get(key)) is int:
                        id_step = max(id_step, args[key] + 1)
    steps = sorted(
        {e["name"] for e in inside if isinstance(e.get("name"), str) and e["name"].startswith(STEP_PREFIX)},
        key=lambda s: int(s.split("#")[1]) if s.split("#")[1].isdigit() else 0,
    )
    first = int(steps[0].split("#")[1]) if steps and steps[0].split("#")[1].isdigit() else 0
    copies = max(1, -(-(n_events - len(outside)) // max(len(inside), 1)))
    head = {k: v for k, v in doc.items() if k != "traceEvents"}
    written = 0
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "wb") as fh:
        fh.write(b'{"traceEvents": [\n')
        sep = b""
        for e in outside:
            fh.write(sep + orjson.dumps(e))
            sep = b",\n"
            written += 1
        for k in range(copies):
            step_no = {s: f"{STEP_PREFIX}{first + k * len(steps) + i}" for i, s in enumerate(steps)}
            buf = [orjson.dumps(_copy(e, k, shift, id_step, step_no)) for e in inside]
            fh.write(sep + b",\n".join(buf))
            sep = b",\n"
            written += len(buf)
        fh.write(b"\n]")
        for key, val in head.items():
            fh.write(b",\n" + orjson.dumps(key) + b": " + orjson.dumps(val))
        fh.write(b"}\n")
    return {
        "source": str(source),
        "items": written,
        "copies": copies,
        "steps_per_copy": n_steps,
        "window_items": len(inside),
        "json_bytes": out.stat().st_size,
    }
