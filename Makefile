# Quick start: `make demo` (set up + run the main job), `make test` (set up + ruff, mypy, pytest).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# Always pin torch here: an unpinned spec pulls a multi-GB CUDA build.
TORCH_PIN := torch==2.13.0
STAMP := $(VENV)/.prenoise-installed
export HF_HUB_OFFLINE := 1

.PHONY: setup demo test lint typecheck pytest clean

setup: $(STAMP)

$(STAMP): pyproject.toml Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check $(TORCH_PIN)
	$(PY) -m pip install -q --disable-pip-version-check -e '.[dev]' $(TORCH_PIN)
	touch $(STAMP)

DEMO_RECIPE := recipes/ref2va-demo.yaml

demo: $(STAMP)
	$(VENV)/bin/prenoise generate --recipe $(DEMO_RECIPE)
	$(VENV)/bin/prenoise verify --recipe $(DEMO_RECIPE) --json outputs/ref2va-demo/verify.json

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests benchmarks
	$(VENV)/bin/ruff format --check src tests benchmarks/*.py

typecheck: $(STAMP)
	$(VENV)/bin/mypy

pytest: $(STAMP)
	$(PY) -m pytest

test: lint typecheck pytest

clean:
	rm -rf $(VENV) build src/*.egg-info .pytest_cache .mypy_cache .ruff_cache
