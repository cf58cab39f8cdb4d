"""The peers suite: the real TF Addons and Merlin Models against our classes (`make peer-tests`).

Runs in .venvs/peers (tools/peer_tests.sh): TensorFlow 2.21 with tf_keras and TFRS
(requirements-dev.txt), plus TF Addons 0.23.0 and Merlin Models 23.12.0, which
$TF_OPT_OPS_PEERS_DIR/install.sh (default /work/shared/peers) installs and peer_shim.py beside
it imports, under TF_USE_LEGACY_KERAS=1; tf_opt_ops comes from the source tree (python/, its
library staged by `make build`). Its own pytest.ini makes tests/peers the rootdir, so
tests/conftest.py is not loaded; the main suite ignores this folder.

Merlin is imported here, before anything imports tf_opt_ops: tf_opt_ops registers Merlin's
serialization names (`merlin.models>MultiOptimizer`) as aliases of its classes, overriding
Merlin's entries, which Merlin, imported later, would override in turn.
"""

import os
import sys

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peers_util import MATRIX_TESTS  # noqa: E402
from peers_util import PEERS_DIR  # noqa: E402
from peers_util import SOURCE_PYTHON  # noqa: E402

if not os.path.exists(os.path.join(PEERS_DIR, "peer_shim.py")):
  pytest.exit(
      f"peers suite: no peer_shim.py in {PEERS_DIR}: set TF_OPT_OPS_PEERS_DIR to the folder "
      "holding install.sh and peer_shim.py (tools/peer_tests.sh, `make peer-tests`).", returncode=4)
if os.environ.get("TF_USE_LEGACY_KERAS") != "1":
  pytest.exit(
      "peers suite: run it with TF_USE_LEGACY_KERAS=1 (both peers build on tf.keras); "
      "`make peer-tests` does.", returncode=4)
for _path in (MATRIX_TESTS, PEERS_DIR, SOURCE_PYTHON):
  if _path not in sys.path:
    sys.path.insert(0, _path)

import peer_shim  # noqa: E402

MERLIN = peer_shim.import_merlin()  # before tf_opt_ops (see above)


def pytest_configure(config):
  import tf_opt_ops

  imported = os.path.dirname(os.path.realpath(tf_opt_ops.__file__))
  if imported != os.path.realpath(os.path.join(SOURCE_PYTHON, "tf_opt_ops")):
    pytest.exit(
        f"peers suite: tf_opt_ops was imported from {imported}, not from the source tree "
        f"({SOURCE_PYTHON}).", returncode=4)
  libs = os.path.join(imported, "libs")
  if not os.path.isdir(libs) or not os.listdir(libs):
    pytest.exit("peers suite: no op library in python/tf_opt_ops/libs/: run `make build`.",
                returncode=4)


def pytest_report_header(config):
  import tensorflow as tf

  import peer_runner

  return peer_runner.report_header("peers", [f"tensorflow {tf.__version__}"], [
      "tf-keras", "tensorflow-recommenders", "tensorflow-addons", "merlin-models", "merlin-core",
      "merlin-dataloader"
  ]) + [f"peers: shim from {PEERS_DIR}"]


@pytest.fixture(scope="session")
def mm():
  """merlin.models.tf, imported through peer_shim."""
  return MERLIN
