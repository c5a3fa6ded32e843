"""The `MYSTIQUE_*` environment variables: one table, read through `get` / `get_int`.

Why one table: fourteen variables were read with `os.environ.get` in twenty files, each with its
own default, blank handling and documentation (or none). Here each is declared once, with what it
does and its default in words; every file that reads one calls `get(NAME)` (a name not in the
table is a KeyError, so a new variable cannot be read before it is documented), and
`python -m engine.cli.docgen` writes the table into docs/cli.md (`markdown_table`).

A blank value counts as unset. The benchmarks' and tests' own variables are in the table too
(`scope`), so one place lists everything a user or CI may set.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from engine.errors import TraceError


@dataclass(frozen=True, slots=True)
class EnvVar:
    name: str
    default: str  # in words, as docs/cli.md shows it
    what: str
    scope: str = "engine"  # "engine", "app", "benchmarks" or "tests"


VARS: tuple[EnvVar, ...] = (
    EnvVar(
        "MYSTIQUE_CACHE_DIR",
        "`~/.cache/mystique`",
        "the Parquet trace cache and trace stores (engine.trace.cache); the cost model's measurements go to its `costmodel/` (default there `.mystique_cache/costmodel`)",
    ),
    EnvVar(
        "MYSTIQUE_COSTMODEL_DIR",
        "`$MYSTIQUE_CACHE_DIR/costmodel`",
        "where `calibrate` keeps its measurements and fitted curves (engine.simulate.costmodel)",
    ),
    EnvVar(
        "MYSTIQUE_DATA",
        "the checkout, then the install prefixes",
        "a folder searched first for the data files (sample traces, examples: engine.resources)",
    ),
    EnvVar(
        "MYSTIQUE_MAX_BYTES",
        "a share of the available memory",
        "the largest decompressed size of one trace file (engine.trace.safe_io)",
    ),
    EnvVar(
        "MYSTIQUE_MAX_GZIP_RATIO",
        "128",
        "the largest decompressed:compressed ratio of a gzip member (a zip-bomb guard)",
    ),
    EnvVar(
        "MYSTIQUE_LOAD_MAX_BYTES",
        "the available memory",
        "the memory a trace may take when loaded whole; larger ones go through the trace store",
    ),
    EnvVar(
        "MYSTIQUE_WHOLE_TABLE_MAX_BYTES",
        "2 GiB",
        "the largest whole-table estimate info and the pages decode; a bigger trace is read through its store",
    ),
    EnvVar(
        "MYSTIQUE_SIM_MAX_BYTES",
        "half the available memory",
        "the memory budget of a simulation (engine.simulate.budget)",
    ),
    EnvVar(
        "MYSTIQUE_SCHEDULER",
        "`local`",
        "where fan-outs over ranks run: `serial`, `local` or `tcp://HOST:PORT` (engine.fanout)",
    ),
    EnvVar(
        "MYSTIQUE_DASK_CONNECT_S",
        "10",
        "the deadline, in whole seconds (1-600), for reaching a `tcp://` scheduler, Dask's handshake included (engine.fanout)",
    ),
    EnvVar(
        "MYSTIQUE_APP_SCHEDULER",
        "unset",
        "set by `mystique app --scheduler`: every new UI session starts with it",
        "app",
    ),
    EnvVar(
        "MYSTIQUE_WORKSPACE", "`.mystique/` in the working folder", "the workspace folder (catalog and run folders)"
    ),
    EnvVar("MYSTIQUE_UI_DIR", "`.mystique_cache/ui`", "where the UI keeps uploads and replay results", "app"),
    EnvVar("MYSTIQUE_PREFETCH", "`1`", "`0` turns off the UI's background loading of the next page's data", "app"),
    EnvVar(
        "MYSTIQUE_LAUNCHER_PID", "unset", "set by the multi-rank launcher for its workers (engine.distributed.launch)"
    ),
    EnvVar(
        "MYSTIQUE_PROGRESS_BOARD", "unset", "set by the multi-rank launcher: the file its workers report progress to"
    ),
    EnvVar(
        "MYSTIQUE_SHARED_TRACES",
        "`../shared/traces`",
        "the other teams' real traces that tests and benchmarks read",
        "tests",
    ),
    EnvVar(
        "MYSTIQUE_SIM_CAPTURES", "unset", "captures of the GPU runs that the simulator benchmark predicts", "benchmarks"
    ),
    EnvVar(
        "MYSTIQUE_FLEET_SIZES",
        "the benchmark's own sizes",
        "comma-separated fleet sizes the fleet benchmarks run",
        "benchmarks",
    ),
    EnvVar(
        "MYSTIQUE_OPEN_SIZES",
        "the benchmark's own sizes",
        "comma-separated event counts of the big-trace open rows",
        "benchmarks",
    ),
    EnvVar("MYSTIQUE_RAWFLEET_RANKS", "512 (8 with --quick)", "rank files of the raw-JSON fleet row", "benchmarks"),
    EnvVar(
        "MYSTIQUE_HTA_PYTHON",
        "unset",
        "an interpreter that has HTA (traceinsight) for the second opinion",
        "benchmarks",
    ),
)
ENV: dict[str, EnvVar] = {v.name: v for v in VARS}


def get(name: str) -> str | None:
    """The variable's value, stripped; None when unset or blank. KeyError for a name not in `VARS`."""
    value = os.environ.get(ENV[name].name, "").strip()
    return value or None


def get_int(name: str, default: int, minimum: int) -> int:
    """An integer variable (at least `minimum`), `default` when unset; TraceError when not an integer."""
    raw = get(name)
    if raw is None:
        return default
    try:
        return max(minimum, int(raw))
    except ValueError:
        raise TraceError(f"{name} must be an integer, got {raw!r}") from None


def markdown_table() -> str:
    """The table docs/cli.md shows (engine.cli.docgen)."""
    rows = ["| variable | default | what it sets | read by |", "| --- | --- | --- | --- |"]
    rows += [f"| `{v.name}` | {v.default} | {v.what} | {v.scope} |" for v in VARS]
    return "\n".join(rows) + "\n"


__all__ = ["ENV", "VARS", "EnvVar", "get", "get_int", "markdown_table"]
