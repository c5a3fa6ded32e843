"""Where the files that ship beside the engine live: the dashboard, sample traces, example specs.

Why a locator: in a source checkout these folders sit next to `engine/` (app/, pages/,
.streamlit/, sample_traces/, examples/); an installed wheel carries the same tree as data files
under `<prefix>/share/mystique-studio/` (see `[tool.setuptools.data-files]` in pyproject.toml).
Both layouts are the same tree, so `app/main.py` finds `pages/` and `sample_traces/` relative to
itself either way, and everything else asks this module instead of guessing from `__file__`.
"""

from __future__ import annotations

import os
import site
import sys
import sysconfig
from pathlib import Path

from engine import envvars

DIST = "mystique-studio"
"""The distribution name; the wheel's data files land in `<prefix>/share/<DIST>/`."""

_MARKER = Path("app") / "main.py"


def _candidates() -> list[Path]:
    """Roots to try, most specific first: $MYSTIQUE_DATA, the checkout, the install prefixes."""
    out: list[Path] = []
    if env := envvars.get("MYSTIQUE_DATA"):
        out.append(Path(env))
    out.append(Path(__file__).resolve().parents[1])  # source checkout / editable install
    prefixes = [sysconfig.get_path("data"), sys.prefix, sys.exec_prefix, getattr(site, "USER_BASE", None)]
    for prefix in prefixes:
        if prefix:
            out.append(Path(prefix) / "share" / DIST)
    return out


def data_root() -> Path:
    """The folder holding app/, pages/, sample_traces/ and examples/.

    Falls back to the checkout root (where they would be) when none is found, so error messages
    name a sensible path.
    """
    for root in _candidates():
        if (root / _MARKER).is_file():
            return root
    return Path(__file__).resolve().parents[1]


def is_checkout() -> bool:
    """True when running from a source tree (the data root holds `engine/` itself)."""
    return (data_root() / "engine" / "__init__.py").is_file()


def app_main() -> Path:
    """The Streamlit entrypoint (`app/main.py`)."""
    return data_root() / _MARKER


def sample_traces_dir() -> Path:
    """The bundled sample traces (one folder per sample model)."""
    return data_root() / "sample_traces"


def examples_dir() -> Path:
    """The example benchmark specs."""
    return data_root() / "examples"


def user_cache_dir() -> Path:
    """A writable folder for UI uploads and results when not running from a checkout.

    An installed data root may be read-only (a system prefix), so it is never written to.
    """
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "mystique"
