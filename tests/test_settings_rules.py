"""One way to validate (issue 34 item 3): every engine config is a frozen, kw_only, slotted
`Settings` whose fields declare their rules, and every `MYSTIQUE_*` variable is read through the
one table in engine/envvars.py."""

from __future__ import annotations

import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import pytest

from engine.errors import TraceError

ROOT = Path(__file__).resolve().parent.parent


def test_settings_refuse_any_other_shape():
    from engine.rules import Between
    from engine.settings import Settings

    with pytest.raises(TypeError, match="frozen=True, kw_only=True, slots=True"):

        @dataclass(kw_only=True, slots=True)
        class Loose(Settings):  # not frozen
            n: int = 1

    with pytest.raises(TypeError, match="not __post_init__"):

        @dataclass(frozen=True, kw_only=True, slots=True)
        class Coded(Settings):
            n: int = 1

            def __post_init__(self) -> None:
                pass

    @dataclass(frozen=True, kw_only=True)  # no slots: caught when an instance is made
    class Roomy(Settings):
        n: Annotated[int, Between(1)] = 1

    with pytest.raises(TypeError, match="slots=True"):
        Roomy()


def test_every_config_is_a_settings_with_declared_rules():
    from engine.capture.api import CaptureConfig
    from engine.compose.limits import ComposeLimits
    from engine.compose.shard.kinds import SHARDINGS, EmbeddingSharding
    from engine.compose.spec import BenchmarkSpec, Segment
    from engine.replay.config import ReplayConfig
    from engine.replay.distributed import DistConfig
    from engine.rules import Between, OneOf
    from engine.settings import _SHAPED, DashboardSettings, Settings
    from engine.simulate.config import SimConfig
    from engine.simulate.planners import PLANNERS

    configs = [
        CaptureConfig,
        ComposeLimits,
        ReplayConfig,
        DistConfig,
        DashboardSettings,
        SimConfig,
        *SHARDINGS.values(),
        BenchmarkSpec,
        Segment,
    ]
    for cls in configs:
        assert issubclass(cls, Settings) and cls in _SHAPED, cls.__name__
    assert Between(1) in ComposeLimits.rules_of("max_nodes")
    assert [r.choices for r in EmbeddingSharding.rules_of("plan") if isinstance(r, OneOf)] == [tuple(PLANNERS)]
    # a rule names the object and the field, whichever config it sits on
    with pytest.raises(TraceError, match=r"^compose limit max_nodes: must be >= 1, got 0$"):
        ComposeLimits(max_nodes=0)
    with pytest.raises(TraceError, match=r"^capture threads: must be >= 1, got 0$"):
        CaptureConfig(out_dir=Path("x"), name="m", threads=0)
    with pytest.raises(TraceError, match=r"^capture name: must be a plain file-name stem"):
        CaptureConfig(out_dir=Path("x"), name="../m")
    with pytest.raises(TraceError, match=r"^replay config lazy: expected true/false or 'auto', got 'yes'$"):
        ReplayConfig(lazy="yes")  # type: ignore[arg-type]
    with pytest.raises(TraceError, match=r"^distributed replay settings world_size: must be between 1 and 1024"):
        DistConfig(world_size=2048)
    assert ReplayConfig(mode="leaf", out_dir="o").to_dict()["out_dir"] == "o"  # type: ignore[arg-type]
    with pytest.raises(TraceError, match=r"^segment repeat: must be >= 1, got 0$"):
        Segment(repeat=0)


def test_a_cuda_replay_config_is_built_without_torch():
    """The CUDA check is the executor's (engine.replay.executor.require_device): building and
    reading a config, as the UI and the job catalog do, imports no torch."""
    code = (
        "import sys; from engine.replay.config import ReplayConfig; "
        "c = ReplayConfig(device='cuda:1'); assert c.is_cuda; print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def test_every_mystique_variable_is_read_through_the_table():
    from engine import envvars

    read = re.compile(r"environ(?:\.get\(|\[)\s*[\"'](MYSTIQUE_\w+)")
    named = re.compile(r"[\"'](MYSTIQUE_[A-Z_]+)[\"']")
    direct, unknown = [], set()
    for folder in ("engine", "app", "pages"):
        for p in (ROOT / folder).rglob("*.py"):
            text = p.read_text()
            if p.name != "envvars.py":
                direct += [f"{p.relative_to(ROOT)}: {m}" for m in read.findall(text)]
            unknown |= set(named.findall(text)) - set(envvars.ENV)
    get = re.compile(r"environ\.get\(\s*[\"'](MYSTIQUE_\w+)")  # the benchmarks set some for their children
    for p in (ROOT / "benchmarks").rglob("*.py"):
        text = p.read_text()
        direct += [f"{p.relative_to(ROOT)}: {m}" for m in get.findall(text)]
        unknown |= set(named.findall(text)) - set(envvars.ENV)
    assert not direct, f"read these through engine.envvars.get: {direct}"
    assert not unknown, f"add these to engine/envvars.py VARS: {sorted(unknown)}"
    with pytest.raises(KeyError):
        envvars.get("MYSTIQUE_NOT_DECLARED")
    assert "`MYSTIQUE_MAX_GZIP_RATIO` | 128 |" in (ROOT / "docs" / "cli.md").read_text()


def test_env_int_names_the_variable(monkeypatch):
    from engine import envvars

    monkeypatch.setenv("MYSTIQUE_MAX_GZIP_RATIO", " 0 ")
    assert envvars.get_int("MYSTIQUE_MAX_GZIP_RATIO", 128, 1) == 1
    monkeypatch.setenv("MYSTIQUE_MAX_GZIP_RATIO", "lots")
    with pytest.raises(TraceError, match="MYSTIQUE_MAX_GZIP_RATIO must be an integer, got 'lots'"):
        envvars.get_int("MYSTIQUE_MAX_GZIP_RATIO", 128, 1)
    monkeypatch.setenv("MYSTIQUE_MAX_GZIP_RATIO", "  ")
    assert envvars.get("MYSTIQUE_MAX_GZIP_RATIO") is None
