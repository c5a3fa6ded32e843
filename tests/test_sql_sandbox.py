"""The SQL sandbox (issue 31, items 1, 6, 7, 10): `mystique sql` and Explore's SQL box touch no
file outside the store, use bounded memory and rows, and stop on a deadline or a signal.

The hostile set is the one that broke round 4: DuckDB's default `temp_directory` is `.tmp` in
the working folder and stayed on its allow-list after the lock-down, so with `.tmp` present any
statement could COPY into it, ATTACH a database there, or read files back, and with `.tmp` a
symlink to another folder, read that folder. Each statement runs with `.tmp` as a folder and as
a symlink to a folder outside, both holding a CSV, a JSON and a Parquet file with a marker
value; the test fails if any byte or name outside the store changes, or the marker comes back.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from clirun import cli, one_line_error
from conftest import ROOT, SAMPLES

from engine.cli.main import main

TRACE = SAMPLES / "mlp" / "mlp_kineto.json.gz"
MARK = "7355608"  # the secret files' value: it must never come back


def _hostile(outside: Path) -> list[str]:
    return [
        "COPY (SELECT * FROM events) TO '.tmp/x.csv'",
        f"COPY (SELECT 1) TO '{outside / 'y.csv'}'",
        "ATTACH '.tmp/k.duckdb' AS k",
        "SELECT * FROM read_csv('.tmp/secret.csv')",
        "SELECT * FROM '.tmp/secret.csv'",
        "SELECT * FROM read_parquet('.tmp/secret.parquet')",
        "SELECT * FROM read_json('.tmp/secret.json')",
        f"SELECT * FROM read_csv('{outside / 'secret.csv'}')",
        "SELECT * FROM glob('.tmp/*')",
        f"SELECT * FROM glob('{outside}/*')",
        "SELECT getenv('HOME')",
        "SET temp_directory = '.tmp'",
    ]


def _snapshot(*roots: Path) -> dict[str, tuple[str, bytes]]:
    """Every name under `roots` (symlinks not followed) with its kind and bytes."""
    out: dict[str, tuple[str, bytes]] = {}
    for root in roots:
        for dirpath, dirnames, filenames in os.walk(root):
            for name in dirnames + filenames:
                p = Path(dirpath) / name
                if p.is_symlink():
                    out[str(p)] = ("link", os.readlink(p).encode())
                elif p.is_dir():
                    out[str(p)] = ("dir", b"")
                else:
                    out[str(p)] = ("file", p.read_bytes())
    return out


@pytest.fixture(params=["folder", "symlink"])
def hostile_cwd(request, tmp_path, monkeypatch, cache_dir):
    """A working folder whose `.tmp` is a folder, or a symlink to a folder outside; both hold
    the marked secret files. The process's cwd is moved there (DuckDB resolves against it)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    work, outside = tmp_path / "work", tmp_path / "outside"
    work.mkdir()
    outside.mkdir()
    secrets = outside if request.param == "symlink" else work / ".tmp"
    if request.param == "symlink":
        (work / ".tmp").symlink_to(outside, target_is_directory=True)
    else:
        secrets.mkdir()
    for d in {secrets, outside}:
        (d / "secret.csv").write_text(f"a\n{MARK}\n")
        (d / "secret.json").write_text(f'[{{"a": {MARK}}}]')
        pq.write_table(pa.table({"a": [int(MARK)]}), d / "secret.parquet")
    monkeypatch.chdir(work)
    return work, outside


def test_mystique_sql_touches_nothing_outside_the_store(hostile_cwd, capsys):
    work, outside = hostile_cwd
    assert main(["sql", str(TRACE), "SELECT count(*) AS n FROM events"]) == 0  # builds the store
    capsys.readouterr()
    before = _snapshot(work, outside)
    for sql in _hostile(outside):
        rc = main(["sql", str(TRACE), sql])
        out, err = capsys.readouterr()
        assert rc == 2, (sql, rc, out)
        assert err.startswith("mystique sql: error: SQL error") and len(err.strip().splitlines()) == 1, (sql, err)
        assert MARK not in out + err, sql
    assert _snapshot(work, outside) == before


def test_fresh_cli_reads_no_symlinked_tmp(tmp_path, cache_dir):
    """In a fresh process as a user runs it (cwd holding `.tmp` -> a folder with a secret)."""
    work, outside = tmp_path / "work", tmp_path / "outside"
    work.mkdir()
    outside.mkdir()
    (outside / "secret.csv").write_text(f"a\n{MARK}\n")
    (work / ".tmp").symlink_to(outside, target_is_directory=True)
    cmd = [sys.executable, "-m", "engine.cli.main", "sql", str(TRACE), "SELECT * FROM read_csv('.tmp/secret.csv')"]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MYSTIQUE_CACHE_DIR": str(cache_dir)}
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=work, env=env)
    one_line_error(r, "SQL error", "Permission")
    assert MARK not in r.stdout


def test_sql_box_touches_nothing_outside_the_store(hostile_cwd):
    pytest.importorskip("streamlit")
    from streamlit.testing.v1 import AppTest

    work, outside = hostile_cwd
    at = AppTest.from_file(str(ROOT / "app" / "main.py"), default_timeout=180)
    at.run()
    at.switch_page("../pages/explore.py")
    at.run()
    at.radio(key="explore_view").set_value("SQL")
    at.run()  # the default query builds the store
    assert not at.exception and not at.error, [e.value for e in [*at.exception, *at.error]]
    before = _snapshot(work, outside)
    for sql in _hostile(outside):
        at.text_area(key="explore_sql").input(sql)
        at.run()
        assert not at.exception, [e.value for e in at.exception]
        assert any("SQL error" in e.value for e in at.error), sql
        assert not any(MARK in d.value.to_string() for d in at.dataframe), sql
    assert _snapshot(work, outside) == before


def test_large_result_is_fetched_up_to_max_rows(cache_dir):
    """`SELECT * FROM range(1e8)` printed whole ran out of memory (item 7): now the first rows
    come back, labelled, under an address-space limit the whole result would not fit."""
    r = cli("sql", TRACE, "SELECT * FROM range(100000000) t(i)", "--max-rows", "5000", cache=cache_dir, timeout=120,
            pre="ulimit -v 3000000")  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    lines = r.stdout.strip().splitlines()
    assert (
        lines[0].strip() == "i" and lines[-1] == "-- first 5,000 rows (the result has more; --max-rows N fetches more)"
    )
    assert [int(x) for x in lines[1:-1]] == list(range(5000))
    j = cli("sql", TRACE, "SELECT * FROM range(100000000) t(i)", "--json", "--max-rows", "3", cache=cache_dir)
    assert j.returncode == 0 and j.stdout.split() == [
        "[",
        "{",
        '"i":',
        "0",
        "},",
        "{",
        '"i":',
        "1",
        "},",
        "{",
        '"i":',
        "2",
        "}",
        "]",
    ]
    assert "first 3 rows" in j.stderr


def test_memory_limit_and_no_spill(cache_dir):
    """DuckDB's memory is bounded and nothing spills (item 6): a sort bigger than the limit is a
    one-line error, not 80 % of RAM and a `.tmp` folder in the working directory."""
    from engine.trace.store import build
    from engine.trace.store.sql import connect

    con = connect(build(TRACE))
    settings = dict(con.execute("SELECT name, value FROM duckdb_settings()").fetchall())
    con.close()
    assert settings["temp_directory"] == "" and settings["allowed_directories"] == "[]"
    assert settings["enable_external_access"] == "false" and settings["lock_configuration"] == "true"
    from engine.sysinfo import available_memory_bytes

    avail = available_memory_bytes()
    limit = settings["memory_limit"]
    assert limit.endswith(("GiB", "MiB")), limit
    limit_b = float(limit.split()[0]) * (1 << (30 if limit.endswith("GiB") else 20))
    assert avail is None or limit_b <= 0.3 * avail
    # 4 GB of address space: room for every thread's stack (1.5 GB made the start itself fail, at
    # random, on a fresh venv), and the limit is then ~440 MiB, far below the sort's need
    r = cli("sql", TRACE, "SELECT * FROM range(100000000) ORDER BY random()", cache=cache_dir, timeout=120,
            pre="ulimit -v 4000000")  # fmt: skip
    one_line_error(r, "SQL error", "memory limit")
    assert not (ROOT / ".tmp").exists()


def test_deadline_interrupts_a_query_that_never_ends(cache_dir):
    forever = "WITH RECURSIVE t(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM t) SELECT count(*) FROM t"
    t0 = time.monotonic()
    r = cli("sql", TRACE, forever, "--timeout", "2", cache=cache_dir, timeout=60)
    one_line_error(r, "SQL error", "2 s deadline")
    assert time.monotonic() - t0 < 30


@pytest.mark.parametrize(
    ("sig", "code", "word"), [(signal.SIGINT, 130, "interrupted"), (signal.SIGTERM, 143, "terminated")]
)
@pytest.mark.slow
def test_signals_interrupt_a_running_query(cache_dir, sig, code, word):
    """Ctrl-C and SIGTERM stopped nothing while DuckDB ran (item 10): now the query is interrupted
    and the process exits within seconds."""
    from engine.trace.store import build

    build(TRACE)  # the process finds its store built: the signal lands in the query
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MYSTIQUE_CACHE_DIR": str(cache_dir)}
    forever = "SELECT count(*) FROM range(10000000000000)"
    cmd = [sys.executable, "-m", "engine.cli.main", "sql", str(TRACE), forever]
    # as a terminal starts it: SIGINT at its default. A child inherits an ignored SIGINT, and
    # Python then installs no KeyboardInterrupt handler (what `nohup` and `cmd &` rely on); an
    # earlier test of the same xdist worker left SIGINT ignored (seen twice in fresh-clone runs
    # after the file order changed: the query ran on and this test timed out)
    p = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=env,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        time.sleep(5)
        assert p.poll() is None, p.communicate()
        p.send_signal(sig)
        _out, err = p.communicate(timeout=20)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == code and err.strip() == f"mystique sql: {word}", (p.returncode, err)


class _LateStart:
    """A DuckDB connection whose query starts 0.5 s late, as on a loaded machine: the first
    interrupt lands before the query and DuckDB forgets it (checked in the test)."""

    def __init__(self, con):
        self.con = con

    def execute(self, sql):
        time.sleep(0.5)
        return self.con.execute(sql)

    def interrupt(self):
        self.con.interrupt()


def test_an_interrupt_sent_before_the_query_starts_is_sent_again():
    import threading

    import duckdb

    from engine.errors import TraceError
    from engine.trace.store.sql import _bounded

    con = duckdb.connect()
    con.interrupt()  # before any query: forgotten, the query below runs to its end
    assert con.execute("SELECT count(*) FROM range(100000000)").fetchone() == (100_000_000,)
    box = {}

    def go():
        try:
            _bounded(_LateStart(con), "SELECT count(*) FROM range(10000000000000)", 10, None, lambda: True)
        except TraceError as exc:
            box["error"] = str(exc)

    t = threading.Thread(target=go, daemon=True)
    t.start()
    t.join(10)
    ran_on = t.is_alive()
    if ran_on:  # the old single interrupt: stop the runaway query before failing
        end = time.monotonic() + 10
        while t.is_alive() and time.monotonic() < end:
            con.interrupt()
            t.join(0.1)
    assert not ran_on, "the query ran on 10 s after its cancel"
    assert "cancelled" in box.get("error", ""), box


def test_cancel_interrupts_a_running_query(cache_dir):
    """The dashboard passes `cancel` (its session ended): the query stops within a second."""
    from engine.errors import TraceError
    from engine.trace.store.sql import run

    t0 = time.monotonic()
    with pytest.raises(TraceError, match="cancelled"):
        run(TRACE, "SELECT count(*) FROM range(10000000000000)", cancel=lambda: time.monotonic() - t0 > 1)
    assert time.monotonic() - t0 < 10
