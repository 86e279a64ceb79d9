# Two commands do all set-up on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint typecheck unit system-deps diagrams docs clean

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

# Programs the tests drive for real (Graphviz, ...), installed when missing.
system-deps:
	bash scripts/system-deps.sh

unit: $(STAMP) system-deps
	$(BIN)/pytest -q

test: lint typecheck unit

# Regenerate everything derived from the transition table: diagrams/machine.{mmd,dot,svg}
# (SVG only where Graphviz is installed), docs/states.md and the README's generated blocks.
diagrams: $(STAMP)
	$(BIN)/python -m statemachine_agent.docgen diagrams docs

# Regenerate only the generated docs: docs/states.md and the README's generated blocks.
docs: $(STAMP)
	$(BIN)/python -m statemachine_agent.docgen docs

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache .hypothesis
