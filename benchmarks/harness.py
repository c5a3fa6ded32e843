"""What every benchmark script shares: the repo root on `sys.path`, where results go, the load.

Why a module: each script used to insert the repo root into `sys.path` itself (eleven copies,
each followed by `# noqa: E402` imports). A script run as `python benchmarks/X.py` has
benchmarks/ as `sys.path[0]`, so its first import, `import harness`, finds this module, which
puts the repo root on the path; `engine` and `benchmarks.simbench` import normally after it.
The statistics the scripts report live in the engine (engine.compare.fidelity), not here.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
RESULTS = ROOT / "benchmarks" / "results"
SAMPLES = ROOT / "sample_traces"


def load1() -> float:
    """The 1-minute load average, reported beside every timing (a loaded machine skews them)."""
    return os.getloadavg()[0]


__all__ = ["RESULTS", "ROOT", "SAMPLES", "load1"]
