"""The CLI never prints a trace's control characters to the terminal (issue 31, item 3).

A Kineto trace whose op name holds ESC `[31m`, BEL, NUL and the C1 CSI, in a file whose name
holds ESC and BEL, goes through `info`, `sql` and `simulate` (human output and `--json`) and a
bad file of that kind of name through the error line. Human output shows each control as
`\\u00XX`; `--json` stays valid JSON that decodes to the original name.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from clirun import cli, one_line_error

NAME = "op\x1b[31mred\x07bell\x00nul\x9bcsi"
SHOWN = "op\\u001b[31mred\\u0007bell\\u0000nul\\u009bcsi"
RAW = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")  # what a terminal acts on (newline, tab apart)


@pytest.fixture()
def crafted(tmp_path) -> Path:
    doc = {
        "schemaVersion": 1,
        "traceEvents": [
            {"ph": "X", "cat": "cpu_op", "name": NAME, "ts": 1, "dur": 2, "pid": 1, "tid": 1, "args": {}},
            {"ph": "X", "cat": "kernel", "name": NAME, "ts": 1.5, "dur": 1, "pid": 0, "tid": 7, "args": {"stream": 7}},
        ],
    }
    p = tmp_path / "t\x1b[31m\x07.json"
    p.write_text(json.dumps(doc))
    return p


def _clean(r) -> None:
    assert not RAW.search(r.stdout) and not RAW.search(r.stderr), (r.stdout[-500:], r.stderr[-500:])


def test_human_output_escapes_controls(crafted, cache_dir):
    for args in (("info", crafted), ("sql", crafted, "SELECT name FROM events"), ("simulate", crafted)):
        r = cli(*args, cache=cache_dir)
        assert r.returncode == 0, r.stderr[-2000:]
        _clean(r)
        if args[0] != "simulate":
            assert SHOWN in r.stdout, r.stdout
    info = cli("info", crafted, cache=cache_dir)
    assert "t\\u001b[31m\\u0007.json" in info.stdout


def test_json_output_stays_valid_and_exact(crafted, cache_dir):
    r = cli("info", crafted, "--json", cache=cache_dir)
    assert r.returncode == 0, r.stderr[-2000:]
    _clean(r)
    doc = json.loads(r.stdout)
    assert Path(doc["path"]).name == crafted.name and doc["top_ops"][0]["name"] == NAME
    s = cli("sql", crafted, "SELECT name FROM events", "--json", cache=cache_dir)
    _clean(s)
    assert [row["name"] for row in json.loads(s.stdout)] == [NAME, NAME]


def test_error_line_escapes_the_file_name(tmp_path, cache_dir):
    bad = tmp_path / "bad\x1b]0;title\x07\x1b[2J.json"
    bad.write_text('{"hello": 1}')
    for cmd in ("info", "sql"):
        r = cli(cmd, bad, *(["SELECT 1"] if cmd == "sql" else []), cache=cache_dir)
        _clean(r)
        one_line_error(r, "bad\\u001b]0;title\\u0007\\u001b[2J.json")
