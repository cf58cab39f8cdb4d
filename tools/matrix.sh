#!/usr/bin/env bash
# Runs the version-matrix suite (tests/matrix/) against the release wheel, one fresh
# virtualenv per TensorFlow version.
#
#   tools/matrix.sh [MINOR ...]   (default: every version in build_deps/tf_versions.txt)
#
# For each version: .venvs/matrix-tf<minor> is created anew with that TensorFlow
# ($MATRIX_TF_PACKAGE, default `tensorflow`; or `tensorflow-cpu`), the tf-keras of the same
# minor where there is one, pytest, the extras tests/matrix/extras.txt names for it, and
# the wheel in dist/ (`make wheel-all`); then pytest runs tests/matrix/ from outside the
# source tree, so the installed package is what it imports. Logs and a summary table
# (version, result, seconds) go to build/matrix/. Exits non-zero when any version fails.
set -euo pipefail
cd "$(dirname "$0")/.."
root="$(pwd)"
python="${PYTHON:-python3}"
tf_package="${MATRIX_TF_PACKAGE:-tensorflow}"
versions_file=build_deps/tf_versions.txt
extras_file=tests/matrix/extras.txt

versions=("$@")
[[ ${#versions[@]} -gt 0 ]] || mapfile -t versions < <(awk '!/^#/ && NF {print $1}' "$versions_file")
wheels=(dist/tf_opt_ops-*.whl)
[[ -f "${wheels[0]}" && ${#wheels[@]} -eq 1 ]] || {
  echo "matrix: expected one wheel in dist/ (run \`make wheel-all\` first), found: ${wheels[*]}" >&2
  exit 2
}
wheel="$root/${wheels[0]}"

out=build/matrix
mkdir -p "$out"
summary="$out/summary.md"
{
  echo "| TensorFlow | package | result | seconds |"
  echo "|---|---|---|---|"
} > "$summary"
failed=0
for minor in "${versions[@]}"; do
  read -r tf_pin keras_pin < <(awk -v m="$minor" '$1 == m {print $2, $3}' "$versions_file")
  [[ -n "${tf_pin:-}" ]] || { echo "matrix: TensorFlow $minor is not in $versions_file" >&2; exit 2; }
  requirements=("$tf_package==$tf_pin" pytest)
  [[ "$keras_pin" != "-" ]] && requirements+=("tf-keras==$keras_pin")
  read -r -a extras < <(awk -v m="$minor" '$1 == m {$1 = ""; print}' "$extras_file" 2>/dev/null || true)
  requirements+=("${extras[@]}")
  venv="$root/.venvs/matrix-tf$minor"
  log="$root/$out/tf$minor.log"
  start=$SECONDS
  echo "matrix: TensorFlow $minor: fresh venv with ${requirements[*]} and $(basename "$wheel")"
  rm -rf "$venv"
  result=failed
  if "$python" -m venv "$venv" > "$log" 2>&1 &&
     "$venv/bin/python" -m pip install -q "${requirements[@]}" "$wheel" >> "$log" 2>&1; then
    workdir="$(mktemp -d)"
    if (cd "$workdir" && env -u PYTHONPATH "$venv/bin/python" -m pytest "$root/tests/matrix" \
          -q -ra -p no:cacheprovider >> "$log" 2>&1); then
      result=passed
    fi
    rm -rf "$workdir"
  else
    echo "matrix: installing failed; see $log" >&2
  fi
  counts="$(grep -E '^[0-9]+ (passed|failed)|^=+ .*(passed|failed|error)' "$log" | tail -n1 | tr -d '=' | xargs)"
  echo "| $minor ($tf_pin) | $tf_package | $result: ${counts:-no pytest summary} | $((SECONDS - start)) |" >> "$summary"
  echo "matrix: TensorFlow $minor $result in $((SECONDS - start)) s (${counts:-see $log})"
  [[ "$result" == passed ]] || failed=1
done
cat "$summary"
exit "$failed"
