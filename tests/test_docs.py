"""The generated reference in docs/ matches the code (issue 25 §2).

docs/cli.md comes from `engine.cli.docgen` (argparse definitions + result-contract docstrings)
and docs/figures.md from `benchmarks/report.py` (benchmarks/results/*.json). Each test
regenerates the text in memory and compares it with the committed file, so a new flag, a
changed help text or default, a new contract line or a new benchmark result fails here until
`make docs` is run. The key tests check the other direction: every key the code emits is named
in the docstring that is its contract (a key added to a `to_json` without a line there fails).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
from conftest import ROOT, SAMPLES

REGEN = "run `make docs` (python -m engine.cli.docgen > docs/cli.md; python benchmarks/report.py > docs/figures.md)"


def _documented(key: str, text: str) -> bool:
    return re.search(rf"(?<![\w.]){re.escape(key)}(?!\w)", text) is not None


def _missing(keys, module) -> list[str]:
    doc = module.__doc__ or ""
    return sorted(k for k in keys if not _documented(k, doc))


def test_cli_md_is_the_generator_output():
    from engine.cli import docgen

    committed = (ROOT / "docs" / "cli.md").read_text()
    assert committed == docgen.render(), f"docs/cli.md differs from the code: {REGEN}"


def test_cli_md_lists_every_command_and_option():
    """Independent of the generator's layout: each subcommand and each of its option strings
    appears in the committed docs/cli.md."""
    import argparse

    from engine.cli.main import build_parser

    text = (ROOT / "docs" / "cli.md").read_text()
    (subs,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    assert len(subs.choices) == 9  # info capture replay compare compose simulate sql fleet app
    for name, sub in subs.choices.items():
        assert f"## mystique {name}" in text
        nested = [a for a in sub._actions if isinstance(a, argparse._SubParsersAction)]
        parsers = [(name, sub)] + [(f"{name} {n}", p) for a in nested for n, p in a.choices.items()]
        for label, p in parsers:
            assert f"mystique {label}" in text, label
            for a in p._actions:
                for opt in a.option_strings:
                    if opt not in ("-h", "--help"):
                        assert f"`{opt}`" in text, (label, opt)


def test_info_keys_are_in_their_contract():
    from engine.trace import summary

    assert _missing(summary.KEYS, summary) == []


def test_replay_json_keys_are_in_their_contract():
    from engine.replay import result

    res = result.ReplayResult(iteration_ms=[1.0], per_op=[], coverage={}, device="cpu")
    keys = set(res.to_json())
    for td in (result.PerOpRow, result.Coverage, result.SkippedOp, result.CategoryCoverage):
        keys |= set(td.__required_keys__) | set(td.__optional_keys__)
    assert len(keys) > 30
    assert _missing(keys, result) == []


def test_compare_json_keys_are_in_their_contract():
    from engine.compare import replay, traces

    assert _missing(replay.Comparison().to_json(), replay) == []
    assert _missing(traces.TraceDiff().to_json(), traces) == []


def test_simulate_json_keys_are_in_their_contract(tmp_path, capsys):
    """A real `mystique simulate --json --out` on the MLP sample: every key it prints is named
    in engine/simulate/result.py's docstring."""
    from engine.cli.main import main
    from engine.simulate import result

    folder = SAMPLES / "mlp"
    if not (folder / "mlp_kineto.json.gz").exists():
        pytest.skip("bundled mlp sample missing")
    code = main(["simulate", str(folder), "--out", str(tmp_path / "o"), "--json"])
    assert code == 0
    data = json.loads(capsys.readouterr().out)
    assert {"predicted_iteration_ms", "sources", "predicted_trace"} <= set(data)
    assert _missing(data, result) == []
    assert _missing(data["breakdown"], result) == []


def test_whatif_spec_example_in_the_docs_parses():
    """The example spec in engine/simulate/whatif/spec.py's docstring (shown in docs/cli.md)."""
    from engine.simulate.whatif import WhatIfSpec, spec

    doc = spec.__doc__ or ""
    example = doc.split("\n\n")[1]  # the indented block after the first line; its regex holds a bare backslash
    parsed = WhatIfSpec.parse(json.loads(example.replace("\\", "\\\\")))
    assert [e.kind for e in parsed.edits] == ["speedup", "layers", "batch", "data_parallel"]


def test_readme_scale_table_is_the_report_output():
    import importlib.util

    spec = importlib.util.spec_from_file_location("_report", ROOT / "benchmarks" / "report.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    readme = ROOT / "README.md"
    assert readme.read_text() == mod.render_readme(readme), f"README.md's cost-against-size table is stale: {REGEN}"


def test_each_benchmark_writes_its_own_section():
    """report.py only assembles: every section's formatter is `docs_section` in the benchmark that
    writes the results (issue 34), read out of that file without importing it."""
    import ast
    import importlib.util

    spec = importlib.util.spec_from_file_location("_report", ROOT / "benchmarks" / "report.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    own = {
        n.name
        for n in ast.parse((ROOT / "benchmarks" / "report.py").read_text()).body
        if isinstance(n, ast.FunctionDef)
    }
    assert not own & set(mod.SECTIONS), f"formatters still in report.py: {sorted(own & set(mod.SECTIONS))}"
    for stem in mod.SECTIONS:
        fn = mod.section_of(stem)
        assert fn.__doc__, f"benchmarks/{stem}.py: docs_section needs its method as a docstring"
        assert fn.__code__.co_filename.endswith(f"benchmarks/{mod.SCRIPTS.get(stem, stem)}.py")


def test_figures_md_is_the_report_output():
    """benchmarks/report.py run as the script it is (tests do not import benchmarks/)."""
    r = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "report.py")], capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    assert r.returncode == 0, r.stderr[-2000:]
    committed = (ROOT / "docs" / "figures.md").read_text()
    assert committed == r.stdout, f"docs/figures.md differs from benchmarks/results: {REGEN}"


def test_architecture_layout_names_every_engine_package():
    """docs/architecture.md is written by hand: its layout table must at least name every
    package under engine/ (a new one fails here until it has a row)."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    packages = sorted(p.parent.name for p in (ROOT / "engine").glob("*/__init__.py"))
    assert len(packages) >= 12
    assert [p for p in packages if f"`engine/{p}/`" not in text] == []


def test_readme_is_short_and_names_the_two_commands():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) < 200
    assert "make run" in text and "make test" in text and "make docs" in text
    for doc in ("docs/cli.md", "docs/figures.md", "docs/architecture.md"):
        assert doc in text and (ROOT / doc).is_file()
    for shot in re.findall(r"\]\((docs/screenshots/[^)]+)\)", text):
        assert (ROOT / shot).is_file(), shot


def test_replay_cli_json_keys_are_in_its_docstring(tmp_path, capsys, cache_dir):
    """A real single-rank `mystique replay --json`: every key of the summary it prints (and of
    its coverage) is named in engine/cli/replay.py's docstring, shown in docs/cli.md."""
    from engine.cli import replay as cli_replay
    from engine.cli.main import main

    et = SAMPLES / "mlp" / "mlp_et.json.gz"
    if not et.exists():
        pytest.skip("bundled mlp sample missing")
    args = ["replay", str(et), "--iters", "1", "--warmup", "0", "--no-profile", "--out", str(tmp_path), "--json"]
    assert main(args) == 0
    data = json.loads(capsys.readouterr().out)
    assert {"median_ms", "coverage", "paths"} <= set(data)
    assert _missing(data, cli_replay) == []
    assert _missing(data["coverage"], cli_replay) == []
    assert _missing(data["paths"], cli_replay) == []


def test_architecture_names_only_files_that_exist():
    """Every `module.py` the hand-written architecture page names is a file of the repository."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    names = set(re.findall(r"`([\w/]+\.py)`", text))
    assert len(names) > 10
    tops = ("engine", "app", "pages", "benchmarks", "tests")
    files = {p.relative_to(ROOT).as_posix() for top in tops for p in (ROOT / top).rglob("*.py")}
    missing = [n for n in names if not any(f == n or f.endswith("/" + n) for f in files)]
    assert missing == [], f"docs/architecture.md names files that do not exist: {missing}"
