"""Every test session runs as a fresh machine's first (issue 25 §1): the folders a machine's
history lives in are new and empty, and the engine's own lookups resolve into them.

Was: a test passed only where pytest's temp counter had grown (its output held temp paths), and
the parse cache (~/.cache/mystique), calibrated cost-model curves (.mystique_cache/ relative to
the working directory), the UI folder, ~/.streamlit and Hypothesis' example database of earlier
runs were all read by later ones.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from conftest import FRESH_DIRS, ORIGINAL_ENV, ROOT


def _fresh(var: str) -> Path:
    return Path(os.environ[var]).resolve()


def test_history_folders_are_fresh_and_outside_the_checkout():
    roots = {_fresh(var).parent for var in FRESH_DIRS}
    assert len(roots) == 1, roots  # one session folder holds them all
    (root,) = roots
    assert root.name.startswith("mystique-fresh-") and ROOT not in root.parents
    for var in FRESH_DIRS:
        p = _fresh(var)
        assert p.is_dir() and p != Path(ORIGINAL_ENV[var] or "/nonexistent").resolve(), var
    assert "MYSTIQUE_WORKSPACE" not in os.environ


def test_engine_lookups_resolve_into_the_fresh_folders():
    from engine import resources
    from engine.simulate import costmodel
    from engine.trace.cache import cache_root

    assert cache_root().resolve() == _fresh("MYSTIQUE_CACHE_DIR")
    assert costmodel.cache_dir().resolve() == _fresh("MYSTIQUE_COSTMODEL_DIR")
    assert costmodel.microbench_curves("cpu") == {}  # no developer's calibration answers here
    assert resources.user_cache_dir().resolve().parent == _fresh("XDG_CACHE_HOME")
    assert Path.home().resolve() == _fresh("HOME")
    assert not (Path.home() / ".streamlit").exists()


def test_costmodel_dir_override_order(monkeypatch, tmp_path):
    """MYSTIQUE_COSTMODEL_DIR, else MYSTIQUE_CACHE_DIR/costmodel, else .mystique_cache/costmodel
    under the working directory (where calibrate.py has always written)."""
    from engine.simulate import costmodel

    monkeypatch.setenv("MYSTIQUE_COSTMODEL_DIR", str(tmp_path / "a"))
    assert costmodel.cache_dir() == tmp_path / "a"
    monkeypatch.delenv("MYSTIQUE_COSTMODEL_DIR")
    monkeypatch.setenv("MYSTIQUE_CACHE_DIR", str(tmp_path / "b"))
    assert costmodel.cache_dir() == tmp_path / "b" / "costmodel"
    monkeypatch.delenv("MYSTIQUE_CACHE_DIR")
    assert costmodel.cache_dir() == Path(".mystique_cache") / "costmodel"


def test_hypothesis_keeps_no_example_database():
    from hypothesis import settings
    from hypothesis.configuration import storage_directory

    assert settings().database is None
    where = storage_directory("x", intent_to_write=False)
    home = Path(getattr(where, "path", where)).resolve()  # a Path, or an object holding one (6.170+)
    assert _fresh("HOME").parent in home.parents and ROOT not in home.parents


def test_make_test_uses_a_new_basetemp_per_pass():
    make = (ROOT / "Makefile").read_text()
    recipe = make.split("\ntest:", 1)[1].split("\n\n", 1)[0]
    assert recipe.count("$(PYTEST) --basetemp=") == 2 and "mktemp -d" in recipe
    assert re.search(r"\$\{TMPDIR:-/tmp\}", recipe.replace("$$", "$"))
    assert re.search(r"^PYTEST := .*-p no:cacheprovider", make, re.M)  # no lastfailed state between runs


def test_make_quick_leaves_out_what_the_slow_summary_leaves_out():
    """`make quick` deselects exactly the markers whose tests tests/conftest.py leaves out of its
    "not marked slow but over SLOW_S" summary, and runs in a new temp folder like `make test`."""
    from conftest import _NOT_QUICK

    make = (ROOT / "Makefile").read_text()
    recipe = make.split("\nquick:", 1)[1].split("\n\n", 1)[0]
    (expr,) = re.findall(r'-m "([^"]+)"', recipe)
    assert set(re.findall(r"not (\w+)", expr)) == _NOT_QUICK and " or " not in expr, expr
    assert "$(PYTEST) --basetemp=" in recipe and "mktemp -d" in recipe
