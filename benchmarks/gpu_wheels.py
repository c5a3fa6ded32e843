"""Stage what the GPU run needs beyond the working tree into .gpu_carry/ (git-ignored).

    .venv/bin/python benchmarks/gpu_wheels.py [--no-download] [--traces DIR]      (Python 3.11+, pip)

The GPU machine has Python 3.12 and torch but no network; of the engine's core dependencies
(pyproject.toml `dependencies`, with their own requirements) it lacks some. This script
  1. resolves that closure from the packages installed here (the versions the engine is tested
     with), drops what the machine already has (`DEVICE_HAS`, its image's package list) and
     downloads each remaining one as a wheel for CPython 3.12 on manylinux x86_64, without
     dependencies, into .gpu_carry/wheels/;
  2. copies the shared ETs the coverage step replays, hta_simple_add (the gpu tests read it)
     and MANIFEST.json into .gpu_carry/traces/;
  3. writes .gpu_carry/source.txt (the commit and whether the tree was clean);
  4. prints the size of what travels: tracked files + .gpu_carry (the machine takes 64 MiB).

Then, on the GPU machine (repository root, .gpu_carry carried), the one command:

    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site \
        .gpu_carry/wheels/*.whl && export PYTHONPATH=/tmp/site && PYTHONUNBUFFERED=1 \
        MYSTIQUE_SHARED_TRACES=$PWD/.gpu_carry/traces python3 benchmarks/gpu_run.py --out $OUT

(docs/gpu_run.md: how to launch it, the budget and what comes back).
"""

from __future__ import annotations

import argparse
import importlib.metadata as md
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CARRY = ROOT / ".gpu_carry"
LIMIT_BYTES = 64 * 2**20
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64")
PLATFORMS += ("manylinux_2_24_x86_64", "manylinux1_x86_64")
# The GPU image's Python packages (normalized names), as listed for it on 2026-11-17.
DEVICE_HAS = frozenset(
    """absl-py accelerate aiofiles aiohappyeyeballs aiohttp aiosignal annotated-doc anyio attrs botorch build
certifi charset-normalizer chex click cloudpickle cmake colorama contourpy coverage cuda-bindings cuda-core
cuda-pathfinder cuda-toolkit cupy-cuda13x cycler cython diffrax e3nn einops equinox etils execnet filelock
flatbuffers flax fonttools formulaic frozenlist fsspec gpytorch grpcio h11 h5py hf-xet httpcore httpx
huggingface-hub humanize hypothesis idna imageio iniconfig interface-meta jax jax-cuda13-pjrt
jax-cuda13-plugin jaxlib jaxtyping jinja2 joblib kiwisolver lazy-loader lightning lightning-utilities
linear-operator lineax llvmlite lxml markdown markdown-it-py markupsafe matplotlib mdurl meson ml-dtypes
mpi4py mpmath msgpack multidict multipledispatch mypy-extensions nanobind narwhals networkx ninja numba
numba-cuda numpy numpyro nvidia-cublas nvidia-cuda-cupti nvidia-cuda-nvrtc nvidia-cuda-runtime
nvidia-cudnn-cu13 nvidia-cufft nvidia-cufile nvidia-curand nvidia-cusolver nvidia-cusparse
nvidia-cusparselt-cu13 nvidia-ml-py nvidia-nccl-cu13 nvidia-nvjitlink nvidia-nvshmem-cu13 nvidia-nvtx onnx
onnx-ir onnxruntime onnxscript opencv-python-headless optax opt-einsum opt-einsum-fx optimistix
orbax-checkpoint packaging pandas pathspec patsy peft pillow pip pluggy portalocker prometheus-client
propcache protobuf psutil pyarrow pybind11 py-cpuinfo pygments pyparsing pyproject-hooks pyre-extensions
pytest pytest-benchmark pytest-cov pytest-mock pytest-timeout pytest-xdist python-dateutil
pytorch-lightning pyyaml regex requests rich sacrebleu safetensors scikit-build-core scikit-image
scikit-learn scipy seaborn sentencepiece sentence-transformers setuptools shellingham simplejson six
sortedcontainers statsmodels sympy tabulate tensorboard tensorboard-data-server tensorstore threadpoolctl
tifffile tiktoken timm tokenizers toolz torch torchaudio torchdiffeq torch-geometric torchmetrics
torchvision tqdm transformers treescope triton typer typing-extensions typing-inspect urllib3 uvloop
wadler-lindig werkzeug wheel wrapt xarray xxhash yarl zipp""".split()
)
TARGET_ENV = {"python_version": "3.12", "python_full_version": "3.12.3", "sys_platform": "linux"}
TARGET_ENV |= {"platform_system": "Linux", "platform_machine": "x86_64", "implementation_name": "cpython"}
TARGET_ENV |= {"platform_python_implementation": "CPython", "os_name": "posix"}


def norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def needed() -> dict[str, str]:
    """{distribution: version installed here} of the core dependencies' closure on the target."""
    import tomllib  # Python 3.11+
    from packaging.requirements import Requirement

    core = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    todo = [(Requirement(r), "") for r in core]
    seen: dict[str, str] = {}
    while todo:
        req, extra = todo.pop()
        if req.marker is not None and not req.marker.evaluate({**TARGET_ENV, "extra": extra}):
            continue
        name = norm(req.name)
        if name in DEVICE_HAS or name in seen:
            continue
        try:
            seen[name] = md.version(req.name)
        except md.PackageNotFoundError:
            sys.exit(f"gpu_wheels: {req.name} (needed on the GPU machine) is not installed here")
        for sub in md.requires(req.name) or []:
            r = Requirement(sub)
            for e in ["", *req.extras]:
                todo.append((r, e))
    return seen


def download(pins: dict[str, str], dest: Path) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", "--python-version"]
    cmd += ["3.12", "--implementation", "cp", "-d", str(dest)]
    for p in PLATFORMS:
        cmd += ["--platform", p]
    subprocess.run(cmd + [f"{n}=={v}" for n, v in sorted(pins.items())], check=True)


def stage_traces(src: Path, dest: Path) -> int:
    """The ETs coverage replays, hta_simple_add and MANIFEST.json; returns bytes copied."""
    import importlib.util

    sys.path.insert(0, str(ROOT / "benchmarks"))  # coverage.py imports harness
    # by path: the name `coverage` may be the coverage package
    spec = importlib.util.spec_from_file_location("_bench_coverage", ROOT / "benchmarks" / "coverage.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    find_ets = mod.find_ets
    files = [*find_ets(src), *(src / "hta_simple_add").glob("*"), src / "MANIFEST.json"]
    shutil.rmtree(dest, ignore_errors=True)
    total = 0
    for f in files:
        if f.is_file():
            out = dest / f.relative_to(src)
            out.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(f, out)
            total += f.stat().st_size
    return total


def tree_bytes() -> int:
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout.split(b"\0")
    return sum((ROOT / f.decode()).stat().st_size for f in files if f and (ROOT / f.decode()).is_file())


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--no-download", action="store_true", help="only print the wheels that would be fetched")
    ap.add_argument("--traces", default=str(ROOT.parent / "shared" / "traces"), help="the shared traces to stage")
    args = ap.parse_args(argv)
    pins = needed()
    print("wheels:", " ".join(f"{n}=={v}" for n, v in sorted(pins.items())))
    if args.no_download:
        return 0
    shutil.rmtree(CARRY / "wheels", ignore_errors=True)
    download(pins, CARRY / "wheels")
    traces = Path(args.traces)
    staged = stage_traces(traces, CARRY / "traces") if traces.is_dir() else 0
    rev = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    (CARRY / "source.txt").write_text(f"{rev}{' (uncommitted changes)' if dirty else ''}\n")
    wheels = sum(f.stat().st_size for f in (CARRY / "wheels").glob("*.whl"))
    tree = tree_bytes()
    total = tree + wheels + staged
    print(f"tree {tree / 2**20:.1f} MiB + wheels {wheels / 2**20:.1f} MiB + traces {staged / 2**20:.1f} MiB")
    print(f"= {total / 2**20:.1f} MiB of {LIMIT_BYTES / 2**20:.0f} MiB")
    return 0 if total < LIMIT_BYTES else 1


if __name__ == "__main__":
    sys.exit(main())
