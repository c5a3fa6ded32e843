"""Where the test suite's CPU goes (issue 34 item 8): `make test`'s first pass, run under a sampler
of its whole process tree, and the import costs that every fresh process pays, measured side by side.

    .venv/bin/python benchmarks/suite_cpu.py            # the whole first pass (~15 min on 2 cores)
    .venv/bin/python benchmarks/suite_cpu.py -- tests/test_simulate.py   # a part of it

The pass is `make test`'s (`-n 2 --dist loadfile`, `-m "not perf and not alone"`), under a new
--basetemp. Every 0.5 s the sampler walks the pytest process's descendants and keeps each one's
last user + system CPU time; a process is counted by kind (xdist worker, CLI subcommand, replay
rank, Streamlit server, Chromium, workspace worker, Dask, ...). A process that lives under 0.5 s
can be missed, and one's last 0.5 s before it exits is not counted; both are small against the
totals (the sum is compared with the machine's busy time in the results). Import costs: a fresh
interpreter per module, CPU time of the import alone, median of three. Writes
benchmarks/results/suite_cpu.json.
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from benchmarks.report import pct, table

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
OUT = HERE / "results" / "suite_cpu.json"
PASS1 = ["-q", "-p", "no:cacheprovider", "-n", "2", "--dist", "loadfile", "--no-loadscope-reorder"]
PASS1 += ["-m", "not perf and not alone"]

# (kind, pattern on the command line), first match wins
KINDS = (
    ("xdist worker (in-process tests)", r"exec\(eval\(sys\.stdin"),
    ("replay rank (engine.replay.dist_worker)", r"engine\.replay\.dist_worker"),
    ("workspace worker (the dashboard's long work)", r"engine\.workspace\.worker"),
    ("capture rank (engine.capture.distributed)", r"engine\.capture\.distributed"),
    ("CLI forked by the tests' pre-imported parent (tests/cliserver.py)", r"cliserver\.py"),
    ("Streamlit server", r"streamlit"),
    ("Chromium", r"chrom"),
    ("Dask", r"dask|distributed\.cli"),
    ("multiprocessing child", r"multiprocessing|spawn_main"),
    ("pytest (the controller)", r"pytest"),
)
CLI = re.compile(r"engine\.cli\.main (\S+)")

# Each: the module, what imports it before (not counted), and why a process pays it
IMPORTS = (
    ("torch", "", "every replay, capture and rank process"),
    ("torch._dynamo", "import torch, sympy", "pulled in by the meta check's Python decompositions"),
    ("sympy", "import torch", "the same decompositions (torch's shape reasoning)"),
    ("pandas", "", "every process that loads a trace"),
    ("streamlit", "", "every dashboard server"),
)


def kind_of(cmd: str) -> str:
    m = CLI.search(cmd)
    if m:
        return f"CLI `mystique {m.group(1)}`"
    for kind, pat in KINDS:
        if re.search(pat, cmd):
            return kind
    return "other"


def sample(proc: subprocess.Popen, every_s: float = 0.5) -> tuple[dict, list[float]]:
    """Per process (pid, start time): its command line and last seen CPU seconds; the machine's
    busy share per sample."""
    import psutil

    seen: dict = {}
    busy: list[float] = []
    psutil.cpu_percent(None)
    root = psutil.Process(proc.pid)
    while proc.poll() is None:
        try:
            kids = root.children(recursive=True)
        except psutil.Error:
            break
        for p in [root, *kids]:
            try:
                with p.oneshot():
                    t = p.cpu_times()
                    key = (p.pid, p.create_time())
                    if key not in seen:
                        seen[key] = {"cmd": " ".join(p.cmdline())[:400]}
                    seen[key]["cpu_s"] = t.user + t.system
            except psutil.Error:
                pass
        busy.append(psutil.cpu_percent(None) / 100)
        time.sleep(every_s)
    return seen, busy


def import_cost(module: str, before: str, runs: int = 3) -> tuple[float, float]:
    """CPU seconds of the import alone, and of a whole `python -c "BEFORE; import MODULE"`
    process (start, imports, exit) less one that imports only BEFORE: medians of `runs`."""
    import resource

    def whole(code: str) -> float:
        t = resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run([sys.executable, "-c", code], capture_output=True, cwd=ROOT, timeout=300, check=True)
        u = resource.getrusage(resource.RUSAGE_CHILDREN)
        return (u.ru_utime + u.ru_stime) - (t.ru_utime + t.ru_stime)

    code = f"import time\n{before}\nt = time.process_time()\nimport {module}\nprint(time.process_time() - t)"
    vals = []
    for _ in range(runs):
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300)
        vals.append(float(r.stdout.strip().splitlines()[-1]))
    procs = [whole(f"{before}\nimport {module}") - whole(before or "pass") for _ in range(runs)]
    return statistics.median(vals), statistics.median(procs)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("pytest_args", nargs="*", help="after --: passed to pytest (default: the whole pass)")
    ap.add_argument("--out", default=str(OUT))
    ap.add_argument("--log", default=None, help="also write pytest's whole output here")
    a = ap.parse_args(argv)
    import psutil

    imports = []
    for m, b, why in IMPORTS:
        alone, process = import_cost(m, b)
        imports.append(
            {"module": m, "after": b or "-", "why": why, "cpu_s": round(alone, 2), "process_cpu_s": round(process, 2)}
        )
    with tempfile.TemporaryDirectory(prefix="suite-cpu-") as tmp:
        cmd = [sys.executable, "-m", "pytest", *PASS1, f"--basetemp={tmp}/t", *a.pytest_args]
        t0 = time.monotonic()
        log = Path(a.log or f"{tmp}/pytest.log")  # a file, not a pipe: a full pipe would stall pytest
        with log.open("w") as sink:
            proc = subprocess.Popen(cmd, cwd=ROOT, stdout=sink, stderr=subprocess.STDOUT, text=True)
            seen, busy = sample(proc)
            proc.wait()
        out = log.read_text()
        wall = time.monotonic() - t0
    kinds: dict = defaultdict(lambda: {"processes": 0, "cpu_s": 0.0})
    for p in seen.values():
        k = kinds[kind_of(p["cmd"])]
        k["processes"] += 1
        k["cpu_s"] += p["cpu_s"]
    total = sum(k["cpu_s"] for k in kinds.values())
    tail = [ln for ln in out.strip().splitlines() if ln.strip()][-1:] or [""]
    res = {
        "command": shlex.join(["pytest", *PASS1, *a.pytest_args]),
        "pytest_summary": tail[0],
        "exit_code": proc.returncode,
        "wall_s": round(wall, 1),
        "cores": psutil.cpu_count(),
        "cpu_s": round(total, 1),
        "machine_busy": round(statistics.mean(busy), 3) if busy else None,
        "processes": len(seen),
        "by_kind": sorted(
            ({"kind": k, "processes": v["processes"], "cpu_s": round(v["cpu_s"], 1)} for k, v in kinds.items()),
            key=lambda r: -r["cpu_s"],
        ),
        "imports": imports,
    }
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(res, indent=2) + "\n")
    print(f"{res['pytest_summary']}: {total:,.0f} CPU-s in {wall:,.0f} s on {res['cores']} cores; wrote {a.out}")
    return 0


def docs_section(d: dict) -> list[str]:
    """`make test`'s first pass under a sampler of its process tree (every 0.5 s, each process's
    last user + system CPU time), by kind of process; and the CPU a fresh process pays to import
    each heavy module (median of three), alone and with the interpreter's start and exit."""
    rows = [
        [r["kind"], f"{r['processes']:,}", f"{r['cpu_s']:,.0f}", pct(r["cpu_s"] / d["cpu_s"])] for r in d["by_kind"]
    ]
    busy = "–" if d["machine_busy"] is None else pct(d["machine_busy"])
    out = [
        f"`{d['command']}`: {d['pytest_summary']}; **{d['cpu_s']:,.0f} CPU-s in {d['wall_s']:,.0f} s** on "
        f"{d['cores']} cores (machine busy {busy} of the time), {d['processes']:,} processes.",
        "",
        *table(["kind of process", "processes", "CPU s", "share"], rows),
        *table(
            ["import", "after", "CPU s (the import)", "CPU s (a process's start, import and exit)", "paid by"],
            [
                [f"`{r['module']}`", r["after"], f"{r['cpu_s']:.2f}", f"{r['process_cpu_s']:.2f}", r["why"]]
                for r in d["imports"]
            ],
        ),
    ]
    return out


if __name__ == "__main__":
    sys.exit(main())
