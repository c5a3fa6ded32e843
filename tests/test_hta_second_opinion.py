"""benchmarks/hta_second_opinion.py without HTA installed: one line naming the missing package,
exit 2, no traceback (run as the script it is: tests do not put benchmarks/ on sys.path)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest
from conftest import ROOT


def test_without_hta_the_script_says_so_in_one_line_and_exits_2(tmp_path):
    if importlib.util.find_spec("hta") is not None:
        pytest.skip("HTA is importable here: the script runs instead (benchmarks/hta_second_opinion.py)")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    r = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "hta_second_opinion.py")],
        capture_output=True, text=True, timeout=120, cwd=tmp_path, env=env,
    )  # fmt: skip
    assert r.returncode == 2, r.stderr[-2000:]
    err = r.stderr.strip()
    assert "\n" not in err and "traceinsight" in err and "Traceback" not in err
