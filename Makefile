# Two commands set everything up on a fresh machine: `make run` and `make test`.
# Both are idempotent: the venv and the install are redone only when pyproject.toml changes.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PORT ?= 8501
PYTEST_ARGS ?=

.PHONY: run test quick lint setup browser clean samples bench docs

$(BIN)/python:
	$(PY) -m venv $(VENV)

# The project and its extras install with uv (from PyPI; ~13 s against pip's ~40 s on a fresh
# machine), writing bytecode as pip does (without it every process compiles the libraries it
# imports, since PYTHONDONTWRITEBYTECODE may be set); pip where uv cannot be had or fails. torch itself
# stays with pip, which reads the machine's pip configuration (a local CPU wheel).
EXTRAS := ui,test,gpu,cli,fleet
INSTALL = { { test -x $(BIN)/uv || $(BIN)/pip install -q uv >/dev/null 2>&1; } && $(BIN)/uv pip install -q --python $(BIN)/python --compile-bytecode $(1); } || $(BIN)/pip install -q $(1)
# torch first, so a CPU-only machine never pulls a multi-GB CUDA build through `torch>=2.5`:
# with no GPU, take the CPU wheel on hand (torch==2.13.0 here), else PyTorch's CPU index.
$(STAMP): pyproject.toml | $(BIN)/python
	@if ! $(BIN)/python -c "import torch" 2>/dev/null; then \
	  if command -v nvidia-smi >/dev/null 2>&1; then $(BIN)/pip install -q "torch>=2.5"; \
	  else $(BIN)/pip install -q torch==2.13.0 || \
	       $(BIN)/pip install -q torch --index-url https://download.pytorch.org/whl/cpu; fi; \
	fi
	$(call INSTALL,-e ".[$(EXTRAS)]")
	@# the optional `dlrm` extra (FBGEMM) where its wheel fits: CPU torch 2.13 on linux x86_64
	@if $(BIN)/python -c "import sys, torch; sys.exit(0 if torch.__version__.startswith('2.13') and not torch.cuda.is_available() else 1)" 2>/dev/null; then \
	  $(call INSTALL,-e ".[dlrm]") || echo "note: the dlrm extra (fbgemm-gpu-cpu) did not install; FBGEMM tests skip"; \
	fi
	@touch $(STAMP)

setup: $(STAMP)

# Debian's chromium + chromium-driver for the real-browser test (never a downloaded browser).
browser:
	@if ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    (apt-get install -y -q chromium chromium-driver >/dev/null 2>&1 || \
	     (apt-get update -q >/dev/null 2>&1 && apt-get install -y -q chromium chromium-driver >/dev/null 2>&1)) || \
	    echo "note: could not install chromium; the browser test will skip with a reason"; \
	  else echo "note: chromium missing and not root; the browser test will skip with a reason"; fi; \
	fi

run: setup
	$(BIN)/streamlit run app/main.py --server.address localhost --server.port $(PORT)

# Gates before the tests (config in pyproject.toml): lint, format, types over engine/.
lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	@# the two type checks run side by side (one core each; their caches are per Python version)
	@$(BIN)/mypy & p=$$!; rc=0; \
	$(BIN)/mypy --python-version 3.10 -p engine || rc=1; \
	wait $$p || rc=1; exit $$rc  # the second: the engine's floor (requires-python)

# Two passes: everything but the wall-clock assertions on both cores (pytest-xdist, one file per
# worker so module fixtures are built once, heaviest files first: tests/conftest.py), then the `perf` and `alone` tests by themselves, so that a timing bound or a peak-RSS measurement
# never shares the CPU with another test. Exit 5 (nothing collected, e.g. PYTEST_ARGS picked a
# file without perf tests) is not a failure.
# Every run is a fresh machine's first: a new --basetemp under $TMPDIR (not pytest-of-$USER/pytest-N,
# whose length grows with the machine's history), no .pytest_cache, and tests/conftest.py points
# HOME, the caches and the UI folder at new empty folders. The folder is removed after a pass and
# kept (its path printed) after a failure.
# --durations: every run prints its 30 slowest tests (where the suite's time goes, issue 34 item 8)
XDIST ?= -n 2 --dist loadfile --no-loadscope-reorder
# Bytecode is written even where the machine sets PYTHONDONTWRITEBYTECODE: else every one of the
# suite's ~400 processes compiles the project's modules again, and each pytest collection rewrites
# and compiles all 112 test files (~4 s of a pass's 11 s collection); __pycache__ is ignored by git.
PYTEST := env -u PYTHONDONTWRITEBYTECODE $(BIN)/python -m pytest -q -p no:cacheprovider --durations=30
test: setup browser lint
	@t=$$(mktemp -d "$${TMPDIR:-/tmp}/mystique-test.XXXXXX") && echo "make test: temp folders under $$t" && \
	$(PYTEST) --basetemp="$$t/main" $(XDIST) -m "not perf and not alone" $(PYTEST_ARGS) && \
	{ $(PYTEST) --basetemp="$$t/perf" -m "perf or alone" $(PYTEST_ARGS) || [ $$? -eq 5 ]; } && rm -rf "$$t" || \
	{ echo "make test: failed; its temp folders are kept in $$t"; exit 1; }

# The inner loop while changing code: the tests not marked slow (over tests/conftest.py SLOW_S),
# e2e, perf or alone, on both cores; no gates. It is not the check: `make test` runs everything.
quick: setup
	@t=$$(mktemp -d "$${TMPDIR:-/tmp}/mystique-quick.XXXXXX") && \
	$(PYTEST) --basetemp="$$t" $(XDIST) -m "not slow and not e2e and not perf and not alone" $(PYTEST_ARGS) && rm -rf "$$t"

samples: setup
	$(BIN)/mystique capture --all-samples --out sample_traces
	for m in ddp dlrm_a2a dlrm_tbe; do $(BIN)/mystique capture $$m --world-size 2 --out sample_traces || exit 1; done

# The generated reference (tests/test_docs.py fails when these differ from the code / results):
# run after changing a CLI flag, a result key's contract docstring or benchmarks/results/*.json.
docs: setup
	$(BIN)/python -m engine.cli.docgen > docs/cli.md
	$(BIN)/python benchmarks/report.py > docs/figures.md
	$(BIN)/python benchmarks/report.py --readme

bench: setup
	$(BIN)/python benchmarks/load_speed.py

clean:
	rm -rf $(VENV) .mystique_cache .mystique .mypy_cache .ruff_cache .pytest_cache .hypothesis
