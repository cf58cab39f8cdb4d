#!/usr/bin/env bash
# Runs the version-matrix suite (tests/matrix/) against the release wheel, one fresh
# virtualenv per (Python, TensorFlow) pair.
#
#   tools/matrix.sh [MINOR ...]   (default: every version in build_deps/tf_versions.txt)
#
# Pythons: $MATRIX_PYTHONS (default: the host's python3, 3.9 and 3.13). The host's Python runs
# every MINOR it supports; every other Python runs the oldest and the newest MINOR that
# supports it (build_deps/tf_versions.txt's python column), inside a Debian chroot that
# ships it as python3 (tools/python_chroot.sh: 3.9 from Debian 11, 3.13 from Debian 13).
# For each pair: .venvs/matrix-py<python>-tf<minor> is created anew with that TensorFlow
# ($MATRIX_TF_PACKAGE, default `tensorflow`; or `tensorflow-cpu`), the tf-keras of the same
# minor where there is one, pytest, the extras tests/matrix/extras.txt names for it, and
# the wheel in dist/ (`make wheel-all`); then pytest runs tests/matrix/ from outside the
# source tree, so the installed package is what it imports. Logs and a summary table
# (Python, version, result, seconds) go to build/matrix/. Exits non-zero when any pair fails.
set -euo pipefail
cd "$(dirname "$0")/.."
root="$(pwd)"
host_python="${PYTHON:-python3}"
tf_package="${MATRIX_TF_PACKAGE:-tensorflow}"
versions_file=build_deps/tf_versions.txt
extras_file=tests/matrix/extras.txt
# Mounted into the chroots: tests/matrix/test_peer_tests.py reads TF Addons' test from there.
tfa_git_dir="${TF_OPT_OPS_TFA_GIT_DIR:-/work/.mirror/tensorflow+addons/repo}"

versions=("$@")
[[ ${#versions[@]} -gt 0 ]] || mapfile -t versions < <(awk '!/^#/ && NF {print $1}' "$versions_file")
wheels=(dist/tf_opt_ops-*.whl)
[[ -f "${wheels[0]}" && ${#wheels[@]} -eq 1 ]] || {
  echo "matrix: expected one wheel in dist/ (run \`make wheel-all\` first), found: ${wheels[*]}" >&2
  exit 2
}
wheel="$root/${wheels[0]}"

host_minor="$("$host_python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
read -r -a pythons <<< "${MATRIX_PYTHONS:-$host_minor 3.9 3.13}"

# Whether TensorFlow $2 has wheels for Python $1 (the python column, "3.9-3.12").
supports() {
  awk -v m="$2" -v p="$1" '
    function number(v, parts) { split(v, parts, "."); return parts[1] * 1000 + parts[2] }
    $1 == m { split($4, range, "-"); found = number(range[1]) <= number(p) && number(p) <= number(range[2]) }
    END { exit !found }' "$versions_file"
}

out=build/matrix
mkdir -p "$out"
summary="$out/summary.md"
{
  echo "| Python | TensorFlow | package | result | seconds |"
  echo "|---|---|---|---|---|"
} > "$summary"
failed=0
declare -A done_pythons=()

# Makes $venv anew and installs the requirements and the wheel into it, logging to $log. A
# second try follows a failed first: a package index that drops a connection once (it has
# happened) should not fail the matrix, while a requirement that cannot resolve fails twice.
install_venv() {
  local try
  for try in 1 2; do
    rm -rf "$venv"
    echo "matrix: install, try $try" >> "$log"
    if "${run[@]}" "$python" -m venv "$venv" >> "$log" 2>&1 &&
       "${run[@]}" "$venv/bin/python" -m pip install -q --retries 10 "${requirements[@]}" \
         "$wheel" >> "$log" 2>&1; then
      return 0
    fi
  done
  return 1
}
for py in "${pythons[@]}"; do
  [[ -z "${done_pythons[$py]:-}" ]] || continue
  done_pythons[$py]=1
  supported=()
  for minor in "${versions[@]}"; do
    supports "$py" "$minor" && supported+=("$minor")
  done
  if [[ ${#supported[@]} -eq 0 ]]; then
    echo "matrix: Python $py: none of TensorFlow ${versions[*]} has wheels for it; skipped"
    continue
  fi
  if [[ "$py" == "$host_minor" ]]; then
    run=()
    python="$host_python"
    minors=("${supported[@]}")
  else
    binds=()
    [[ -d "$tfa_git_dir" ]] && binds=(--bind "$tfa_git_dir")
    run=("$root/tools/python_chroot.sh" run "$py" "${binds[@]}" --)
    python=python3
    minors=("${supported[0]}")
    [[ ${#supported[@]} -gt 1 ]] && minors+=("${supported[-1]}")
    start=$SECONDS
    tools/python_chroot.sh make "$py" > /dev/null
    echo "matrix: Python $py chroot ready in $((SECONDS - start)) s"
  fi
  for minor in "${minors[@]}"; do
    read -r tf_pin keras_pin < <(awk -v m="$minor" '$1 == m {print $2, $3}' "$versions_file")
    [[ -n "${tf_pin:-}" ]] || { echo "matrix: TensorFlow $minor is not in $versions_file" >&2; exit 2; }
    requirements=("$tf_package==$tf_pin" pytest)
    [[ "$keras_pin" != "-" ]] && requirements+=("tf-keras==$keras_pin")
    read -r -a extras < <(awk -v m="$minor" '$1 == m {$1 = ""; print}' "$extras_file" 2>/dev/null || true)
    requirements+=("${extras[@]}")
    venv="$root/.venvs/matrix-py$py-tf$minor"
    log="$root/$out/py$py-tf$minor.log"
    start=$SECONDS
    echo "matrix: Python $py, TensorFlow $minor: fresh venv with ${requirements[*]} and $(basename "$wheel")"
    result=failed
    : > "$log"
    if install_venv; then
      install_seconds=$((SECONDS - start))
      # Inside the repository, so that the chroots see it; nothing importable lies there.
      workdir="$(mktemp -d "$root/$out/work.XXXXXX")"
      if (cd "$workdir" && env -u PYTHONPATH "${run[@]}" "$venv/bin/python" -m pytest \
            "$root/tests/matrix" -q -ra -p no:cacheprovider >> "$log" 2>&1); then
        result=passed
      fi
      rm -rf "$workdir"
      echo "matrix: installing took $install_seconds s" >> "$log"
    else
      # CI keeps only this output: the log's end says which requirement failed and why.
      echo "matrix: installing failed; the end of $log:" >&2
      tail -n 25 "$log" | sed 's/^/  | /' >&2
    fi
    counts="$(grep -E '^[0-9]+ (passed|failed)|^=+ .*(passed|failed|error)' "$log" | tail -n1 | tr -d '=' | xargs)"
    echo "| $py | $minor ($tf_pin) | $tf_package | $result: ${counts:-no pytest summary} | $((SECONDS - start)) |" >> "$summary"
    echo "matrix: Python $py, TensorFlow $minor $result in $((SECONDS - start)) s (${counts:-see $log})"
    [[ "$result" == passed ]] || failed=1
  done
done
cat "$summary"
exit "$failed"
