"""Data files for the wheel; everything else is in pyproject.toml.

Why a setup.py at all: `[tool.setuptools.data-files]` maps one target folder to a list of
files and does not recurse, so each sample folder would need its own entry (and a forgotten one
would silently be missing from the wheel). This walks the shipped folders instead: the
dashboard (app/, pages/, .streamlit/config.toml), sample_traces/ and examples/ land under
<prefix>/share/mystique-studio/ in the same layout as in a checkout.
"""

import os

from setuptools import setup

SHARE = "share/mystique-studio"
SHIPPED = ("app", "pages", "examples", "sample_traces", ".streamlit")
SKIP_DIRS = {"__pycache__"}
SKIP_SUFFIXES = (".pyc", ".pyo", ".tmp")


def data_files() -> list[tuple[str, list[str]]]:
    out: dict[str, list[str]] = {}
    for top in SHIPPED:
        for folder, dirs, files in os.walk(top):
            dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS and not d.startswith("."))
            keep = sorted(f for f in files if not f.endswith(SKIP_SUFFIXES) and not f.startswith("."))
            if keep:
                out.setdefault(f"{SHARE}/{folder}", []).extend(os.path.join(folder, f) for f in keep)
    return sorted(out.items())


setup(data_files=data_files())
