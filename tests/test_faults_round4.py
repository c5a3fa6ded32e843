"""Round 4 of the hostile runs (issue 31): one test per numbered item beyond the SQL sandbox,
the Markdown and the terminal (tests/test_sql_sandbox.py, test_app_markdown.py,
test_cli_control_chars.py). Each drives the CLI in a fresh process where there is one (exit 2,
one line naming the file, no traceback; nothing lost, bytes compared) and the API otherwise.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from clirun import cli, one_line_error

from engine.errors import TraceError


def _sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


# 12 -------------------------------------------------------------------------------------------
def test_12_duplicate_top_level_keys_are_refused_by_loader_and_store(tmp_path, cache_dir):
    """Two `traceEvents` arrays: `info` read the last, the store the first. Both refuse now, and
    so for any top-level key written twice (also through a JSON escape in the key)."""
    from engine.trace import load
    from engine.trace.store import build

    ev = '{"ph": "X", "cat": "cpu_op", "name": "%s", "ts": 1, "dur": 2, "pid": 1, "tid": 1}'
    docs = {
        "two_arrays.json": '{{"traceEvents": [{}], "traceEvents": [{}, {}]}}'.format(ev % "a", ev % "b", ev % "b"),
        "escaped_key.json": '{{"traceEvents": [{}], "trace\\u0045vents": [{}]}}'.format(ev % "a", ev % "b"),
        "two_ranks.json": '{"distributedInfo": {"rank": 0}, "traceEvents": [%s], "distributedInfo": {"rank": 3}}'
        % (ev % "a"),
    }
    for name, text in docs.items():
        p = tmp_path / name
        p.write_text(text)
        before = _sha(p)
        with pytest.raises(TraceError, match="appears twice"):
            load(p, use_cache=False)
        with pytest.raises(TraceError, match="appears twice"):
            build(p, use_cache=False)
        for cmd in (("info", p), ("sql", p, "SELECT count(*) FROM events")):
            one_line_error(cli(*cmd, cache=cache_dir), name, "appears twice")
        assert _sha(p) == before
    ok = tmp_path / "ok.json"  # a key repeated inside events is nobody's business
    ok.write_text('{"traceEvents": [%s], "x": {"a": 1, "a": 2}}' % (ev % "a"))
    assert len(load(ok, use_cache=False).events) == 1
