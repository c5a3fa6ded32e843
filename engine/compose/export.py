"""Export a Benchmark as a folder that `mystique replay DIR [--rank R]` runs.

Layout: `spec.json` (the spec, sources made absolute), `rank_<r>.et.json` per rank (chakra
1.1.1 ET), `benchmark.json` (summary: per-rank op counts, inputs, memory, collectives),
`README.md` with the one command to run it, and optionally `run_benchmark.py`
(`engine.compose.script`, torch-only standalone replay).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from engine import jsonio
from engine.errors import TraceError
from engine.progress import Progress, report

if TYPE_CHECKING:
    from engine.compose.benchmark import Benchmark


_README = """# {name}

Composed by `mystique compose` from {sources}.

Run it (single process per rank; collectives are recorded and reported as skipped):

    mystique replay {out}
    mystique replay {out} --rank R     # R in 0..{last}

Files: `spec.json` (the spec), `rank_<r>.et.json` (one execution trace per rank, schema
1.1.1-chakra.0.0.4), `benchmark.json` (per-rank op counts, external inputs, memory estimate),
and, with `mystique compose --script`, `run_benchmark.py` (standalone, needs only torch:
`python run_benchmark.py [--rank R]`).
"""


def export(
    bench: Benchmark, out_dir: str | os.PathLike, progress: Progress | None = None, script: bool = False
) -> dict:
    """Write the benchmark folder; returns {"dir", "spec", "ranks": {r: path}, "summary"[, "script"]}.

    Under the folder's writer lock (engine.outdir): the old completion marker goes first, every
    file is written atomically, rank files of an earlier, larger composition are removed, and
    `COMPLETE.json` (engine.compose.marker) is written last."""
    from engine.compose.marker import MARKER, marker_doc, rank_files
    from engine.outdir import OutputLock, atomic_write

    out = Path(out_dir)
    with OutputLock(out, f"compose {bench.spec.name}"):
        try:
            (out / MARKER).unlink(missing_ok=True)
        except OSError as exc:
            raise TraceError(f"cannot remove the old completion marker: {exc.strerror}", out / MARKER) from None
        spec = bench.spec.to_dict()
        spec["sources"] = [str(p) for p in bench.spec.source_paths()]
        atomic_write(out / "spec.json", jsonio.dumps(spec, option=jsonio.OPT_INDENT_2))
        paths = {}
        for k, r in enumerate(sorted(bench.ranks)):
            report(progress, k / max(bench.world_size, 1), f"writing rank {r}")
            p = out / f"rank_{r}.et.json"
            atomic_write(p, jsonio.dumps(bench.et_doc(r)))
            paths[r] = str(p)
        for r, f in rank_files(out).items():
            if r not in paths:
                f.unlink(missing_ok=True)
        summary = bench.summary()
        summary["paths"] = {str(r): p for r, p in paths.items()}
        atomic_write(
            out / "benchmark.json", jsonio.dumps(summary, option=jsonio.OPT_INDENT_2 | jsonio.OPT_NON_STR_KEYS)
        )
        atomic_write(
            out / "README.md",
            _README.format(
                name=bench.spec.name,
                out=out,
                last=bench.world_size - 1,
                sources=", ".join(f"`{s}`" for s in bench.spec.sources),
            ),
        )
        res = {"dir": str(out), "spec": str(out / "spec.json"), "ranks": paths, "summary": summary}
        if script:
            from engine.compose.script import write_script

            res["script"] = str(write_script(bench, out))
        atomic_write(
            out / MARKER, jsonio.dumps(marker_doc(bench.world_size, paths, spec["sources"]), option=jsonio.OPT_INDENT_2)
        )
    report(progress, 1.0, "exported")
    return res


__all__ = ["export"]
