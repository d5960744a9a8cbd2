# Tessera. Every target sets up what it needs: a .venv with the project installed (first use).
# Each target is one command over the venv's Python; the logic lives in the packages.

PYTHON      ?= python3
VENV        := .venv
PY          := $(VENV)/bin/python
STAMP       := $(VENV)/.installed
PRESET      ?= default
PYTEST_ARGS ?=

.PHONY: all sim verilog test test-fast test-full bench fpga lint clean distclean tools

all: test

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

# Optional system tools (Icarus Verilog, ccache, liblz4-dev for FST waves): apt-get where we may,
# otherwise the tests that need them skip and name the missing tool.
tools:
	@$(PY) -m tb.tools install || true

sim: $(STAMP)
	$(PY) -m tb.demo --preset $(PRESET)

verilog: $(STAMP)
	$(PY) -m hw --preset $(PRESET) --out build

test: $(STAMP) tools
	$(PY) -m tb.coverage --reset
	$(PY) -m pytest -n 2 $(PYTEST_ARGS)
	$(PY) -m tb.coverage --json build/coverage.json || echo "(some coverage bins missed: listed above)"

test-fast: $(STAMP)
	$(PY) -m pytest -n 2 -m "not rtl" $(PYTEST_ARGS)

test-full: $(STAMP) tools
	$(PY) -m tb.coverage --reset
	$(PY) -m pytest -n 2 -m "slow or not slow" $(PYTEST_ARGS)
	$(PY) -m tb.coverage --json build/coverage.json

bench: $(STAMP)
	$(PY) -m pip install --quiet -e '.[bench]'
	$(PY) -m bench.simspeed
	$(PY) bench/plan_speed.py
	$(PY) -m bench
	$(PY) -m bench.fusion

fpga: $(STAMP)
	$(PY) -m pip install --quiet -e '.[fpga]'
	$(PY) -m bench.fpga

clean:
	rm -rf build sim_build .pytest_cache .hypothesis
	@# bench/results: what the benches wrote goes; the results the docs cite are committed and stay
	if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then git clean -qfdX bench/results; \
	else rm -rf bench/results; fi
	find . -name __pycache__ -not -path './$(VENV)/*' -prune -exec rm -rf {} +

distclean: clean
	rm -rf $(VENV)
