"""The peers' own tests, run against our classes (see peer_runner.py).

- TF Addons 0.23.0 `lazy_adam_test.py` (TensorFlow 2.15, where TF Addons still
  works) with `tf_opt_ops.legacy.LazyAdam`. The file is not in TF Addons' wheel:
  it is read from a git repository of tensorflow/addons at tag v0.23.0
  ($TF_OPT_OPS_TFA_GIT_DIR, default /work/.mirror/tensorflow+addons/repo);
  without it the test fails saying how to get it.
- TFRS 0.7.7's `clippy_adagrad_test.py` and `composite_optimizer_test.py` (in its
  wheel) with `tf_opt_ops.tf_keras.ClippyAdagrad` and our `CompositeOptimizer`s:
  TFRS builds on tf.keras, so from TensorFlow 2.16 on they run under
  TF_USE_LEGACY_KERAS=1.

Everything that passes with the peer's class must pass with ours; the counts
are printed (pytest -s or -rA shows them).
"""

import pytest

import matrix_util
import peer_runner

TFRS_TESTS = "tensorflow_recommenders/experimental/optimizers"
LEGACY_KERAS = {"TF_USE_LEGACY_KERAS": "1"} if matrix_util.HAS_KERAS3 else {}


@pytest.mark.skipif(matrix_util.HAS_KERAS3, reason="TF Addons 0.23 needs TensorFlow < 2.16")
def test_tf_addons_lazy_adam_tests_pass_with_ours(tmp_path):
  outcomes = peer_runner.run(peer_runner.tf_addons_lazy_adam_test(), peer_runner.TFA_SWAPS,
                             str(tmp_path),
                             preamble="from tensorflow_addons.conftest import *  # noqa: F401,F403")
  peer_runner.check(outcomes, "ours", "TF Addons 0.23.0 lazy_adam_test.py")
  assert outcomes["ours"].count("passed") >= 28  # 28 passed, 2 GPU skips without a GPU


def _tfrs_file(name):
  return peer_runner.copy_installed([f"{TFRS_TESTS}/{name}"])


TFRS_CLIPPY = "tensorflow_recommenders.experimental.optimizers.clippy_adagrad"
TFRS_COMPOSITE = "tensorflow_recommenders.experimental.optimizers.composite_optimizer"


def test_tfrs_clippy_adagrad_tests_pass_with_ours(tmp_path):
  outcomes = peer_runner.run(
      _tfrs_file("clippy_adagrad_test.py"),
      {"ours": {TFRS_CLIPPY: {"ClippyAdagrad": "tf_opt_ops.tf_keras.ClippyAdagrad"}}},
      str(tmp_path), env=LEGACY_KERAS)
  peer_runner.check(outcomes, "ours", "TFRS 0.7.7 clippy_adagrad_test.py (tf_keras flavor)")
  # The six optimizer tests exercise our class (the others test TFRS' helper function).
  ours = [
      t for t, r in outcomes["ours"].results.items() if "ClippyAdagradTest" in t and r == "passed"
  ]
  assert len(ours) >= 6, outcomes["ours"].results


def test_tfrs_composite_optimizer_tests_pass_with_ours(tmp_path):
  flavors = ("tf_keras", "legacy")  # TFRS' class is OptimizerV2; it takes both tf_keras APIs
  outcomes = peer_runner.run(
      _tfrs_file("composite_optimizer_test.py"), {
          flavor:
              {TFRS_COMPOSITE: {"CompositeOptimizer": f"tf_opt_ops.{flavor}.CompositeOptimizer"}}
          for flavor in flavors
      }, str(tmp_path), env=LEGACY_KERAS)
  for flavor in flavors:
    peer_runner.check(outcomes, flavor, f"TFRS 0.7.7 composite_optimizer_test.py ({flavor} flavor)")
    assert outcomes[flavor].count("passed") >= 6
