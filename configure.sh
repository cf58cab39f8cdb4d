#!/usr/bin/env bash
# Writes .bazelrc for building _tf_opt_ops.so against the installed TensorFlow
# (and the CUDA toolkit, when nvcc is found).
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

# CUDA: on when a CUDA compiler is found, unless TF_NEED_CUDA=0. The toolkit
# is $CUDA_TOOLKIT_PATH, else the one nvcc on PATH (or /usr/local/cuda)
# belongs to; nvcc itself reports its root (TOP in --dryrun), which also sees
# through wrapper scripts such as /usr/local/bin/nvcc.
# TF_CUDA_ARCHS: comma-separated compute capabilities (SASS for each, PTX for
# the last); the default covers Turing through Hopper.
cuda_path=""
cuda_version=""
cuda_archs="${TF_CUDA_ARCHS:-75,80,86,89,90}"
if [[ "${TF_NEED_CUDA:-}" != 0 ]]; then
  nvcc_bin=""
  if [[ -n "${CUDA_TOOLKIT_PATH:-}" ]]; then
    nvcc_bin="$CUDA_TOOLKIT_PATH/bin/nvcc"
  elif command -v nvcc >/dev/null; then
    nvcc_bin="$(command -v nvcc)"
  elif [[ -x /usr/local/cuda/bin/nvcc ]]; then
    nvcc_bin=/usr/local/cuda/bin/nvcc
  fi
  if [[ -n "$nvcc_bin" && -x "$nvcc_bin" ]]; then
    probe_dir="$(mktemp -d)"
    echo '__global__ void k() {}' > "$probe_dir/probe.cu"
    top="$("$nvcc_bin" --dryrun -c "$probe_dir/probe.cu" -o "$probe_dir/probe.o" 2>&1 \
           | sed -n 's/^#\$ TOP=//p' | head -n1)"
    rm -rf "$probe_dir"
    cuda_path="$(cd "${top:-$(dirname "$nvcc_bin")/..}" 2>/dev/null && pwd -P)" || cuda_path=""
    cuda_version="$("$nvcc_bin" --version | sed -n 's/.*release \([0-9.]*\),.*/\1/p')"
    missing=""
    for f in bin/nvcc lib64/libcudart_static.a include/cuda_runtime.h include/cccl/cub/cub.cuh; do
      [[ -e "$cuda_path/$f" ]] || missing="$missing $f"
    done
    if [[ -z "$cuda_path" || -n "$missing" ]]; then
      echo "configure.sh: nvcc at $nvcc_bin, but the toolkit at '${cuda_path}' lacks:${missing}." >&2
      cuda_path=""
    fi
  fi
  if [[ -n "${CUDA_TOOLKIT_PATH:-}" && ! -x "$nvcc_bin" ]]; then
    echo "configure.sh: CUDA_TOOLKIT_PATH=$CUDA_TOOLKIT_PATH has no bin/nvcc." >&2
  fi
  if [[ -z "$cuda_path" && "${TF_NEED_CUDA:-}" == 1 ]]; then
    echo "configure.sh: TF_NEED_CUDA=1 but no usable CUDA toolkit (set CUDA_TOOLKIT_PATH)." >&2
    exit 1
  fi
fi

{
  echo "# Written by configure.sh for TensorFlow $tf_version ($python). Do not edit; re-run ./configure.sh."
  echo "build --repo_env=TF_HEADER_DIR=$tf_include"
  echo "build --repo_env=TF_SHARED_LIBRARY_DIR=$tf_lib_dir"
  echo "build --repo_env=TF_SHARED_LIBRARY_NAME=$tf_lib_name"
  echo "build --repo_env=TF_VERSION=$tf_version"
  echo "build --repo_env=TF_CXX11_ABI_FLAG=$tf_abi"
  echo "build --action_env=PYTHON_BIN_PATH=$python"
  # Debian's Bazel 4.2.3 builds offline once these point at local directories.
  echo "build --override_repository=rules_cc=$root/third_party/rules_cc"
  echo "build --override_repository=rules_java=$root/third_party/rules_java"
  echo "build --override_repository=platforms=$platforms_dir"
  for f in $tf_copts; do
    case "$f" in
      --std=*|-std=*) echo "build --cxxopt=-std=${f#*=}" ;;
      *) echo "build --copt=$f" ;;
    esac
  done
  if [[ -n "$cuda_path" ]]; then
    echo "build --repo_env=TF_NEED_CUDA=1"
    echo "build --repo_env=CUDA_TOOLKIT_PATH=$cuda_path"
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
  echo "configure.sh: wrote ${bazelrc#$root/} for TensorFlow $tf_version, CUDA $cuda_version at $cuda_path (archs $cuda_archs)"
else
  echo "configure.sh: wrote ${bazelrc#$root/} for TensorFlow $tf_version, CPU only (no CUDA compiler found or TF_NEED_CUDA=0)"
fi
