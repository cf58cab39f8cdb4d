"""What the peers suite's tests share: where things are, the peer processes' environment."""

import os

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
SOURCE_PYTHON = os.path.join(REPO, "python")
MATRIX_TESTS = os.path.join(REPO, "tests", "matrix")  # peer_runner.py
PEERS_DIR = os.environ.get("TF_OPT_OPS_PEERS_DIR", "/work/shared/peers")


def peer_env():
  """The environment of the pytest processes that run a peer's test files (peer_runner)."""
  return {
      "PYTHONPATH": os.pathsep.join([SOURCE_PYTHON, PEERS_DIR]),
      "TF_USE_LEGACY_KERAS": "1",
  }
