# strom: the two commands a newcomer runs are `make demo` and `make test`.
SHELL := /bin/bash
PY ?= python3
VENV := .venv
VPY := $(VENV)/bin/python
STAMP_TEST := $(VENV)/.stamp-test
STAMP_DEMO := $(VENV)/.stamp-demo
PYTEST_ARGS ?=

.PHONY: demo test test-cluster test-py313 lint codegen codegen-check bench clean venv cc kcat java zookeeper chromium system-deps

$(VPY):
	$(PY) -m venv $(VENV)
	$(VPY) -m pip install -q --upgrade pip

# (setup.py and the C source: `pip install -e .` builds the optional C accelerator in place)
$(STAMP_TEST): pyproject.toml setup.py strom/record/_fastdecode.c strom/record/_fastencode.c | $(VPY)
	@$(MAKE) --no-print-directory system-deps SYSTEM_DEPS=cc
	$(VPY) -m pip install -q -e '.[test,fast,spark]'
	touch $@

$(STAMP_DEMO): pyproject.toml setup.py strom/record/_fastdecode.c strom/record/_fastencode.c | $(VPY)
	$(VPY) -m pip install -q -e '.[spark,fast]'
	touch $@

venv: $(STAMP_TEST)

# Debian packages the tests use, installed with apt-get when missing (apt-get update first, once): a C compiler
# (the optional decode accelerator, whose tests must run), kcat (interop tests), Chromium + ChromeDriver (the web console's browser tests), a Java runtime and ZooKeeper 3.8 (cluster mode: its jars land in /usr/share/java, where
# `strom zookeeper-server-start` finds them).
SYSTEM_DEPS ?= cc kcat java zookeeper chromium
system-deps:
	@missing=""; \
	for want in $(SYSTEM_DEPS); do case $$want in \
	  cc) command -v cc >/dev/null 2>&1 || missing="$$missing gcc libc6-dev";; \
	  kcat) command -v kcat >/dev/null 2>&1 || missing="$$missing kcat";; \
	  java) command -v java >/dev/null 2>&1 || missing="$$missing default-jre-headless";; \
	  zookeeper) test -f /usr/share/java/zookeeper.jar || missing="$$missing zookeeper";; \
	  chromium) command -v chromium >/dev/null 2>&1 || missing="$$missing chromium"; \
	            command -v chromedriver >/dev/null 2>&1 || missing="$$missing chromium-driver";; \
	esac; done; \
	if [ -n "$$missing" ]; then \
	  command -v apt-get >/dev/null 2>&1 || { echo "error: missing Debian packages:$$missing (apt-get not available)"; exit 1; }; \
	  echo "installing Debian packages:$$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null \
	    || { echo "error: could not install:$$missing (apt-get install$$missing)"; exit 1; }; \
	fi

cc kcat java zookeeper chromium: system-deps


# Two pytest-xdist workers, one test file at a time each (module fixtures stay in one process): most tests wait
# on brokers, ZooKeeper and JVMs rather than compute, so two run in about two thirds of the time on 2 cores.
# PYTEST_WORKERS=0 runs everything in one process. The 25 slowest tests are listed at the end (the suite's budget
# is 15 minutes on a 2-core CI machine).
PYTEST_WORKERS ?= 2
# Byte-compile strom first: with PYTHONDONTWRITEBYTECODE set (as on some CI machines) Python never writes the
# .pyc files it would read, and every broker and CLI subprocess the tests start compiles strom from source
# again (0.3 s of a broker's 0.7 s start). Only changed files are compiled.
COMPILE = -m compileall -q -j 0 strom
test: $(STAMP_TEST) system-deps
	$(VPY) $(COMPILE)
	$(VPY) -m pytest -q -n $(PYTEST_WORKERS) --dist loadfile --durations=25 --ignore=tests/cluster_stress $(PYTEST_ARGS)

# Failover under load on a real ZooKeeper + 3-broker cluster (kill -9 rounds, a ZooKeeper restart; then the same
# under a transactional producer); CI runs it after `make test`. STROM_JEPSEN_ROUNDS (default 10) and
# STROM_JEPSEN_SEED vary it.
test-cluster: $(STAMP_TEST) system-deps
	$(VPY) $(COMPILE)
	$(VPY) -m pytest -q -s tests/cluster_stress $(PYTEST_ARGS)

# The unit tests again on the newest Python strom supports (pyproject: >=3.11), in a venv of its own, with the C
# accelerators built for it (an install where they do not compile would fall back to Python without a word); CI
# runs it after the cluster stress target. PY313=/path/to/python3.13 if it is neither on PATH nor in pyenv.
PY313 ?= $(firstword $(wildcard $(HOME)/.pyenv/versions/3.13*/bin/python3.13) $(shell command -v python3.13 2>/dev/null))
VENV313 := .venv-3.13
STAMP_313 := $(VENV313)/.stamp-test
$(STAMP_313): pyproject.toml setup.py strom/record/_fastdecode.c strom/record/_fastencode.c
	@test -n "$(PY313)" || { echo "error: Python 3.13 not found (pyenv install 3.13, or make test-py313 PY313=...)"; exit 1; }
	@$(MAKE) --no-print-directory system-deps SYSTEM_DEPS=cc
	test -x $(VENV313)/bin/python || $(PY313) -m venv $(VENV313)
	$(VENV313)/bin/python -m pip install -q -e '.[test,arrow]'
	touch $@

test-py313: $(STAMP_313)
	$(VENV313)/bin/python $(COMPILE)
	$(VENV313)/bin/python -m pytest -q -n $(PYTEST_WORKERS) --dist loadfile tests/unit $(PYTEST_ARGS)

lint: $(STAMP_TEST)
	$(VENV)/bin/ruff check strom tests tools bench

codegen: $(STAMP_TEST)
	$(VPY) -m tools.codegen

codegen-check: $(STAMP_TEST)
	$(VPY) -m tools.codegen --check

demo: $(STAMP_DEMO)
	@$(MAKE) --no-print-directory system-deps SYSTEM_DEPS=java
	$(VPY) $(COMPILE)
	$(VPY) -m strom.demo

bench: $(STAMP_TEST)
	$(VPY) -m pip install -q -e '.[bench]'
	$(VPY) bench/broker.py

clean:
	rm -rf $(VENV) $(VENV313) .pytest_cache .ruff_cache .hypothesis build *.egg-info
