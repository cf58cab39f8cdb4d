#!/usr/bin/env bash
# Assembles a CUDA 12 toolkit directory for clang's CUDA compiler from PyPI
# wheels (build_deps/cuda/toolkit_requirements.txt, hash-pinned):
#
#   DEST/bin/ptxas, DEST/bin/fatbinary (build_deps/cuda/fatbinary.c over libnvfatbin)
#   DEST/include/           runtime, crt, CUB/libcu++ and nvFatbin headers
#   DEST/nvvm/libdevice/libdevice.10.bc
#   DEST/lib64/libcudart.so.12, libnvfatbin.so.12
#
# which is what `clang --cuda-path=DEST` reads. PyPI has no nvcc, cicc or
# fatbinary for CUDA 12, hence clang (as TensorFlow's own wheels are built).
#
# Usage: toolchain.sh PYTHON [DEST]   (PYTHON: one with pip; DEST default
# .toolchains/cuda-12.2). Idempotent: a DEST stamped with the hash of its
# inputs is left alone without touching the network; the wheels are kept in
# .toolchains/wheels, so a re-assembly needs no network either.
# Why: see docs/design.md, "GPU boundary".
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
python="${1:?usage: toolchain.sh PYTHON [DEST]}"
dest="${2:-$root/.toolchains/cuda-12.2}"
wheels="$root/.toolchains/wheels"
requirements="$here/toolkit_requirements.txt"

stamp="$(cat "$requirements" "$here/fatbinary.c" "$0" | sha256sum | cut -c1-16)"
if [[ -f "$dest/.stamp" && "$(cat "$dest/.stamp")" == "$stamp" ]]; then
  exit 0
fi

echo "toolchain.sh: assembling the CUDA 12 toolkit in $dest (PyPI wheels, $requirements)"
mkdir -p "$wheels"
pip_download=("$python" -m pip download --quiet --disable-pip-version-check --no-deps
  --only-binary=:all: --require-hashes -r "$requirements" -d "$wheels")
# The kept wheels first (offline); PyPI for what is missing.
if ! "${pip_download[@]}" --no-index --find-links "$wheels" >/dev/null 2>&1; then
  "${pip_download[@]}"
fi

tmp="$dest.tmp.$$"
trap 'rm -rf "$tmp"' EXIT
rm -rf "$tmp"
mkdir -p "$tmp/site" "$tmp/bin" "$tmp/include" "$tmp/lib64" "$tmp/nvvm/libdevice"
# Each pinned wheel, by the name pip gives its file (name-version-...).
while read -r pin; do
  name="${pin%%==*}"
  version="${pin#*==}"
  wheel="$(ls "$wheels/${name//-/_}-$version-"*.whl)"
  "$python" -m zipfile -e "$wheel" "$tmp/site"
done < <(sed -n 's/^\([a-z0-9-]*==[^ ]*\) .*/\1/p' "$requirements")

site="$tmp/site/nvidia"
install -m 755 "$site/cuda_nvcc/bin/ptxas" "$tmp/bin/ptxas"
install -m 644 "$site/cuda_nvcc/nvvm/libdevice/libdevice.10.bc" "$tmp/nvvm/libdevice/"
for d in cuda_runtime/include cuda_nvcc/include cuda_cccl/include nvfatbin/include; do
  cp -R "$site/$d/." "$tmp/include/"
done
find "$tmp/include" -name __init__.py -delete
# clang's CUDA wrapper header includes it for curand's device API, which
# nothing here uses.
echo "// Empty: clang's __clang_cuda_runtime_wrapper.h includes it; no curand here." \
  >"$tmp/include/curand_mtgp32_kernel.h"
install -m 755 "$site/cuda_runtime/lib/libcudart.so.12" "$site/nvfatbin/lib/libnvfatbin.so.12" \
  "$tmp/lib64/"
rm -rf "$tmp/site"

"${CC:-cc}" -std=c99 -O2 -I"$tmp/include" "$here/fatbinary.c" -o "$tmp/bin/fatbinary" \
  -L"$tmp/lib64" -l:libnvfatbin.so.12 -Wl,-rpath,'$ORIGIN/../lib64'
# It runs (finds libnvfatbin) and refuses an empty command line.
if [[ "$("$tmp/bin/fatbinary" 2>&1)" != "fatbinary: no --create OUTPUT" ]]; then
  echo "toolchain.sh: $tmp/bin/fatbinary does not run:" >&2
  "$tmp/bin/fatbinary" >&2 || true
  exit 1
fi
grep -q '^#define CUDA_VERSION 12020$' "$tmp/include/cuda.h" ||
  { echo "toolchain.sh: $tmp/include/cuda.h is not CUDA 12.2" >&2; exit 1; }

echo "$stamp" >"$tmp/.stamp"
rm -rf "$dest"
mv "$tmp" "$dest"
trap - EXIT
echo "toolchain.sh: CUDA 12.2 toolkit ready in $dest"
