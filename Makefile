# Everything a fresh Debian machine needs, from scratch: `make test` and
# `make wheel` install Bazel (apt) and the .venv (pip) when missing, configure,
# build, then run. Nothing downloads at build time.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(abspath $(VENV))/bin/python
PKG := python/tf_opt_ops
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
BAZEL_TARGETS := //tf_opt_ops:_tf_opt_ops.so //tf_opt_ops:build_info

.PHONY: deps bazel venv configure build wheel test bench demo clean

deps: bazel venv

bazel:
	@if ! command -v bazel >/dev/null || ! dpkg -s bazel-platforms >/dev/null 2>&1; then \
	  echo "Installing Debian's bazel-bootstrap and bazel-platforms"; \
	  $(SUDO) apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq bazel-bootstrap bazel-platforms >/dev/null; \
	fi

$(VENV)/.installed: requirements-dev.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements-dev.txt
	touch $@

venv: $(VENV)/.installed

.bazelrc: configure.sh $(VENV)/.installed
	./configure.sh

configure: deps
	./configure.sh

# Builds the op library and copies it into the source package, so tests (and
# `PYTHONPATH=python`) use it in place.
build: deps .bazelrc
	bazel build $(BAZEL_TARGETS)
	install -m 644 bazel-bin/tf_opt_ops/_tf_opt_ops.so bazel-bin/tf_opt_ops/_build_info.py $(PKG)/

wheel: build
	bazel build //:wheel
	mkdir -p dist
	install -m 644 bazel-bin/tf_opt_ops-*.whl dist/
	@ls dist/*.whl

test: wheel
	$(PY) -m pytest tests -q -ra

# The main job: trains a recommender with the router against Keras Adam
# (ARGS="--flavor tf_keras", "--data ratings.csv", ...); writes demo_out/.
demo: build
	PYTHONPATH=python $(PY) -m tf_opt_ops.demo $(ARGS)

# `make bench QUICK=1` runs a few cases in under 3 minutes; results go to bench/results/.
bench: build
	PYTHONPATH=python $(PY) -m tf_opt_ops.bench $(if $(QUICK),--quick)

clean:
	-bazel clean
	rm -rf dist $(PKG)/_tf_opt_ops.so $(PKG)/_build_info.py
