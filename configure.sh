#!/usr/bin/env bash
# Writes .bazelrc for building _tf_opt_ops.so against the installed TensorFlow
# (and a CUDA 12 toolkit, compiled with clang, when both are found).
#
#   ./configure.sh [--bazelrc FILE]
#
# No prompts, no network. Python: $PYTHON_BIN_PATH, else ./.venv/bin/python,
# else python3. Everything TensorFlow-specific (headers, library, ABI and
# C++ flags, version) comes from tf.sysconfig of that Python, so pointing
# PYTHON_BIN_PATH at a virtualenv of another TensorFlow configures a build for
# that version. --bazelrc writes the configuration to FILE instead of
# .bazelrc, for `bazel --noworkspace_rc --bazelrc=FILE build ...` (`make
# wheel-all` keeps one per TensorFlow version).
set -euo pipefail
cd "$(dirname "$0")"
root="$(pwd)"

bazelrc="$root/.bazelrc"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --bazelrc) bazelrc="$(realpath -m "${2:?--bazelrc needs a file}")"; shift 2 ;;
    *) echo "configure.sh: unknown argument '$1' (usage: ./configure.sh [--bazelrc FILE])" >&2; exit 2 ;;
  esac
done
mkdir -p "$(dirname "$bazelrc")"

python="${PYTHON_BIN_PATH:-}"
if [[ -z "$python" ]]; then
  if [[ -x .venv/bin/python ]]; then python="$root/.venv/bin/python"; else python="$(command -v python3)"; fi
fi

tf_info="$("$python" - <<'PY'
import os
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import tensorflow as tf
cflags = tf.sysconfig.get_compile_flags()
lflags = tf.sysconfig.get_link_flags()
include = next(f[2:] for f in cflags if f.startswith("-I"))
lib_dir = next(f[2:] for f in lflags if f.startswith("-L"))
lib_name = next(f[3:] for f in lflags if f.startswith("-l:"))
copts = [f for f in cflags if not f.startswith("-I")]
print(include); print(lib_dir); print(lib_name); print(tf.__version__)
print(tf.sysconfig.CXX11_ABI_FLAG); print(" ".join(copts))
PY
)" || { echo "configure.sh: cannot import tensorflow with $python; run 'make venv' first." >&2; exit 1; }
{ read -r tf_include; read -r tf_lib_dir; read -r tf_lib_name; read -r tf_version;
  read -r tf_abi; read -r tf_copts; } <<<"$tf_info"

platforms_dir="$(dirname "$(dpkg -L bazel-platforms 2>/dev/null | grep '/platforms/WORKSPACE$' | head -n1)")"
if [[ ! -f "$platforms_dir/WORKSPACE" ]]; then
  echo "configure.sh: Debian's bazel-platforms package is missing (apt-get install bazel-bootstrap bazel-platforms)." >&2
  exit 1
fi

# CUDA: on when clang (the CUDA compiler) and a CUDA 12 toolkit are found,
# unless TF_NEED_CUDA=0. clang: $CUDA_CLANG, else clang-19 on the PATH. The
# toolkit: $CUDA_TOOLKIT_PATH, else the one `make cuda-toolchain` assembles
# from PyPI wheels in .toolchains/cuda-12.2 (build_deps/cuda/toolchain.sh).
# CUDA 12, because TensorFlow 2.15-2.21 are built with CUDA 12 and run on
# CUDA 12 drivers (docs/design.md, "GPU boundary"). nvcc is not used.
# TF_CUDA_ARCHS: comma-separated compute capabilities (SASS for each, PTX for
# the last); the default covers where TensorFlow's own GPU kernels run, Pascal
# through Hopper.
cuda_path=""
cuda_version=""
cuda_clang=""
cuda_clang_version=""
cuda_archs="${TF_CUDA_ARCHS:-60,70,75,80,86,89,90}"
if [[ "${TF_NEED_CUDA:-}" != 0 ]]; then
  cuda_problem=""
  cuda_clang="${CUDA_CLANG:-$(command -v clang-19 || true)}"
  toolkit="${CUDA_TOOLKIT_PATH:-$root/.toolchains/cuda-12.2}"
  if [[ -z "$cuda_clang" || ! -x "$cuda_clang" ]]; then
    cuda_problem="no clang for CUDA (${CUDA_CLANG:-clang-19 not on the PATH})"
  else
    missing=""
    for f in bin/ptxas bin/fatbinary include/cuda.h include/cuda_runtime.h include/cub/cub.cuh \
             nvvm/libdevice/libdevice.10.bc lib64/libcudart.so.12; do
      [[ -e "$toolkit/$f" ]] || missing="$missing $f"
    done
    if [[ -n "$missing" ]]; then
      cuda_problem="no CUDA 12 toolkit at $toolkit (missing:$missing)"
    else
      cuda_path="$(cd "$toolkit" && pwd -P)"
      # cuda.h: #define CUDA_VERSION 12020 -> 12.2
      cuda_number="$(sed -n 's/^#define CUDA_VERSION \([0-9]*\)$/\1/p' "$cuda_path/include/cuda.h")"
      cuda_version="$((${cuda_number:-0} / 1000)).$((${cuda_number:-0} % 1000 / 10))"
      cuda_clang="$(cd "$(dirname "$cuda_clang")" && pwd -P)/$(basename "$cuda_clang")"
      cuda_clang_version="$("$cuda_clang" --version | sed -n '1s/.*clang version \([0-9.]*\).*/\1/p')"
      probe_dir="$(mktemp -d)"
      echo '__global__ void k(float* x) { x[0] = __fsqrt_rn(x[0]); }' > "$probe_dir/probe.cu"
      if [[ ! "$cuda_number" =~ ^12[0-9]{3}$ ]]; then
        cuda_problem="the toolkit at $cuda_path is CUDA $cuda_version (include/cuda.h), not CUDA 12"
      elif ! probe_err="$("$cuda_clang" -c -x cuda --cuda-path="$cuda_path" --cuda-gpu-arch=sm_75 \
             "$probe_dir/probe.cu" -o "$probe_dir/probe.o" 2>&1)"; then
        cuda_problem="$cuda_clang cannot compile CUDA with $cuda_path: $(head -n3 <<<"$probe_err")"
      fi
      rm -rf "$probe_dir"
    fi
  fi
  # The machine's nvcc (CUDA 13 here) builds nothing: its kernels and runtime
  # need a CUDA 13 driver (r580+), where TensorFlow runs on CUDA 12 drivers.
  nvcc_bin="$(command -v nvcc || { [[ -x /usr/local/cuda/bin/nvcc ]] && echo /usr/local/cuda/bin/nvcc; } || true)"
  if [[ -n "$nvcc_bin" ]]; then
    nvcc_version="$("$nvcc_bin" --version 2>/dev/null | sed -n 's/.*release \([0-9.]*\),.*/\1/p')"
    if [[ "${nvcc_version%%.*}" != 12 ]]; then
      echo "configure.sh: not using nvcc at $nvcc_bin (CUDA ${nvcc_version:-?}): TensorFlow runs on CUDA 12" \
           "drivers, so the kernels are compiled by clang for CUDA 12 (see docs/design.md, \"GPU boundary\")." >&2
    fi
  fi
  if [[ -n "$cuda_problem" ]]; then
    cuda_path=""
    if [[ "${TF_NEED_CUDA:-}" == 1 ]]; then
      echo "configure.sh: TF_NEED_CUDA=1 but $cuda_problem." >&2
      echo "  Run 'make cuda-toolchain' (apt: clang-19; PyPI: the CUDA 12.2 toolkit into .toolchains/)," \
           "or set CUDA_CLANG and CUDA_TOOLKIT_PATH." >&2
      exit 1
    fi
    echo "configure.sh: CUDA off: $cuda_problem ('make cuda-toolchain' installs it)." >&2
  fi
fi

# Paths in double quotes: Bazel splits each line as a shell does, and a path may hold spaces.
{
  echo "# Written by configure.sh for TensorFlow $tf_version ($python). Do not edit; re-run ./configure.sh."
  echo "build \"--repo_env=TF_HEADER_DIR=$tf_include\""
  echo "build \"--repo_env=TF_SHARED_LIBRARY_DIR=$tf_lib_dir\""
  echo "build --repo_env=TF_SHARED_LIBRARY_NAME=$tf_lib_name"
  echo "build --repo_env=TF_VERSION=$tf_version"
  echo "build --repo_env=TF_CXX11_ABI_FLAG=$tf_abi"
  echo "build \"--action_env=PYTHON_BIN_PATH=$python\""
  # Debian's Bazel 4.2.3 builds offline once these point at local directories.
  echo "build \"--override_repository=rules_cc=$root/third_party/rules_cc\""
  echo "build \"--override_repository=rules_java=$root/third_party/rules_java\""
  echo "build \"--override_repository=platforms=$platforms_dir\""
  for f in $tf_copts; do
    case "$f" in
      --std=*|-std=*) echo "build --cxxopt=-std=${f#*=}" ;;
      *) echo "build --copt=$f" ;;
    esac
  done
  if [[ -n "$cuda_path" ]]; then
    echo "build --repo_env=TF_NEED_CUDA=1"
    echo "build \"--repo_env=CUDA_TOOLKIT_PATH=$cuda_path\""
    echo "build \"--repo_env=CUDA_CLANG=$cuda_clang\""
    echo "build --repo_env=CUDA_CLANG_VERSION=$cuda_clang_version"
    echo "build --repo_env=TF_CUDA_VERSION=$cuda_version"
    echo "build --repo_env=TF_CUDA_ARCHS=$cuda_archs"
  else
    echo "build --repo_env=TF_NEED_CUDA=0"
  fi
  echo "build -c opt"
  # TF's headers are thousands of files: symlinking them into a sandbox per
  # compile costs more than the compile.
  echo "build --spawn_strategy=standalone"
  echo "build --strategy=Genrule=standalone"
  echo "build --show_result=0"
} > "$bazelrc"

if [[ -n "$cuda_path" ]]; then
  echo "configure.sh: wrote ${bazelrc#$root/} for TensorFlow $tf_version, CUDA $cuda_version at $cuda_path with clang $cuda_clang_version (archs $cuda_archs)"
else
  echo "configure.sh: wrote ${bazelrc#$root/} for TensorFlow $tf_version, CPU only (no clang + CUDA 12 toolkit found, or TF_NEED_CUDA=0)"
fi
