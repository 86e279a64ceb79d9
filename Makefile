# Two commands do all set-up on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint typecheck unit system-deps diagrams docs clean bench report-screenshot

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/statemachine-agent demo

lint: $(STAMP)
	$(BIN)/ruff check statemachine_agent pytest_statemachine_agent tests examples benchmarks scripts
	$(BIN)/ruff format --check statemachine_agent pytest_statemachine_agent tests examples benchmarks scripts

typecheck: $(STAMP)
	$(BIN)/mypy
	$(BIN)/mypy --strict examples
	$(BIN)/mypy --strict scripts/docgen.py

# Programs the tests drive for real (Graphviz, to compare graphviz-pure with; Chromium; PostgreSQL),
# installed with apt-get when missing (needs root; see scripts/system-deps.sh).
system-deps:
	bash scripts/system-deps.sh

unit: $(STAMP) system-deps
	$(BIN)/pytest -q --transition-coverage-fail-under=100

test: lint typecheck unit

# Regenerate everything derived from the transition table: diagrams/machine{,-full}.{mmd,dot,svg}
# and the package's copy of the review SVG (rendered by graphviz-pure), docs/states.md and the
# README's generated blocks.
diagrams: $(STAMP)
	$(BIN)/python scripts/docgen.py diagrams docs

# Regenerate only the generated docs: docs/states.md and the README's generated blocks.
docs: $(STAMP)
	$(BIN)/python scripts/docgen.py docs

# report.png: the HTML report of the offline stall demo, as headless Chromium draws it.
REPORT_DEMO := build/report-demo
CHROMIUM_FLAGS := --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
	--disable-background-networking --disable-component-update --disable-sync --hide-scrollbars
report-screenshot: $(STAMP) system-deps
	rm -rf $(REPORT_DEMO)
	$(BIN)/statemachine-agent demo --scenario stall --audit-dir $(REPORT_DEMO) >/dev/null
	$(BIN)/statemachine-agent report $(REPORT_DEMO)/run_*.jsonl -o $(REPORT_DEMO)/report.html
	profile=$$(mktemp -d) && \
	chromium $(CHROMIUM_FLAGS) --user-data-dir=$$profile --window-size=1280,3000 \
		--screenshot=$(CURDIR)/report.png file://$(CURDIR)/$(REPORT_DEMO)/report.html \
		>$(REPORT_DEMO)/chromium.log 2>&1; \
	status=$$?; rm -rf $$profile; \
	if [ $$status -ne 0 ]; then cat $(REPORT_DEMO)/chromium.log >&2; exit $$status; fi
	@echo "report.png: the report of $(REPORT_DEMO)/report.html"

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache .hypothesis

# Benchmarks (never part of `make test`): the peers (LangGraph, pydantic-ai, ...) go into their
# own venv, benchmarks/.venv, with the project; results in benchmarks/results/ and
# docs/performance.md (tables, docs/img/ plots). See docs/performance.md.
bench: system-deps
	@if [ ! -f benchmarks/.venv/.installed ] || [ benchmarks/requirements.txt -nt benchmarks/.venv/.installed ] \
	    || [ pyproject.toml -nt benchmarks/.venv/.installed ]; then \
	  $(PYTHON) -m venv benchmarks/.venv && \
	  benchmarks/.venv/bin/python -m pip install --quiet --upgrade pip && \
	  benchmarks/.venv/bin/python -m pip install --quiet -e . -r benchmarks/requirements.txt && \
	  touch benchmarks/.venv/.installed; \
	fi
	benchmarks/.venv/bin/python -m benchmarks.real_sdk
	benchmarks/.venv/bin/python -m benchmarks.overhead
	benchmarks/.venv/bin/python -m benchmarks.concurrency
	benchmarks/.venv/bin/python -m benchmarks.parallel_tools
	benchmarks/.venv/bin/python -m benchmarks.checkpoint_growth
	benchmarks/.venv/bin/python benchmarks/bench_scaleout.py
	benchmarks/.venv/bin/python -m benchmarks.scale_out
	benchmarks/.venv/bin/python -m benchmarks.profile_overhead
	benchmarks/.venv/bin/python -m benchmarks.report
