"""The GPU run's output folder: one results file rewritten after every step, a log, and the
Compare archive; nothing else, because the machine brings back at most 8 files from it.

    gpu_run.json   {"environment", "plan", "steps": {name: {"status", "wall_s", "planned_s",
                   "result" | "error" | "reason"}}}: atomically rewritten as each step ends, so a
                   run cut short keeps every step it finished
    gpu_run.log    timestamped progress, everything the steps print, and each error's traceback
    compare_<model>_<device>.tar.gz   the original capture and its replay (step `compare`)
"""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

RESULTS_NAME = "gpu_run.json"
LOG_NAME = "gpu_run.log"
GPU_EVENT_CATS = ("kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation")


class Output:
    """The results document and the log of one run in `folder`."""

    def __init__(self, folder: Path, environment: dict[str, Any], plan: list[dict[str, Any]]):
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.doc: dict[str, Any] = {"environment": environment, "plan": plan, "steps": {}}
        self.log_path = self.folder / LOG_NAME
        self._log = open(self.log_path, "a", encoding="utf-8", buffering=1)  # noqa: SIM115 - closed by close()
        self.t0 = time.monotonic()
        self.save()

    def log(self, msg: str) -> None:
        line = f"[{time.monotonic() - self.t0:7.1f} s] {msg}"
        print(line, file=sys.__stdout__, flush=True)
        self._log.write(line + "\n")

    def record(self, name: str, entry: dict[str, Any]) -> None:
        self.doc["steps"][name] = entry
        self.save()

    def save(self) -> None:
        path = self.folder / RESULTS_NAME
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(self.doc, indent=1, default=_default), encoding="utf-8")
        os.replace(tmp, path)

    @contextlib.contextmanager
    def capture_prints(self):
        """What the engine and the benchmark scripts print goes to the log (and the console)."""
        tee = _Tee(self._log)
        old_out, old_err = sys.stdout, sys.stderr
        sys.stdout = sys.stderr = tee
        try:
            yield
        finally:
            sys.stdout, sys.stderr = old_out, old_err

    def close(self) -> None:
        self._log.close()


class _Tee(io.TextIOBase):
    def __init__(self, log):
        self.log = log

    def write(self, s: str) -> int:
        sys.__stdout__.write(s)
        self.log.write(s)
        return len(s)

    def flush(self) -> None:
        sys.__stdout__.flush()
        self.log.flush()


def _default(o: Any) -> Any:
    if isinstance(o, Path):
        return str(o)
    if hasattr(o, "tolist"):
        return o.tolist()
    if hasattr(o, "item"):
        return o.item()
    return str(o)


def trim_kineto(src: Path, dst: Path, steps: int = 1) -> dict[str, int]:
    """Copy a Kineto trace keeping only its first `steps` ProfilerStep spans: the host events inside
    them, the GPU events their runtime calls launched (by correlation id), their flow arrows and the
    metadata. A trace with no more steps than that is copied unchanged. Returns event counts."""
    doc = json.loads(gzip.decompress(src.read_bytes()))
    evs = doc["traceEvents"] if isinstance(doc, dict) else doc
    spans = sorted(
        (float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0)))
        for e in evs
        if str(e.get("name", "")).startswith("ProfilerStep#") and e.get("cat") not in GPU_EVENT_CATS and "ts" in e
    )
    if len(spans) <= steps:
        dst.write_bytes(src.read_bytes())
        return {"events": len(evs), "kept": len(evs), "steps": len(spans)}
    lo, hi = spans[0][0], spans[steps - 1][1]

    def host_in(e: dict) -> bool:
        return e.get("cat") not in GPU_EVENT_CATS and e.get("ph") == "X" and lo <= float(e.get("ts", -1)) <= hi

    host = [e for e in evs if host_in(e)]
    corr = {(e.get("args") or {}).get("correlation") for e in host} - {None}
    kept = [
        e
        for e in evs
        if e.get("ph") == "M"
        or host_in(e)
        or (e.get("cat") in GPU_EVENT_CATS and (e.get("args") or {}).get("correlation") in corr)
        or (e.get("ph") in ("s", "f") and e.get("id") in corr)
    ]
    if isinstance(doc, dict):
        doc["traceEvents"] = kept
    else:
        doc = kept
    dst.write_bytes(gzip.compress(json.dumps(doc).encode(), compresslevel=9, mtime=0))
    return {"events": len(evs), "kept": len(kept), "steps": len(spans)}
