"""The suite runs its heaviest files first (tests/conftest.py, issue 34 item 8).

Under `-n 2 --dist loadfile` each worker takes the next file when it finishes one; in collection
order a long file found last ran alone while the other core idled. The weights are a measured
table (tests/durations.json); these tests check the sort and that the table names real files.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import conftest

TESTS = Path(__file__).resolve().parent


@dataclass
class _Item:
    nodeid: str


def test_files_run_heaviest_first_and_keep_their_own_order(tmp_path, monkeypatch):
    table = tmp_path / "durations.json"
    table.write_text(json.dumps({"tests/test_b.py": 90.0, "tests/test_c.py": 1.0}))
    monkeypatch.setattr(conftest, "DURATIONS", table)
    items = [_Item(n) for n in ("tests/test_a.py::x", "tests/test_a.py::y", "tests/test_b.py::z")]
    items += [_Item("tests/test_c.py::w"), _Item("tests/test_b.py::v")]
    conftest.heaviest_files_first(items)
    # b (90 s) first in its own order, then a (unknown: DEFAULT_FILE_S), then c (1 s)
    assert [i.nodeid for i in items] == [
        "tests/test_b.py::z",
        "tests/test_b.py::v",
        "tests/test_a.py::x",
        "tests/test_a.py::y",
        "tests/test_c.py::w",
    ]


def test_the_duration_table_names_only_files_that_exist():
    table = json.loads((TESTS / "durations.json").read_text())
    assert len(table) >= 10
    missing = [f for f in table if not (TESTS.parent / f).is_file()]
    assert not missing, f"stale entries in tests/durations.json: {missing}"
    assert all(isinstance(v, (int, float)) and v >= 0 for v in table.values())


def test_xdist_keeps_the_order_the_suite_sorts(request):
    """xdist's own reorder (files with the most tests first) is off, or it would undo the sort."""
    assert getattr(request.config.option, "loadscopereorder", False) is False


def makespan(seconds: list[float], workers: int = 2) -> float:
    """Wall time of files taking `seconds`, handed out in this order the way xdist's loadfile
    does: each worker starts with two files, and each time one of its files ends it is given the
    next file of the queue (which it starts when it is done with what it holds)."""
    queue = list(seconds)
    end = [0.0] * workers  # when each worker is done with everything it holds
    ends: list[list[float]] = [[] for _ in range(workers)]  # end time of each file it holds
    for _ in range(2):
        for w in range(workers):
            if queue:
                end[w] += queue.pop(0)
                ends[w].append(end[w])
    while queue:
        w = min(range(workers), key=lambda i: ends[i][0] if ends[i] else end[i])
        if ends[w]:
            ends[w].pop(0)
        end[w] += queue.pop(0)
        ends[w].append(end[w])
    return max(end)


def test_makespan_of_a_known_schedule():
    # light files first: each worker holds 1+1; the first to finish one (t=1) is given the 10,
    # which it starts at t=2 after its second file: 12. Heaviest first: 10+1 and 1+1+1: 11
    assert makespan([1, 1, 1, 1, 10]) == 12
    assert makespan([10, 1, 1, 1, 1]) == 11


if __name__ == "__main__":  # python tests/test_suite_order.py: predicted main-pass wall time
    import subprocess
    import sys
    from collections import Counter

    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "--collect-only",
            "-m",
            "not perf and not alone",
        ],
        capture_output=True,
        text=True,
        cwd=TESTS.parent,
    ).stdout
    files = [ln.split("::")[0] for ln in out.splitlines() if "::" in ln]
    count = Counter(files)
    order = list(dict.fromkeys(files))  # collection order (the sort applies; undo it below)
    w = conftest.file_weights()
    weight = {f: w.get(f, conftest.DEFAULT_FILE_S) for f in order}
    by_name = sorted(order)
    xdist_default = sorted(by_name, key=lambda f: -count[f])  # --loadscope-reorder (xdist's default)
    heaviest = sorted(by_name, key=lambda f: -weight[f])
    print(f"{len(order)} files, {sum(weight.values()):.0f} s of tests on 2 workers (weights: tests/durations.json)")
    for name, o in (("xdist default (most tests first)", xdist_default), ("heaviest first", heaviest)):
        print(f"  {name:<34} {makespan([weight[f] for f in o]):7.0f} s")
