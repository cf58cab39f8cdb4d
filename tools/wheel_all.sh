#!/usr/bin/env bash
# Builds the op library for each TensorFlow minor version, then the one release wheel.
#
#   tools/wheel_all.sh [MINOR ...]    (default: every version in build_deps/tf_versions.txt)
#
# For each version: a build virtualenv with that TensorFlow (.venvs/build-tf<minor>,
# `tensorflow-cpu`, whose headers and libtensorflow_framework.so.2 are those of the GPU
# wheel), ./configure.sh --bazelrc build/bazelrc/tf<minor>.bazelrc, and `bazel build
# //:wheel` with that configuration only, kept as build/wheels/tf<minor>.whl. Then
# tools/build_wheel.py --merge writes the release wheel,
# dist/tf_opt_ops-<version>-py3-none-<platform>.whl, with every version's library. Bazel
# keeps one output tree: the CUDA objects, which do not depend on TensorFlow, are
# compiled once. The version the repository's .venv holds (`make build`'s) is built with
# that .venv and first: its configuration is .bazelrc's, so Bazel finds `make build`'s
# outputs current and compiles nothing again.
set -euo pipefail
cd "$(dirname "$0")/.."
root="$(pwd)"
python="${PYTHON:-python3}"
versions_file=build_deps/tf_versions.txt

all_versions() { awk '!/^#/ && NF {print $1}' "$versions_file"; }
tf_pin() { awk -v m="$1" '$1 == m {print $2}' "$versions_file"; }

versions=("$@")
[[ ${#versions[@]} -gt 0 ]] || mapfile -t versions < <(all_versions)

# The .venv's TensorFlow release, when it is one of the pins (read from its metadata: no import).
host_pin=""
if [[ -x .venv/bin/python ]]; then
  host_pin="$(.venv/bin/python -c 'import importlib.metadata as m; print(m.version("tensorflow"))' \
    2>/dev/null || true)"
fi
host_first=() others=()
for minor in "${versions[@]}"; do
  if [[ -n "$host_pin" && "$(tf_pin "$minor")" == "$host_pin" ]]; then host_first+=("$minor");
  else others+=("$minor"); fi
done
versions=("${host_first[@]}" "${others[@]}")

rm -rf build/wheels
mkdir -p build/wheels dist
for minor in "${versions[@]}"; do
  pin="$(tf_pin "$minor")"
  [[ -n "$pin" ]] || { echo "wheel_all: TensorFlow $minor is not in $versions_file" >&2; exit 2; }
  venv=".venvs/build-tf$minor"
  if [[ "$pin" == "$host_pin" ]]; then
    venv=.venv
  elif [[ ! -f "$venv/.installed-$pin" ]]; then
    echo "wheel_all: TensorFlow $pin build environment ($venv)"
    rm -rf "$venv"
    "$python" -m venv "$venv"
    "$venv/bin/python" -m pip install -q "tensorflow-cpu==$pin"
    touch "$venv/.installed-$pin"
  fi
  rc="build/bazelrc/tf$minor.bazelrc"
  PYTHON_BIN_PATH="$root/$venv/bin/python" ./configure.sh --bazelrc "$rc"
  start=$SECONDS
  bazel --noworkspace_rc --bazelrc="$rc" build //:wheel
  # Loads wherever this TensorFlow loads: no newer glibc/libstdc++ symbol versions.
  framework=("$venv"/lib/python3*/site-packages/tensorflow/libtensorflow_framework.so.2)
  for library in _tf_opt_ops.so _tf_opt_ops_xla.so; do
    "$python" tools/symbol_versions.py "bazel-bin/tf_opt_ops/$library" "${framework[0]}"
  done
  cp -f bazel-bin/tf_opt_ops-*.whl "build/wheels/tf$minor.whl"
  echo "wheel_all: TensorFlow $minor built in $((SECONDS - start)) s"
done

version="$(sed -n 's/^VERSION = "\(.*\)"$/\1/p' version.bzl)"
platform="$(sed -n 's/^WHEEL_PLATFORM = "\(.*\)"$/\1/p' BUILD)"
wheel="dist/tf_opt_ops-$version-py3-none-$platform.whl"
rm -f dist/tf_opt_ops-*.whl
"$python" tools/build_wheel.py --out "$wheel" --version "$version" --platform "$platform" \
  --merge build/wheels/*.whl
echo "wheel_all: $wheel ($(du -h "$wheel" | cut -f1), TensorFlow ${versions[*]})"
