# `make demo` and `make test` work from nothing: they create .venv, install the CPU stack, run.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: install demo test test-gpu lint clean

$(STAMP): requirements-cpu.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements-cpu.txt
	$(PY) -m pip install --quiet --no-deps -e .
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(PY) -m grpo_kit demo

lint: $(STAMP)
	$(VENV)/bin/ruff check .

test: lint
	$(PY) -m pytest -q

# GPU tests (tests/gpu, marker `gpu`): need CUDA and the GPU stack (requirements.txt); skipped elsewhere.
test-gpu: $(STAMP)
	$(PY) -m pytest -q -m gpu tests/gpu

clean:
	rm -rf $(VENV) runs .cache .pytest_cache .ruff_cache
