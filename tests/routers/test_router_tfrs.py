"""Our tf_keras routers against the live TensorFlow Recommenders CompositeOptimizer.

TFRS imports only under tf_keras (`TF_USE_LEGACY_KERAS=1` before TensorFlow is
imported), so the checks run in a subprocess: router_tfrs_worker.py. Why the
routers match TFRS': see docs/design.md, "Routers".
"""

import json
import os

import pytest

import common

pytestmark = pytest.mark.slow

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "router_tfrs_worker.py")
FLAVORS = ("legacy", "tf_keras")


@pytest.fixture(scope="module")
def results():
  import importlib.util
  assert importlib.util.find_spec("tensorflow_recommenders") is not None, (
      "tensorflow-recommenders is a test dependency (requirements-dev.txt): make venv")
  proc = common.run_python(None, WORKER, env={"TF_USE_LEGACY_KERAS": "1"})
  return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("flavor", FLAVORS)
def test_tfrs_composite_optimizer_test_passes_on_ours(results, flavor):
  got = results[flavor]
  # test_composite_optimizer: each optimizer as alone, optimizers in the given order.
  assert got["alone_diff"] < 1e-7 and got["optimizers_in_order"]
  # test_incorrect_inputs: overlapping and unclaimed variables raise ValueError.
  assert got["incorrect_inputs_raise"]
  # test_checkpoint_save_restore_export: 8 batches, 5 optimizer variables (no router
  # counter of our own), assert_consumed, counter and state restored, export loads.
  assert got["checkpoint_test"] == {
      "iterations": 8, "variables": 5, "restored_iterations": 8, "restored_state_diff": 0.0,
      "export_diff": 0.0
  }


@pytest.mark.parametrize("pair", ["legacy_pair", "mixed_apis"])
@pytest.mark.parametrize("flavor", FLAVORS)
def test_checkpoints_restore_both_ways_with_tfrs(results, flavor, pair, record_property):
  # `mixed_apis`: our legacy LazyAdam next to our tf_keras ClippyAdagrad in one
  # router, against TFRS' router holding a legacy Adam and TFRS' ClippyAdagrad.
  got = results[flavor][pair]
  for direction in ("tfrs_to_ours", "ours_to_tfrs"):
    record_property(f"{pair}_{direction}_max_abs_diff", got[direction]["diff"])
    assert got[direction]["diff"] < 1e-6  # assert_consumed() passed in the worker.
    assert got[direction]["iterations"] == [6, 6]
  # The very same checkpoint layout: every key and shape.
  assert got["tfrs_to_ours"]["keys"] == got["ours_to_tfrs"]["keys"]
