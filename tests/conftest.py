"""Shared fixtures and markers.

`gpu`, `slow`, `e2e` skip with a reason when they cannot run. `perf`: a wall-clock assertion;
it runs in `make test` like everything else and its outcomes are listed again in a separate
summary section, because on a loaded machine it is the kind of failure to read twice.

`shared`: the extra layer of tests on the real traces in ../shared/traces (other teams'
captures, golden values from their MANIFEST.json). The core suite covers the same code on the
project's own samples and on GPU-shaped traces from `engine.testing`, so a fresh clone without
../shared deselects this layer (one summary line says how many and why) instead of reporting
them as skipped. Tests that take the `shared_traces` fixture are marked automatically.

Every session runs as on a fresh machine (`pytest_configure` below): HOME, XDG_CACHE_HOME,
XDG_CONFIG_HOME, the parse cache (MYSTIQUE_CACHE_DIR), the cost-model curves
(MYSTIQUE_COSTMODEL_DIR), the UI folder (MYSTIQUE_UI_DIR) and Hypothesis' home point at new empty
folders, and Hypothesis keeps no example database. Why: a test once passed only on machines that
had run pytest often (its output held temp paths), and a developer's parse cache, calibrated
curves, ~/.streamlit config or saved Hypothesis examples could answer for the code under test.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED_TRACES = Path(os.environ.get("MYSTIQUE_SHARED_TRACES", ROOT.parent / "shared" / "traces"))
SAMPLES = ROOT / "sample_traces"


# What a machine's history can leave behind, each pointed at a fresh folder per session (per
# xdist worker). MYSTIQUE_SHARED_TRACES is input, not history, and is left alone.
FRESH_DIRS = {
    "HOME": "home",
    "XDG_CACHE_HOME": "xdg-cache",
    "XDG_CONFIG_HOME": "xdg-config",
    "MYSTIQUE_CACHE_DIR": "parse-cache",
    "MYSTIQUE_COSTMODEL_DIR": "costmodel",
    "MYSTIQUE_UI_DIR": "ui",
}
_FRESH_ROOT: list[Path] = []
ORIGINAL_ENV = {var: os.environ.get(var) for var in FRESH_DIRS}  # before pytest_configure replaced them


def pytest_configure(config):
    """Fresh folders for everything a previous run or a developer's session could have left."""
    root = Path(tempfile.mkdtemp(prefix="mystique-fresh-"))
    _FRESH_ROOT.append(root)
    for var, name in FRESH_DIRS.items():
        (root / name).mkdir()
        os.environ[var] = str(root / name)
    os.environ.pop("MYSTIQUE_WORKSPACE", None)  # the UI's workspace then lives under MYSTIQUE_UI_DIR
    # Store ingestion fans out serially unless a test names a scheduler (tests/test_fanout.py):
    # a Dask LocalCluster per multi-rank test would cost seconds each on a loaded machine
    os.environ["MYSTIQUE_SCHEDULER"] = "serial"
    if hasattr(config.option, "loadscopereorder"):  # keep heaviest_files_first's order under xdist
        config.option.loadscopereorder = False
    try:
        import hypothesis
        from hypothesis.configuration import set_hypothesis_home_dir
    except ImportError:
        return
    set_hypothesis_home_dir(root / "hypothesis")
    # no example database (saved failures are history); the same examples on every run unless
    # `--hypothesis-profile explore` asks for new ones
    hypothesis.settings.register_profile("fresh", database=None, derandomize=True)
    hypothesis.settings.register_profile("explore", database=None)
    hypothesis.settings.load_profile(config.getoption("hypothesis_profile", default=None) or "fresh")


def pytest_unconfigure(config):
    for root in _FRESH_ROOT:
        shutil.rmtree(root, ignore_errors=True)


def _has_cuda() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:  # noqa: BLE001 -- torch missing means no CUDA
        return False


def shared_available() -> bool:
    return (SHARED_TRACES / "MANIFEST.json").exists()


_DESELECTED_SHARED: list[str] = []


# ET files of every layout the loader reads (torch ET 1.0.x on one and two GPUs, a linear model,
# chakra 0.0.4): a test taking `shared_et` runs once per file; `sample_et`: once per own sample
SHARED_ETS = (
    "param_resnet/resnet_et.json.gz",
    "param_resnet_2gpu/resnet_2gpu_et.json.gz",
    "param_linear/linear_et.json.gz",
    "hta_simple_add/benchmark_simple_add_et.json.gz",
    "chakra_1.0.2/1.0.2-chakra.0.0.4.json.gz",
)
SAMPLE_ETS = ("mlp", "cnn", "transformer", "dlrm")


def pytest_generate_tests(metafunc):
    for name, values in (("shared_et", SHARED_ETS), ("sample_et", SAMPLE_ETS)):
        if name in metafunc.fixturenames:
            metafunc.parametrize(name, values, indirect=True)


@pytest.fixture()
def shared_et(request, shared_traces) -> Path:
    return shared_traces / request.param


def _sample_path(name: str) -> Path:
    path = SAMPLES / name / f"{name}_et.json.gz"
    if not path.exists():
        pytest.skip(f"sample trace {path} not captured yet (run `make samples`)")
    return path


@pytest.fixture()
def sample_et(request) -> Path:
    return _sample_path(request.param)


@pytest.fixture(scope="session")
def sample_path():
    """`sample_path(name)`: the ET of our own sample capture `name` (the test skips without it)."""
    return _sample_path


# Files run heaviest first: under `-n 2 --dist loadfile` a worker takes the next file when it is
# done, so the longest files start at once and the short ones fill in at the end (the
# longest-first rule; in collection order a long file found last ran alone on one core while the
# other idled). Weights are each file's summed test time in seconds from a measured run,
# tests/durations.json; a file not in it counts as DEFAULT_FILE_S. Refresh the table from the
# main pass (`make test`'s first command plus `--durations-table tests/durations.json`). The order
# inside a file is kept, and the sort is the same on every worker (xdist checks that). xdist's
# own reorder (files with the most tests first, on by default) would undo it: the browser
# journeys, one to three tests a file and minutes each, then ran last; `pytest_configure` turns
# it off (the Makefile says --no-loadscope-reorder too).
DURATIONS = ROOT / "tests" / "durations.json"
DEFAULT_FILE_S = 5.0
_MEASURED: dict[str, float] = {}


def pytest_addoption(parser):
    parser.addoption(
        "--durations-table",
        metavar="PATH",
        default=None,
        help="write each test file's summed test time (s) to PATH as JSON (merged into what is there)",
    )


def _file_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def file_weights() -> dict[str, float]:
    try:
        table = json.loads(DURATIONS.read_text())
    except (OSError, ValueError):
        return {}
    return {str(k): float(v) for k, v in table.items()} if isinstance(table, dict) else {}


def heaviest_files_first(items: list) -> None:
    """Sort `items` in place by their file's weight, heaviest first (stable: a file's tests stay
    together and in their order)."""
    w = file_weights()
    items.sort(key=lambda it: -w.get(_file_of(it.nodeid), DEFAULT_FILE_S))


# A test that takes longer than SLOW_S (set-up, call and tear-down together, in `make test`'s
# first pass on 2 cores) is marked `slow`: `make quick`, the inner loop, leaves those out. The
# summary names the unmarked ones over it, so the mark follows the suite as it grows.
SLOW_S = 3.0
_UNMARKED_S: dict[str, float] = {}
_NOT_QUICK = {"slow", "e2e", "perf", "alone"}  # the markers `make quick` leaves out


def pytest_runtest_logreport(report):
    _MEASURED[_file_of(report.nodeid)] = _MEASURED.get(_file_of(report.nodeid), 0.0) + report.duration
    if not _NOT_QUICK & set(getattr(report, "keywords", ())):  # a test `make quick` runs
        _UNMARKED_S[report.nodeid] = _UNMARKED_S.get(report.nodeid, 0.0) + report.duration


def pytest_sessionfinish(session, exitstatus):
    path = session.config.getoption("--durations-table")
    if not path or hasattr(session.config, "workerinput") or not _MEASURED:  # the controller writes
        return
    try:
        old = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        old = {}
    merged = {**(old if isinstance(old, dict) else {}), **{k: round(v, 1) for k, v in _MEASURED.items()}}
    Path(path).write_text(json.dumps(dict(sorted(merged.items())), indent=1) + "\n")


def pytest_collection_modifyitems(config, items):
    no_gpu = pytest.mark.skip(reason="needs a CUDA device; none is available here")
    keep, shared_layer = [], []
    for item in items:
        # markers, not item.keywords: keywords also hold the names of the folders above the test,
        # so a checkout in a folder named "gpu" or "shared" had every test skipped or deselected
        if item.get_closest_marker("gpu") and not _has_cuda():
            item.add_marker(no_gpu)
        if "shared_traces" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.shared)
        (shared_layer if item.get_closest_marker("shared") and not shared_available() else keep).append(item)
    if shared_layer:
        _DESELECTED_SHARED[:] = [i.nodeid for i in shared_layer]
        config.hook.pytest_deselected(items=shared_layer)
        items[:] = keep
    heaviest_files_first(items)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    tr = terminalreporter
    if _DESELECTED_SHARED:
        tr.write_line(
            f"shared layer: {len(_DESELECTED_SHARED)} tests on real traces not run: {SHARED_TRACES} is absent "
            "(the core suite covers the same code on sample_traces/ and engine.testing)"
        )
    over = sorted(((d, n) for n, d in _UNMARKED_S.items() if d >= SLOW_S), reverse=True)
    if over:
        tr.section(f"not marked slow but over {SLOW_S:g} s (`make quick` runs them; mark them slow)", sep="-")
        for d, n in over[:20]:
            tr.write_line(f"{d:6.1f} s {n}")
    perf = [
        r
        for key in ("passed", "failed", "error")
        for r in tr.stats.get(key, [])
        if "perf" in getattr(r, "keywords", ())
    ]
    if perf:
        tr.section("perf (wall-clock assertions)", sep="-")
        for r in perf:
            if r.when == "call" or r.outcome != "passed":
                tr.write_line(f"{r.outcome.upper():7} {r.nodeid} ({r.duration:.1f} s)")


def et_node(i: int, parent: int, name: str = "aten::add", **fields) -> dict:
    """A minimal flat-layout ET node without tensors, for hand-built traces (`fields` override)."""
    return {
        "name": name,
        "id": i,
        "rf_id": i,
        "parent": parent,
        "fw_parent": 0,
        "seq_id": -1,
        "scope": 0,
        "tid": 1,
        "fw_tid": 0,
        "op_schema": "",
        "inputs": [],
        "input_shapes": [],
        "input_types": [],
        "outputs": [],
        "output_shapes": [],
        "output_types": [],
        **fields,
    }


@pytest.fixture(autouse=True, scope="module")
def _fresh_streamlit_caches():
    """Each test file starts with empty Streamlit caches. They live in the process, and a worker
    runs many files: a view another file cached (a trace loaded whole under the default budget)
    was served to a file that lowers MYSTIQUE_WHOLE_TABLE_MAX_BYTES to read the same trace through
    its store, and its assertions depended on which files its worker ran first. Within a file the
    caches stay, as they do for one dashboard session."""
    import sys

    if "streamlit" in sys.modules:
        import streamlit as st

        st.cache_data.clear()
        st.cache_resource.clear()
    yield


@pytest.fixture(scope="session")
def shared_traces() -> Path:
    if not (SHARED_TRACES / "MANIFEST.json").exists():
        pytest.skip(f"shared traces not found at {SHARED_TRACES} (a fresh clone has none)")
    return SHARED_TRACES


@pytest.fixture(scope="session")
def manifest(shared_traces) -> list[dict]:
    return json.loads((shared_traces / "MANIFEST.json").read_text())


@pytest.fixture(scope="module")
def load_shared(shared_traces, tmp_path_factory):
    """`load_shared(*relative_paths)`: a trace from ../shared/traces, parsed through a parse cache
    of its own (a developer's cache never answers for the code under test)."""
    from engine.trace import load

    def loader(*rel: str):
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("MYSTIQUE_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
            return load(*(shared_traces / r for r in rel))

    return loader


@pytest.fixture(scope="module")
def simple_add(load_shared):
    """HTA's simple-add benchmark (ET + Kineto): small, one GPU, golden counts in MANIFEST."""
    return load_shared(
        "hta_simple_add/benchmark_simple_add_et.json.gz", "hta_simple_add/benchmark_simple_add_trace.json.gz"
    )


@pytest.fixture()
def cache_dir(tmp_path, monkeypatch) -> Path:
    """A private parse cache so tests never read a stale cache from the developer's tree."""
    d = tmp_path / "cache"
    monkeypatch.setenv("MYSTIQUE_CACHE_DIR", str(d))
    return d


# A distributed replay first measures a rank process's baseline RSS (engine.replay.budget: a fresh
# process that imports torch and loads the trace, ~3 s of CPU) and remembers it in the parse
# cache, under a name keyed by the interpreter, torch, FBGEMM and the trace's content. A private
# `cache_dir` per test measured it again for every replay; `rank_baselines` carries this
# session's own measurements (never a developer's) from test to test, so each trace is measured
# once per session (per xdist worker). Opt-in (pytestmark) for the files that launch ranks: other
# tests count the files of their cache.
RANK_BASELINES = "rank-baseline-*.json"


@pytest.fixture(scope="session")
def _rank_baseline_store(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("rank-baselines")


@pytest.fixture()
def rank_baselines(cache_dir, _rank_baseline_store):
    cache_dir.mkdir(parents=True, exist_ok=True)
    for f in _rank_baseline_store.glob(RANK_BASELINES):
        shutil.copyfile(f, cache_dir / f.name)
    yield
    for f in cache_dir.glob(RANK_BASELINES) if cache_dir.is_dir() else ():
        if not (_rank_baseline_store / f.name).exists():
            shutil.copyfile(f, _rank_baseline_store / f.name)
