#!/usr/bin/env bash
# Makes .venvs/fbgemm, the FBGEMM suite's venv (tests/fbgemm/), once; prints its Python.
#
#   tools/fbgemm_venv.sh              (`make fbgemm-tests` runs it, then the suite)
#
# The venv holds PyTorch's CPU build, FBGEMM's CPU build (fbgemm-gpu-cpu) of the release made
# for that PyTorch, NumPy and pytest, pinned in tests/fbgemm/requirements.txt; no TensorFlow
# (the suite loads our NumPy reference by its path). pip takes torch 2.13.0 from the CPU wheel
# that lies on this kind of machine's disk (pip's find-links); elsewhere, PyPI's torch 2.13.0
# is a CUDA build of several GB. The venv is reused while its marker file says it was made
# from the current requirements and this script; delete .venvs/fbgemm to rebuild it.
set -euo pipefail
cd "$(dirname "$0")/.."
root="$(pwd)"
python="${PYTHON:-python3}"
venv="$root/.venvs/fbgemm"
marker="$venv/.fbgemm-installed"
requirements=tests/fbgemm/requirements.txt

want="$(cat "$requirements" "$0" | sha256sum | cut -d' ' -f1)"
if [[ ! -f "$marker" || "$(cat "$marker")" != "$want" ]]; then
  start=$SECONDS
  mkdir -p build/fbgemm
  log="$root/build/fbgemm/install.log"
  echo "fbgemm-venv: creating $venv ($requirements; log: $log)" >&2
  rm -rf "$venv"
  if ! { "$python" -m venv "$venv" &&
         "$venv/bin/python" -m pip install -q --upgrade pip &&
         "$venv/bin/python" -m pip install -q --progress-bar off -r "$requirements"; } \
       > "$log" 2>&1; then
    tail -n 40 "$log" >&2
    echo "fbgemm-venv: installing $requirements failed; see $log" >&2
    exit 1
  fi
  # PyPI's torch 2.13.0 is a CUDA build: it runs the suite too, at several GB more.
  if ! "$venv/bin/python" -c 'import sys, torch; sys.exit(torch.version.cuda is not None)'; then
    echo "fbgemm-venv: warning: pip installed a CUDA build of torch (no CPU wheel of torch" \
      "2.13.0 in pip's find-links here); the suite runs on the CPU all the same." >&2
  fi
  echo "$want" > "$marker"
  echo "fbgemm-venv: $venv ready in $((SECONDS - start)) s ($(du -sh "$venv" | cut -f1))" >&2
fi
echo "$venv/bin/python"
