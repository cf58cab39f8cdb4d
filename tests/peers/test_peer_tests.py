"""The real peers' own test files, run against our classes (tests/matrix/peer_runner.py).

On TensorFlow 2.21 through peer_shim (conftest.py), each file runs in a fresh pytest process
with the peer's own classes ("theirs", the baseline) and with ours swapped in; everything that
passed with theirs must pass with ours. The counts and each test's outcome are printed
(`make peer-tests` runs pytest with -s).

- Merlin Models 23.12.0 `tests/unit/tf/blocks/test_optimizer.py` (from its sdist:
  merlin_sources.py), with Merlin's `MultiOptimizer`, `OptimizerBlocks` and `LazyAdam` swapped
  for tf_opt_ops.legacy's, in Merlin's own models (the file builds them).
- TF Addons 0.23.0 `tensorflow_addons/optimizers/tests/lazy_adam_test.py` (from a git
  repository of tensorflow/addons: peer_runner.tf_addons_lazy_adam_test), with
  `tf_opt_ops.legacy.LazyAdam`.
"""

import os

import merlin_sources
import peer_runner
import peers_util

MERLIN_TEST = "tests/unit/tf/blocks/test_optimizer.py"
MERLIN_CLASSES = ("MultiOptimizer", "OptimizerBlocks", "LazyAdam")
# Merlin's classes are defined in blocks/optimizer.py and exported by merlin.models.tf.
MERLIN_MODULES = ("merlin.models.tf", "merlin.models.tf.blocks.optimizer")

# Merlin's tests/conftest.py imports asvdb (its benchmark database), which is not installed; the
# fixtures test_optimizer.py uses are defined here as Merlin's conftests define them
# (tests/conftest.py: `ecommerce_data`, the autouse `cleanup_dataloader`;
# tests/unit/tf/_conftest.py: the autouse `tf_clear_session`).
MERLIN_PREAMBLE = '''
import peer_shim

peer_shim.import_merlin()  # before the swaps below and the test module import Merlin

from unittest.mock import patch

import pytest
import tensorflow as tf
from merlin.dataloader.loader_base import LoaderBase
from merlin.datasets.synthetic import generate_data


@pytest.fixture
def ecommerce_data():
  return generate_data("e-commerce", num_rows=100)


@pytest.fixture(autouse=True)
def tf_clear_session():
  tf.keras.backend.clear_session()


@pytest.fixture(autouse=True)
def cleanup_dataloader():
  with patch.object(LoaderBase, "__iter__", side_effect=LoaderBase.__iter__,
                    autospec=True) as patched:
    yield
    for call in patched.call_args_list:
      call.args[0].stop()
'''

TFA_PREAMBLE = '''
import peer_shim

peer_shim.import_tfa()  # before the swap below and TF Addons' conftest import it

# TF Addons' test utilities import Keras 2 internals from `keras` at module level too.
with peer_shim.keras_is_tf_keras():
  from tensorflow_addons.conftest import *  # noqa: F401,F403
'''


def print_table(outcomes, labels):
  """Each test's outcome per run, one line each."""
  tests = sorted(set().union(*(outcomes[label].results for label in labels)))
  width = max(len(t) for t in tests)
  print("\n" + f"{'test':<{width}}  " + "  ".join(f"{label:>8}" for label in labels))
  for test in tests:
    print(f"{test:<{width}}  " +
          "  ".join(f"{outcomes[label].results.get(test, '-'):>8}" for label in labels))


def _merlin_swaps(target):
  classes = {name: f"{target}.{name}" for name in MERLIN_CLASSES}
  return {module: dict(classes) for module in MERLIN_MODULES}


def test_merlin_optimizer_tests_pass_with_ours(tmp_path):
  merlin_sources.check_pinned_by(os.path.join(peers_util.PEERS_DIR, "install.sh"))
  source = merlin_sources.read(MERLIN_TEST)
  outcomes = peer_runner.run({"test_optimizer.py": source},
                             {"ours": _merlin_swaps("tf_opt_ops.legacy")}, str(tmp_path),
                             preamble=MERLIN_PREAMBLE, env=peers_util.peer_env(), timeout=1800)
  print_table(outcomes, ("theirs", "ours"))
  peer_runner.check(outcomes, "ours", f"Merlin Models {merlin_sources.VERSION} test_optimizer.py")
  assert outcomes["ours"].count("passed") >= 53  # 53 passed, 3 skips (two by Merlin, one unittest)


def test_tf_addons_lazy_adam_tests_pass_with_ours(tmp_path):
  outcomes = peer_runner.run(peer_runner.tf_addons_lazy_adam_test(), peer_runner.TFA_SWAPS,
                             str(tmp_path), preamble=TFA_PREAMBLE, env=peers_util.peer_env())
  print_table(outcomes, ("theirs", "ours"))
  peer_runner.check(outcomes, "ours", "TF Addons 0.23.0 lazy_adam_test.py (TF 2.21)")
  assert outcomes["ours"].count("passed") >= 28  # 28 passed, 2 GPU skips without a GPU
