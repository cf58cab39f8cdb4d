#!/usr/bin/env bash
# Loads _tf_opt_ops.so under an older C and C++ runtime than the build machine's:
# Debian 11's glibc 2.31 (before 2.34 moved libpthread/libdl/librt into libc)
# and GCC 10's libstdc++, run through that glibc's own dynamic loader. As
# `import tensorflow` does, libtensorflow_framework.so.2 is loaded first
# (RTLD_GLOBAL); then the library, with every symbol bound at once (-z now).
#
#   tools/load_on_old_glibc.sh [LIBRARY]   (default python/tf_opt_ops/_tf_opt_ops.so)
#
# Downloads nine Debian 11 packages with apt-get into a temporary folder and
# unpacks them there; the system is left as it is. Prints LOADED and exits 0,
# or prints the loader's error and exits 1.
set -euo pipefail
cd "$(dirname "$0")/.."
library="$(realpath "${1:-python/tf_opt_ops/_tf_opt_ops.so}")"
python="${PYTHON_BIN_PATH:-.venv/bin/python}"
tf_dir="$("$python" -c 'import importlib.util; print(importlib.util.find_spec("tensorflow").submodule_search_locations[0])')"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/lists/partial" "$work/cache/archives/partial" "$work/debs" "$work/root"
echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian bullseye main" \
  > "$work/sources.list"
apt_opts=(-o "Dir::Etc::SourceList=$work/sources.list" -o Dir::Etc::SourceParts=/dev/null
          -o "Dir::State::Lists=$work/lists" -o "Dir::Cache=$work/cache" -o APT::Sandbox::User=root)
apt-get "${apt_opts[@]}" update -qq
packages=(libc6 libstdc++6 libgcc-s1 zlib1g libexpat1 libffi7
          python3.9-minimal libpython3.9-minimal libpython3.9-stdlib)
(cd "$work/debs"
 for p in "${packages[@]}"; do
   # The bullseye version: the installed (newer) one is apt's candidate otherwise.
   version="$(apt-cache "${apt_opts[@]}" madison "$p" | awk -F'|' '/bullseye/ {gsub(/ /, "", $2); print $2; exit}')"
   apt-get "${apt_opts[@]}" download -qq "$p=$version"
 done)
for deb in "$work"/debs/*.deb; do dpkg-deb -x "$deb" "$work/root"; done

root="$work/root"
PYTHONHOME="$root/usr" "$root/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2" \
  --library-path "$root/lib/x86_64-linux-gnu:$root/usr/lib/x86_64-linux-gnu:$tf_dir" \
  "$root/usr/bin/python3.9" - "$tf_dir/libtensorflow_framework.so.2" "$library" <<'PY'
import ctypes, sys
libc = ctypes.CDLL("libc.so.6")
libc.gnu_get_libc_version.restype = ctypes.c_char_p
print("glibc", libc.gnu_get_libc_version().decode())
ctypes.CDLL(sys.argv[1], mode=ctypes.RTLD_GLOBAL)
try:
  ctypes.CDLL(sys.argv[2])
except OSError as e:
  print("FAILED:", e)
  sys.exit(1)
print("LOADED", sys.argv[2])
PY
