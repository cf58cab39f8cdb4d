"""tf_opt_ops.tf_keras.ClippyAdagrad against the live TensorFlow Recommenders ClippyAdagrad.

TFRS imports only under tf_keras (`TF_USE_LEGACY_KERAS=1` before TensorFlow is
imported), so the comparison runs in a subprocess: tfrs_parity_worker.py.
"""

import json
import os

import pytest

import common

pytestmark = pytest.mark.slow

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tfrs_parity_worker.py")


def test_tfrs_installed():
  # Listed in requirements-dev.txt; without it the parity test below cannot run.
  import importlib.util
  assert importlib.util.find_spec("tensorflow_recommenders") is not None


@pytest.fixture(scope="module")
def parity():
  proc = common.run_python(None, WORKER, env={"TF_USE_LEGACY_KERAS": "1"})
  return json.loads(proc.stdout.strip().splitlines()[-1])


def test_same_weights_as_tfrs_after_20_steps(parity, record_property):
  # Every option combination (3 accumulator modes x export x 2 threshold sets),
  # sparse and dense, 20 steps of an Embedding + MLP model.
  for key in ("sparse", "dense", "state"):
    record_property(f"max_abs_diff_{key}", parity[key])
  print(f"max abs diff vs TFRS: {parity}")
  assert parity["runs"] == 24
  assert parity["clipped_runs"] == 12  # clipping was active in every exported run
  assert parity["sparse"] < 1e-6
  assert parity["dense"] < 1e-6
  assert parity["state"] < 1e-5  # accumulators grow to O(10): a few float32 ulps


def test_tfrs_checkpoint_restores_into_ours_and_back(parity):
  assert parity["checkpoint_tfrs_to_ours"] < 1e-6
  assert parity["checkpoint_ours_to_tfrs"] < 1e-6
