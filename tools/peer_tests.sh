#!/usr/bin/env bash
# Runs the peers' own tests against our classes, on the real peers (tests/peers/).
#
#   tools/peer_tests.sh [PYTEST ARGS ...]      (`make peer-tests`, after `make build`)
#
# The peers (TF Addons 0.23.0, Merlin Models 23.12.0) do not import under TensorFlow 2.21 by
# themselves: $TF_OPT_OPS_PEERS_DIR (default /work/shared/peers) holds install.sh, which
# installs them hash-pinned into a virtualenv holding TensorFlow 2.21, tf_keras and TFRS, and
# peer_shim.py, which imports them there. The venv .venvs/peers is created once
# (requirements-dev.txt, then install.sh) and reused while its marker file says it is
# complete; delete .venvs/peers to rebuild it. The suite then runs with that venv's Python,
# the source package (python/, staged by `make build`) on PYTHONPATH and TF_USE_LEGACY_KERAS=1
# (both peers build on tf.keras). Merlin's test file comes from its sdist, downloaded at test
# time into build/peers/ (tests/peers/merlin_sources.py).
set -euo pipefail
cd "$(dirname "$0")/.."
root="$(pwd)"
python="${PYTHON:-python3}"
peers_dir="${TF_OPT_OPS_PEERS_DIR:-/work/shared/peers}"
venv="$root/.venvs/peers"
marker="$venv/.peers-installed"

for f in install.sh peer_shim.py; do
  [[ -f "$peers_dir/$f" ]] || {
    echo "peer-tests: $peers_dir/$f is missing. The peer tests need a folder holding install.sh" \
      "(installs TF Addons 0.23.0 and Merlin Models 23.12.0 into a TensorFlow 2.21 virtualenv)" \
      "and peer_shim.py (imports them under TensorFlow 2.21); set TF_OPT_OPS_PEERS_DIR to it." >&2
    exit 2
  }
done
ls python/tf_opt_ops/libs/tf*/_tf_opt_ops.so >/dev/null 2>&1 || {
  echo "peer-tests: no op library staged in python/tf_opt_ops/libs/: run \`make build\` first." >&2
  exit 2
}

# The marker holds what the venv was made from; anything else (no marker, an interrupted
# install, new requirements or a new install.sh) makes it anew.
want="$(cat requirements-dev.txt "$peers_dir/install.sh" "$peers_dir/requirements-peers.txt" \
  2>/dev/null | sha256sum | cut -d' ' -f1)"
if [[ ! -f "$marker" || "$(cat "$marker")" != "$want" ]]; then
  start=$SECONDS
  mkdir -p build/peers
  log="$root/build/peers/install.log"
  echo "peer-tests: creating $venv (requirements-dev.txt, then $peers_dir/install.sh; log: $log)"
  rm -rf "$venv"
  if ! { "$python" -m venv "$venv" &&
         "$venv/bin/python" -m pip install -q --upgrade pip &&
         "$venv/bin/python" -m pip install -q -r requirements-dev.txt &&
         bash "$peers_dir/install.sh" "$venv"; } > "$log" 2>&1; then
    tail -n 40 "$log" >&2
    echo "peer-tests: installing the peers failed; see $log" >&2
    exit 1
  fi
  echo "$want" > "$marker"
  echo "peer-tests: $venv ready in $((SECONDS - start)) s"
fi

export TF_OPT_OPS_PEERS_DIR="$peers_dir"
export TF_USE_LEGACY_KERAS=1
export TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-3}"
export PYTHONPATH="$root/python"
exec "$venv/bin/python" -m pytest tests/peers -q -ra -s -p no:cacheprovider "$@"
