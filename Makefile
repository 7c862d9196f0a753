# strom: the two commands a newcomer runs are `make demo` and `make test`.
SHELL := /bin/bash
PY ?= python3
VENV := .venv
VPY := $(VENV)/bin/python
STAMP_TEST := $(VENV)/.stamp-test
STAMP_DEMO := $(VENV)/.stamp-demo
PYTEST_ARGS ?=

.PHONY: demo test lint codegen codegen-check bench clean venv kcat

$(VPY):
	$(PY) -m venv $(VENV)
	$(VPY) -m pip install -q --upgrade pip

$(STAMP_TEST): pyproject.toml | $(VPY)
	$(VPY) -m pip install -q -e '.[test,fast,spark]'
	touch $@

$(STAMP_DEMO): pyproject.toml | $(VPY)
	$(VPY) -m pip install -q -e '.[spark,fast]'
	touch $@

venv: $(STAMP_TEST)

# kcat (Debian package) is used by the interop tests; install it when missing.
kcat:
	@command -v kcat >/dev/null 2>&1 || { \
	  if command -v apt-get >/dev/null 2>&1; then \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq kcat >/dev/null) \
	      || echo "warning: could not install kcat; kcat interop tests will be skipped"; \
	  else echo "warning: apt-get not found; kcat interop tests will be skipped"; fi; }

test: $(STAMP_TEST) kcat
	$(VPY) -m pytest -q $(PYTEST_ARGS)

lint: $(STAMP_TEST)
	$(VENV)/bin/ruff check strom tests tools bench

codegen: $(STAMP_TEST)
	$(VPY) -m tools.codegen

codegen-check: $(STAMP_TEST)
	$(VPY) -m tools.codegen --check

demo: $(STAMP_DEMO)
	$(VPY) -m strom.demo

bench: $(STAMP_TEST)
	$(VPY) -m pip install -q -e '.[bench]'
	$(VPY) bench/broker.py

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis build *.egg-info
