"""Shared fixtures and markers: `gpu`, `slow`, `e2e` skip with a reason when they cannot run."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED_TRACES = Path(os.environ.get("MYSTIQUE_SHARED_TRACES", ROOT.parent / "shared" / "traces"))
SAMPLES = ROOT / "sample_traces"


def _has_cuda() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:  # noqa: BLE001 -- torch missing means no CUDA
        return False


def pytest_collection_modifyitems(config, items):
    no_gpu = pytest.mark.skip(reason="needs a CUDA device; none is available here")
    for item in items:
        if "gpu" in item.keywords and not _has_cuda():
            item.add_marker(no_gpu)


@pytest.fixture(scope="session")
def shared_traces() -> Path:
    if not (SHARED_TRACES / "MANIFEST.json").exists():
        pytest.skip(f"shared traces not found at {SHARED_TRACES} (a fresh clone has none)")
    return SHARED_TRACES


@pytest.fixture(scope="session")
def manifest(shared_traces) -> list[dict]:
    return json.loads((shared_traces / "MANIFEST.json").read_text())


@pytest.fixture()
def cache_dir(tmp_path, monkeypatch) -> Path:
    """A private parse cache so tests never read a stale cache from the developer's tree."""
    d = tmp_path / "cache"
    monkeypatch.setenv("MYSTIQUE_CACHE_DIR", str(d))
    return d
