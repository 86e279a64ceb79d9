# Two commands do all set-up on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint typecheck unit diagrams clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/statemachine-agent demo

lint: $(STAMP)
	$(BIN)/ruff check statemachine_agent tests
	$(BIN)/ruff format --check statemachine_agent tests

typecheck: $(STAMP)
	$(BIN)/mypy

unit: $(STAMP)
	$(BIN)/pytest -q

test: lint typecheck unit

# Regenerate the committed diagrams from the transition table.
diagrams: $(STAMP)
	$(BIN)/statemachine-agent diagram --format mermaid -o diagrams/machine.mmd
	$(BIN)/statemachine-agent diagram --format dot -o diagrams/machine.dot

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache .hypothesis
