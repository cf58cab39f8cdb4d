# Everything a fresh Debian machine needs, from scratch: `make test` and
# `make wheel` install Bazel (apt) and the .venv (pip) when missing, configure,
# build, then run. Nothing downloads at build time.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
# Quoted: the clone's path may hold spaces (a make word list would split it).
PY := "$(CURDIR)/$(VENV)/bin/python"
PKG := python/tf_opt_ops
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
BAZEL_TARGETS := //tf_opt_ops:_tf_opt_ops.so //tf_opt_ops:build_info //tf_opt_ops:_tf_opt_ops_xla.so

.PHONY: deps bazel venv configure build wheel wheel-all matrix peer-tests fbgemm-tests test \
	test-fast bench \
	demo clean gpu-check-build gpu-check format lint clang-format cuda-toolchain

# The CUDA toolchain ("CUDA toolchain" below) on x86_64, the platform of the wheels it is
# made of; configure.sh runs once it is there.
CUDA_TOOLKIT_DIR := .toolchains/cuda-12.2
CUDA_TOOLKIT_STAMP := $(CUDA_TOOLKIT_DIR)/.stamp
CUDA_DEPS := $(if $(filter x86_64,$(shell uname -m)),$(CUDA_TOOLKIT_STAMP))

deps: bazel venv $(CUDA_DEPS)

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

.bazelrc: configure.sh $(VENV)/.installed $(CUDA_DEPS)
	./configure.sh

configure: deps
	./configure.sh

# Builds the op library for the .venv's TensorFlow and stages it in the source
# package (python/tf_opt_ops/libs/tf<minor>/), so tests (and `PYTHONPATH=python`)
# use it in place.
build: deps .bazelrc
	bazel build $(BAZEL_TARGETS)
	$(PY) tools/stage_library.py --out $(PKG)/libs \
	  bazel-bin/tf_opt_ops/_tf_opt_ops.so bazel-bin/tf_opt_ops/_build_info.py \
	  bazel-bin/tf_opt_ops/_tf_opt_ops_xla.so

wheel: build
	bazel build //:wheel
	mkdir -p dist
	install -m 644 bazel-bin/tf_opt_ops-*.whl dist/
	@ls dist/*.whl

test: wheel
	$(PY) -m pytest tests -q -ra

# The tests that take seconds (no `slow` or `cluster` marker; tests/conftest.py), on the
# built tree: no wheel build. TESTS= names a subset (folders or files).
TESTS ?= tests
test-fast: build
	$(PY) -m pytest $(TESTS) -q -ra -m "not slow and not cluster"

# ------------------------------------------------------ TensorFlow versions
# build_deps/tf_versions.txt lists the supported TensorFlow versions. `make
# wheel-all` builds the library for each (a build venv per version under .venvs/)
# and writes the release wheel, holding all of them, to dist/; TF_VERSIONS="2.15
# 2.21" builds a subset. `make matrix` installs dist/'s wheel into a fresh venv
# per (Python, version) and runs tests/matrix/ there (tools/matrix.sh; results in
# build/matrix/): the host's Python with every version, each other Python of
# MATRIX_PYTHONS (default: the host's, 3.9 and 3.13) with the oldest and newest
# version that has wheels for it, inside a Debian chroot made once under .venvs/
# (tools/python_chroot.sh; needs root or sudo).
TF_VERSIONS ?= $(shell awk '!/^\#/ && NF {print $$1}' build_deps/tf_versions.txt)
MATRIX_PYTHONS ?=

wheel-all: deps
	tools/wheel_all.sh $(TF_VERSIONS)

matrix:
	MATRIX_PYTHONS="$(MATRIX_PYTHONS)" tools/matrix.sh $(TF_VERSIONS)

# The real peers (TF Addons 0.23.0, Merlin Models 23.12.0) on TensorFlow 2.21: their own test
# files against our classes, and our routers inside Merlin's models (tests/peers/). The peers
# do not import under TF 2.21 by themselves: $TF_OPT_OPS_PEERS_DIR (default /work/shared/peers)
# holds install.sh and peer_shim.py for that. tools/peer_tests.sh makes .venvs/peers once
# (requirements-dev.txt, then install.sh) and runs the suite there on the built source tree.
# FBGEMM's own CPU optimizers judge our references too (fbgemm-tests).
peer-tests: build fbgemm-tests
	tools/peer_tests.sh

# FBGEMM's CPU table-batched embedding (PyTorch's CPU build, fbgemm-gpu-cpu) against our NumPy
# references (tests/fbgemm/): no TensorFlow, no build. tools/fbgemm_venv.sh makes .venvs/fbgemm
# once (tests/fbgemm/requirements.txt).
fbgemm-tests:
	"$$(tools/fbgemm_venv.sh)" -m pytest tests/fbgemm -q -ra -s -p no:cacheprovider

# Formatting is the tools' (.style.yapf, .clang-format); `make lint` checks it
# and runs ruff (ruff.toml). CI runs `make lint`.
PY_SRC_DIRS := python benchmarks demo tests gpu_check tools
CXX_SRCS = $(wildcard tf_opt_ops/*/*.h tf_opt_ops/*/*.cc gpu_check/*.cc serving/*.c benchmarks/*.cc)

clang-format:
	@command -v clang-format >/dev/null || { $(SUDO) apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq clang-format >/dev/null; }

format: venv clang-format
	$(PY) -m yapf -i -r $(PY_SRC_DIRS)
	clang-format -i $(CXX_SRCS)

lint: venv clang-format
	$(PY) -m yapf --diff -r $(PY_SRC_DIRS)
	$(PY) -m ruff check .
	clang-format --dry-run --Werror $(CXX_SRCS)

# The main job: trains a recommender with the router against Keras Adam
# (ARGS="--flavor tf_keras", "--data ratings.csv", ...); writes demo_out/.
demo: build
	PYTHONPATH=python $(PY) -m demo.recommender $(ARGS)

# `make bench QUICK=1` runs a few cases in under 3 minutes; results go to bench/results/.
# The ops alone (benchmarks.bench), then a whole DLRM train step (benchmarks.bench_e2e;
# E2E_ARGS="--memory-gib 48" runs the cases that need more memory).
bench: build
	PYTHONPATH=python $(PY) -m benchmarks.bench $(if $(QUICK),--quick)
	PYTHONPATH=python $(PY) -m benchmarks.bench_e2e $(if $(QUICK),--quick) $(E2E_ARGS)

# ---------------------------------------------------------------- CUDA toolchain
# The CUDA kernels are compiled by Debian's clang-19 against a CUDA 12.2 toolkit
# assembled from hash-pinned PyPI wheels (ptxas, libdevice, headers, libcudart,
# libnvfatbin) into .toolchains/ by build_deps/cuda/toolchain.sh: TensorFlow runs
# on CUDA 12 drivers, and PyPI has no CUDA 12 nvcc (docs/design.md, "GPU
# boundary"). configure.sh finds both. Idempotent, and offline once assembled.
CUDA_CLANG ?= clang-19
install_clang = command -v $(CUDA_CLANG) >/dev/null || { echo "Installing Debian's clang-19"; \
	  $(SUDO) apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq clang-19 >/dev/null; }

cuda-toolchain: $(CUDA_TOOLKIT_STAMP)
	@$(install_clang)

$(CUDA_TOOLKIT_STAMP): build_deps/cuda/toolchain.sh build_deps/cuda/toolkit_requirements.txt \
		build_deps/cuda/fatbinary.c | $(VENV)/.installed
	@$(install_clang)
	build_deps/cuda/toolchain.sh $(PY) $(CUDA_TOOLKIT_DIR)
	touch $@

# ---------------------------------------------------------------- GPU check
# The CUDA kernels of the .so (the same .cu.cc files) plus gpu_check/capi.cu.cc
# and the lazy CUDA runtime (tf_opt_ops/platform/cuda_runtime_stub.cc), built with the
# same clang, toolkit and flags into a small library that gpu_check/gpu_check.py
# drives from NumPy through ctypes: no TensorFlow, no Bazel. The toolkit's
# libcudart.so.12 is copied beside it (GPU machines may have no network), and
# gpu_check.py loads that copy first. `make gpu-check-build` compiles it
# anywhere the toolchain is (CI, no GPU needed); `make gpu-check` also runs the
# checks and the benchmark. Without a GPU it prints "NO GPU" and exits 0
# (GPU_CHECK_FLAGS=--require-gpu makes that exit 3); a failed check exits 1.
#   make gpu-check GPU_CHECK_ARCHS=90 GPU_CHECK_FLAGS="--bench quick --json out.json"
# The clang flags and GPU architectures are the Bazel build's, read from where
# it keeps them: the flags from tf_opt_ops/cuda_copts.bzl, the architectures
# from the configured .bazelrc (TF_CUDA_ARCHS), else configure.sh's default.
CUDA_COPTS_FILE := tf_opt_ops/cuda_copts.bzl
configured_archs := $(shell sed -n 's/^build --repo_env=TF_CUDA_ARCHS=//p' .bazelrc 2>/dev/null)
default_archs := $(shell sed -n 's/^cuda_archs="$${TF_CUDA_ARCHS:-\([0-9,]*\)}"$$/\1/p' configure.sh)
GPU_CHECK_ARCHS ?= $(or $(configured_archs),$(default_archs))
GPU_CHECK_FLAGS ?=
GPU_PY ?= $(shell [ -x $(VENV)/bin/python ] && echo $(VENV)/bin/python || echo python3)
GPU_CHECK_DIR := gpu_check/build
GPU_CHECK_LIB := $(GPU_CHECK_DIR)/libtfo_gpu_check.so
GPU_CHECK_SRCS := sparse_rows.cu.cc lazy_adam_kernels.cu.cc clippy_adagrad_kernels.cu.cc \
	rowwise_adagrad_kernels.cu.cc moving_average_kernels.cu.cc capi.cu.cc
GPU_CHECK_HDRS := tf_opt_ops/core/gpu_launchers.h tf_opt_ops/core/gpu_kernel_util.cu.h \
	tf_opt_ops/core/optimizer_math.h $(CUDA_COPTS_FILE)
comma := ,
gpu_archs = $(subst $(comma), ,$(GPU_CHECK_ARCHS))
# SASS for each architecture, PTX for the last (as build_deps/cuda/cuda.bzl).
GPU_ARCH_FLAGS = $(foreach a,$(gpu_archs),--cuda-gpu-arch=sm_$(a)) \
	$(foreach a,$(filter-out $(lastword $(gpu_archs)),$(gpu_archs)),--no-cuda-include-ptx=sm_$(a))
GPU_CUDA_FLAGS := --cuda-path=$(CUDA_TOOLKIT_DIR) \
	$(shell sed -n 's/^ *"\(-[^"]*\)",.*$$/\1/p' $(CUDA_COPTS_FILE)) -I.
vpath %.cu.cc tf_opt_ops/core gpu_check

# Objects go to one folder per architecture list, so that new architectures
# (a reconfigured .bazelrc) rebuild them and relink the library.
GPU_CHECK_OBJ_DIR := $(GPU_CHECK_DIR)/sm_$(subst $(comma),_,$(GPU_CHECK_ARCHS))

$(GPU_CHECK_OBJ_DIR)/%.o: %.cu.cc $(GPU_CHECK_HDRS) | $(GPU_CHECK_OBJ_DIR) cuda-toolchain
	$(if $(gpu_archs),,$(error no GPU architectures: set GPU_CHECK_ARCHS=90 (comma-separated) or fix configure.sh's TF_CUDA_ARCHS default))
	$(CUDA_CLANG) -c -x cuda $(GPU_CUDA_FLAGS) $(GPU_ARCH_FLAGS) -o $@ $<

$(GPU_CHECK_DIR)/cuda_runtime_stub.o: tf_opt_ops/platform/cuda_runtime_stub.cc | $(GPU_CHECK_OBJ_DIR) cuda-toolchain
	$(CUDA_CLANG) -c -x c++ -std=c++17 -O2 -fPIC -fvisibility=hidden \
	  -isystem $(CUDA_TOOLKIT_DIR)/include -o $@ $<

$(GPU_CHECK_DIR)/libcudart.so.12: | $(GPU_CHECK_OBJ_DIR) cuda-toolchain
	install -m 755 $(CUDA_TOOLKIT_DIR)/lib64/libcudart.so.12 $@

$(GPU_CHECK_LIB): $(addprefix $(GPU_CHECK_OBJ_DIR)/,$(GPU_CHECK_SRCS:.cu.cc=.o)) \
		$(GPU_CHECK_DIR)/cuda_runtime_stub.o | $(GPU_CHECK_DIR)/libcudart.so.12
	$(CXX) -shared -o $@ $^ -ldl

$(GPU_CHECK_OBJ_DIR):
	mkdir -p $@

gpu-check-build: $(GPU_CHECK_LIB)

gpu-check: $(GPU_CHECK_LIB)
	$(GPU_PY) gpu_check/gpu_check.py --lib $(GPU_CHECK_LIB) $(GPU_CHECK_FLAGS)

clean:
	-bazel clean
	rm -rf dist build $(PKG)/libs $(GPU_CHECK_DIR)
