#!/usr/bin/env bash
# A Debian chroot holding another Python than the host's, for the version matrix.
#
#   tools/python_chroot.sh make PYTHON           makes it once, prints its directory
#   tools/python_chroot.sh run PYTHON [--bind DIR]... -- COMMAND...
#
# PYTHON is a Python minor version that some Debian release ships as its python3: 3.9
# (Debian 11, bullseye), 3.11 (12, bookworm), 3.13 (13, trixie). `make` runs debootstrap from
# the Debian mirror the host's apt uses (/etc/apt/sources.list.d/debian.sources) into
# .venvs/chroot-python<PYTHON>, with python3, python3-venv, python3-pip and what the matrix
# suite needs ($packages below); once made it is reused and nothing is downloaded again (a
# longer package list is added with apt-get). `run` makes it when missing, then runs COMMAND
# inside it, in a private mount namespace (the mounts vanish with the command): /proc, /sys,
# /dev, the repository at its own path (so paths under it mean the same inside), each --bind
# DIR at its own path, and the local directories the host's pip settings name (read-only).
# COMMAND starts in the caller's directory when that is under one of the bound ones, else in
# /. The host's CA bundle, pip settings and resolver are copied in first, so pip reaches the
# package indexes as the host's pip does. Needs root (or sudo) for debootstrap, mount and
# chroot; installs debootstrap with apt-get when missing.
set -euo pipefail
caller_dir="$PWD"
cd "$(dirname "$0")/.."
root="$(pwd)"
sudo=()
[[ "$(id -u)" == 0 ]] || sudo=(sudo)

usage() {
  echo "usage: $0 make PYTHON | run PYTHON [--bind DIR]... -- COMMAND..." >&2
  exit 2
}

debian_suite() {
  case "$1" in
    3.9) echo bullseye ;;
    3.11) echo bookworm ;;
    3.13) echo trixie ;;
    *)
      echo "python_chroot: no Debian release ships Python $1 as python3; choose 3.9, 3.11 or 3.13" >&2
      exit 2
      ;;
  esac
}

# The first URI of the host's apt sources whose path is (or is not, with -v) debian-security.
host_mirror() {
  local sources=/etc/apt/sources.list.d/debian.sources
  local uri
  uri="$(awk '$1 == "URIs:" {print $2}' "$sources" 2>/dev/null | grep "$@" 'debian-security' | head -n1 || true)"
  echo "$uri"
}

pip_config_files=(/etc/pip.conf /root/.config/pip/pip.conf /etc/xdg/pip)
[[ -n "${HOME:-}" && "$HOME" != /root ]] && pip_config_files+=("$HOME/.config/pip/pip.conf")

# Copies the host's CA bundle, pip settings and resolver into the chroot. The user's pip.conf
# becomes root's there: pip runs as root inside.
copy_host_settings() {
  local dir="$1" file target
  "${sudo[@]}" mkdir -p "$dir/etc/ssl/certs" "$dir/root/.config/pip"
  "${sudo[@]}" cp -fL /etc/ssl/certs/ca-certificates.crt "$dir/etc/ssl/certs/ca-certificates.crt"
  "${sudo[@]}" cp -fL /etc/resolv.conf "$dir/etc/resolv.conf"
  for file in "${pip_config_files[@]}"; do
    [[ -e "$file" ]] || continue
    target="$file"
    [[ "$file" == */.config/pip/pip.conf ]] && target=/root/.config/pip/pip.conf
    "${sudo[@]}" rm -rf "$dir$target"
    "${sudo[@]}" mkdir -p "$(dirname "$dir$target")"
    "${sudo[@]}" cp -rL "$file" "$dir$target"
  done
}

# Directories on this machine that the host's pip settings (files and PIP_* variables) name:
# find-links, file:// indexes (not /etc: the settings themselves are copied).
pip_local_dirs() {
  local file path
  {
    for file in "${pip_config_files[@]}"; do
      [[ -e "$file" ]] && cat "$file" "$file"/* 2> /dev/null
    done
    env | grep '^PIP_' || true
  } | grep -oE '(file://)?/[^ ,"]+' | sed 's|^file://||' | while read -r path; do
    while [[ -n "$path" && ! -d "$path" && "$path" != / ]]; do path="$(dirname "$path")"; done
    if [[ -d "$path" && "$path" != / && "$path" != /etc/* ]]; then echo "$path"; fi
  done | sort -u
}

# What the matrix suite needs besides Python: git (TF Addons' test is read from a git
# repository), binutils (readelf reads the library's symbol versions).
packages=python3,python3-venv,python3-pip,ca-certificates,git,binutils

# apt-get install inside the chroot (a chroot made with an older package list).
apt_install() {
  local dir="$1"
  shift
  "${sudo[@]}" unshare --mount --propagation private bash -euc '
    dir="$1"; shift
    mount -t proc proc "$dir/proc"
    mount --rbind /dev "$dir/dev"
    chroot "$dir" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin DEBIAN_FRONTEND=noninteractive \
      bash -c "apt-get update -qq && apt-get install -y -qq --no-install-recommends \"\$@\" && apt-get clean" \
      apt "$@"
  ' apt_install "$dir" "$@" >&2
}

make_chroot() {
  local python="$1" suite dir mirror security
  suite="$(debian_suite "$python")"
  dir="$root/.venvs/chroot-python$python"
  if [[ "$(cat "$dir/.ready" 2> /dev/null)" == "$packages" ]]; then
    echo "$dir"
    return
  fi
  mkdir -p "$root/.venvs"
  exec 9> "$dir.lock"
  flock 9
  local start=$SECONDS
  if [[ -f "$dir/.ready" && "$(cat "$dir/.ready")" != "$packages" ]]; then
    echo "python_chroot: adding packages to $dir: $packages" >&2
    apt_install "$dir" ${packages//,/ }
    echo "$packages" | "${sudo[@]}" tee "$dir/.ready" > /dev/null
  elif [[ ! -f "$dir/.ready" ]]; then
    if ! command -v debootstrap > /dev/null; then
      echo "python_chroot: installing debootstrap" >&2
      "${sudo[@]}" apt-get update -qq >&2
      DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq debootstrap >&2
    fi
    mirror="$(host_mirror -v)"
    mirror="${mirror:-http://deb.debian.org/debian}"
    security="$(host_mirror)"
    security="${security:-http://deb.debian.org/debian-security}"
    echo "python_chroot: Debian $suite (Python $python) from $mirror into $dir" >&2
    # A finished debootstrap is kept when a later step failed.
    if [[ "$(cat "$dir.partial/.debootstrapped" 2> /dev/null)" != "$packages" ]]; then
      "${sudo[@]}" rm -rf "$dir.partial" "$dir"
      "${sudo[@]}" debootstrap --variant=minbase --include="$packages" \
        "$suite" "$dir.partial" "$mirror" >&2
      echo "$packages" | "${sudo[@]}" tee "$dir.partial/.debootstrapped" > /dev/null
    fi
    # apt inside knows the same mirrors.
    printf 'deb %s %s main\ndeb %s %s-updates main\ndeb %s %s-security main\n' \
      "$mirror" "$suite" "$mirror" "$suite" "$security" "$suite" |
      "${sudo[@]}" tee "$dir.partial/etc/apt/sources.list" > /dev/null
    "${sudo[@]}" rm -rf "$dir.partial/var/cache/apt/archives/"*.deb
    copy_host_settings "$dir.partial"
    local actual
    actual="$("${sudo[@]}" chroot "$dir.partial" python3 -c \
      'import sys; print("%d.%d" % sys.version_info[:2])')"
    [[ "$actual" == "$python" ]] || {
      echo "python_chroot: Debian $suite's python3 is $actual, not $python" >&2
      exit 1
    }
    "${sudo[@]}" mv "$dir.partial" "$dir"
    echo "$packages" | "${sudo[@]}" tee "$dir/.ready" > /dev/null
  fi
  echo "python_chroot: ready in $((SECONDS - start)) s" >&2
  exec 9>&-
  echo "$dir"
}

run_in_chroot() {
  local python="$1" dir
  shift
  local binds=("$root")
  while [[ $# -gt 0 && "$1" != -- ]]; do
    [[ "$1" == --bind && $# -ge 2 ]] || usage
    binds+=("$(realpath "$2")")
    shift 2
  done
  [[ "${1:-}" == -- && $# -ge 2 ]] || usage
  shift
  dir="$(make_chroot "$python")"
  copy_host_settings "$dir"
  local workdir=/ bound
  for bound in "${binds[@]}"; do
    [[ "$caller_dir/" == "$bound/"* ]] && workdir="$caller_dir"
  done
  mapfile -t local_dirs < <(pip_local_dirs)
  # Passed through: the settings of our tools and of pip, TensorFlow's log level.
  local environment=(HOME=/root PATH=/usr/local/bin:/usr/bin:/bin LANG=C.UTF-8)
  local name
  while IFS= read -r name; do
    environment+=("$name=${!name}")
  done < <(compgen -e | grep -E '^(TF_OPT_OPS_|PIP_|TF_CPP_)' || true)
  # The script below runs as root in a new mount namespace; its arguments: the chroot, the
  # number of read-write binds, those binds, the read-only binds, "--", the environment, "--",
  # the command.
  "${sudo[@]}" unshare --mount --propagation private bash -euc '
    dir="$1"; count="$2"; shift 2
    bind() {  # bind SOURCE READONLY
      mkdir -p "$dir$1"
      mount --bind "$1" "$dir$1"
      [[ "$2" == 1 ]] && mount -o remount,bind,ro "$dir$1"
      return 0
    }
    mount -t proc proc "$dir/proc"
    mount --rbind /sys "$dir/sys"
    mount --rbind /dev "$dir/dev"
    for ((i = 0; i < count; i++)); do bind "$1" 0; shift; done
    while [[ "$1" != -- ]]; do bind "$1" 1; shift; done
    shift
    environment=()
    while [[ "$1" != -- ]]; do environment+=("$1"); shift; done
    shift
    exec chroot "$dir" /usr/bin/env -i "${environment[@]}" bash -c "cd \"\$1\" && shift && exec \"\$@\"" \
      run "$@"
  ' python_chroot "$dir" "${#binds[@]}" "${binds[@]}" "${local_dirs[@]}" -- \
    "${environment[@]}" -- "$workdir" "$@"
}

[[ $# -ge 2 ]] || usage
command="$1"
shift
case "$command" in
  make) make_chroot "$1" ;;
  run) run_in_chroot "$@" ;;
  *) usage ;;
esac
