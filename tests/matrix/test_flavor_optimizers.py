"""Each flavor's LazyAdam and ClippyAdagrad against the reference, the flavor's own Adam and peers.

Hyperparameters are exact in float32 (powers of two, 7/8, 127/128), so every
flavor's way of keeping them (Python floats, float32 variables cast to the
variable's dtype) gives the same numbers and the tolerances stay those of the ops.
"""

import importlib
import json
import os

import numpy as np
import pytest
import tensorflow as tf

import tf_opt_ops
from tf_opt_ops import reference

import matrix_util

ROWS, DIM, STEPS = 8, 3, 3
INDICES = [np.array(i, np.int32) for i in ([1, 4, 1, 6], [0, 4, 4], [6, 1, 2, 2, 2])]
ADAM = dict(learning_rate=0.0625, beta_1=0.875, beta_2=0.9921875, epsilon=2.0**-20)
CLIPPY = dict(learning_rate=0.5, initial_accumulator_value=0.125, variable_relative_threshold=0.125,
              accumulator_relative_threshold=2.0**-10, absolute_threshold=2.0**-14,
              epsilon=2.0**-20)
TOLERANCE = {"float32": dict(rtol=2e-6, atol=2e-6), "float64": dict(rtol=1e-12, atol=1e-12)}


def test_flavors_of_this_tensorflow():
  for name in matrix_util.EXPECTED_FLAVORS:
    matrix_util.flavor(name)  # imports
  if matrix_util.HAS_KERAS3:
    return
  # TensorFlow 2.15: no Keras 3 flavor, and tf.keras is the Keras 2 our flavors build on.
  with pytest.raises(
      ImportError, match=r"needs TensorFlow 2\.16 or later.*tf_opt_ops\.tf_keras.*"
      r"tf_opt_ops\.legacy"):
    importlib.import_module("tf_opt_ops.keras")
  assert tf_opt_ops.keras_flavor() == "tf_keras"
  assert tf_opt_ops.LazyAdam is tf_opt_ops.tf_keras.LazyAdam
  assert issubclass(tf_opt_ops.tf_keras.LazyAdam, tf.keras.optimizers.Adam)
  assert issubclass(tf_opt_ops.legacy.LazyAdam, tf.keras.optimizers.legacy.Adam)
  assert issubclass(tf_opt_ops.tf_keras.ClippyAdagrad, tf.keras.optimizers.Optimizer)


def test_top_level_names_follow_tf_keras():
  expected = "keras" if matrix_util.HAS_KERAS3 else "tf_keras"  # TF_USE_LEGACY_KERAS unset
  assert os.environ.get("TF_USE_LEGACY_KERAS") in (None, "", "0")
  assert tf_opt_ops.keras_flavor() == expected
  module = matrix_util.flavor(expected).module
  for name in ("LazyAdam", "ClippyAdagrad", "CompositeOptimizer", "MultiOptimizer",
               "OptimizerBlocks"):
    assert getattr(tf_opt_ops, name) is getattr(module, name)
  assert issubclass(tf_opt_ops.LazyAdam, tf.keras.optimizers.Optimizer)


def sparse_grads(dtype, seed):
  rng = np.random.default_rng(seed)
  return [rng.uniform(-2, 2, (len(i), DIM)).astype(dtype) for i in INDICES]


def apply_steps(flavor, optimizer, var, grads, sparse):
  for step, grad in enumerate(grads):
    if sparse:
      grad = tf.IndexedSlices(tf.constant(grad), tf.constant(INDICES[step]),
                              tf.constant([ROWS, DIM], tf.int64))
    optimizer.apply_gradients([(grad, var)])


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_sparse_lazy_adam_is_the_reference(flavor, dtype):
  init = np.random.default_rng(0).uniform(-1, 1, (ROWS, DIM)).astype(dtype)
  var = flavor.variable(init, "table")
  grads = sparse_grads(dtype, 1)
  apply_steps(flavor, flavor.module.LazyAdam(**ADAM), var, grads, sparse=True)
  want = (init, np.zeros_like(init), np.zeros_like(init))
  for step, (grad, indices) in enumerate(zip(grads, INDICES), start=1):
    want = reference.sparse_lazy_adam(*want, grad, indices, dtype, lr=ADAM["learning_rate"],
                                      beta1=ADAM["beta_1"], beta2=ADAM["beta_2"],
                                      epsilon=ADAM["epsilon"], beta1_power=ADAM["beta_1"]**step,
                                      beta2_power=ADAM["beta_2"]**step)
  np.testing.assert_allclose(np.asarray(var.numpy()), want[0], **TOLERANCE[dtype])
  np.testing.assert_array_equal(np.asarray(var.numpy())[[3, 5, 7]], init[[3, 5, 7]])  # lazy


@pytest.mark.parametrize("sparse", [True, False], ids=["sparse", "dense"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_clippy_adagrad_is_the_reference(flavor, dtype, sparse):
  init = np.random.default_rng(2).uniform(-1, 1, (ROWS, DIM)).astype(dtype)
  var = flavor.variable(init, "table")
  grads = sparse_grads(dtype, 3)
  if not sparse:
    grads = [
        np.random.default_rng(10 + i).uniform(-2, 2, (ROWS, DIM)).astype(dtype)
        for i in range(STEPS)
    ]
  optimizer = flavor.module.ClippyAdagrad(export_clipping_factors=True, **CLIPPY)
  apply_steps(flavor, optimizer, var, grads, sparse)
  options = {
      k: v for k, v in CLIPPY.items() if k not in ("learning_rate", "initial_accumulator_value")
  }
  want = (init, np.full_like(init, CLIPPY["initial_accumulator_value"]))
  for grad, indices in zip(grads, INDICES):
    if sparse:
      *want, scale = reference.sparse_clippy_adagrad(*want, grad, indices, dtype,
                                                     lr=CLIPPY["learning_rate"], **options)
    else:
      *want, scale = reference.clippy_adagrad(*want, grad, dtype, lr=CLIPPY["learning_rate"],
                                              **options)
  np.testing.assert_allclose(np.asarray(var.numpy()), want[0], **TOLERANCE[dtype])
  [factor] = optimizer.clipping_factors
  np.testing.assert_allclose(float(np.asarray(factor.numpy())), scale, **TOLERANCE[dtype])
  assert scale < 1.0  # clipping was active in the last step


def test_dense_lazy_adam_is_the_flavors_adam(flavor):
  rng = np.random.default_rng(4)
  init = rng.uniform(-1, 1, (ROWS, DIM)).astype(np.float32)
  grads = [rng.uniform(-2, 2, (ROWS, DIM)).astype(np.float32) for _ in range(STEPS)]
  results = []
  for optimizer in (flavor.module.LazyAdam(**ADAM), flavor.stock_adam(**ADAM)):
    var = flavor.variable(init, "table")
    apply_steps(flavor, optimizer, var, grads, sparse=False)
    results.append(np.asarray(var.numpy()))
  np.testing.assert_array_equal(results[0], results[1])  # bit for bit


def test_a_model_of_this_keras_compiles_and_fits(flavor):
  k = flavor.keras
  if not matrix_util.HAS_KERAS3:  # on TensorFlow 2.15 that Keras is tf.keras itself
    assert k.optimizers.Optimizer is tf.keras.optimizers.Optimizer
  k.utils.set_random_seed(0)
  ids = np.random.default_rng(5).integers(0, 20, (64, 2)).astype(np.int32)
  labels = np.random.default_rng(6).normal(size=(64, 1)).astype(np.float32)
  losses = {}
  for name in ("LazyAdam", "ClippyAdagrad"):
    model = k.Sequential([
        k.Input(shape=(2,), dtype="int32"),
        k.layers.Embedding(20, 4),
        k.layers.Flatten(),
        k.layers.Dense(1)
    ])
    model.compile(optimizer=getattr(flavor.module, name)(learning_rate=0.05), loss="mse")
    history = model.fit(ids, labels, batch_size=16, epochs=3, shuffle=False, verbose=0)
    losses[name] = history.history["loss"]
    assert losses[name][-1] < losses[name][0], losses


# ------------------------------------------------------------------ peers


@pytest.mark.skipif(matrix_util.HAS_KERAS3, reason="TF Addons ends at TensorFlow 2.15")
def test_legacy_lazy_adam_is_tf_addons_lazy_adam(tmp_path):
  import tensorflow_addons as tfa

  flavor = matrix_util.flavor("legacy")
  init = np.random.default_rng(7).uniform(-1, 1, (ROWS, DIM)).astype(np.float32)
  grads = sparse_grads(np.float32, 8)
  results = []
  for cls in (tfa.optimizers.LazyAdam, flavor.module.LazyAdam):
    var = tf.Variable(init)
    apply_steps(flavor, cls(**ADAM), var, grads, sparse=True)
    results.append(var.numpy())
  np.testing.assert_allclose(results[1], results[0], rtol=1e-6, atol=1e-6)
  # TF Addons' checkpoint restores into ours, which trains on as TF Addons would.
  var, theirs = tf.Variable(init), tfa.optimizers.LazyAdam(**ADAM)
  apply_steps(flavor, theirs, var, grads[:2], sparse=True)
  path = tf.train.Checkpoint(var=var, optimizer=theirs).write(str(tmp_path / "tfa"))
  restored, ours = tf.Variable(np.zeros_like(init)), flavor.module.LazyAdam(**ADAM)
  status = tf.train.Checkpoint(var=restored, optimizer=ours).read(path)
  for optimizer, variable in ((theirs, var), (ours, restored)):
    optimizer.apply_gradients([(tf.IndexedSlices(tf.constant(grads[2]), tf.constant(INDICES[2]),
                                                 tf.constant([ROWS, DIM], tf.int64)), variable)])
  status.assert_consumed()  # the slots too, restored when the first step created them
  np.testing.assert_allclose(restored.numpy(), var.numpy(), rtol=1e-6, atol=1e-6)
  for slot in ("m", "v"):
    np.testing.assert_allclose(
        ours.get_slot(restored, slot).numpy(),
        theirs.get_slot(var, slot).numpy(), rtol=1e-6, atol=1e-7)
  # Its serialized name loads into ours once tf_opt_ops is imported, even after TF Addons.
  result = matrix_util.run_python(
      """
import tensorflow as tf
import tensorflow_addons as tfa
config = tf.keras.optimizers.serialize(tfa.optimizers.LazyAdam(learning_rate=0.25))
assert config.get("registered_name", config["class_name"]) == "Addons>LazyAdam", config
import tf_opt_ops
old_format = {"class_name": "Addons>LazyAdam", "config": config["config"]}  # older files
for config in (config, old_format):
  loaded = tf.keras.optimizers.deserialize(config, use_legacy_optimizer=True)
  assert type(loaded) is tf_opt_ops.legacy.LazyAdam, type(loaded)
  assert loaded.get_config()["learning_rate"] == 0.25
print("LOADED_AS_OURS")
""", tmp_path)
  assert matrix_util.last_line(result, "LOADED_AS_OURS") == ""


def test_tf_keras_clippy_adagrad_is_tfrs(tmp_path):
  """TFRS' ClippyAdagrad (a Keras 2 optimizer: TF_USE_LEGACY_KERAS=1 from TensorFlow 2.16)."""
  env = {"TF_USE_LEGACY_KERAS": "1"} if matrix_util.HAS_KERAS3 else {}
  result = json.loads(
      matrix_util.last_line(matrix_util.run_script("tfrs_parity.py", [], tmp_path, env=env),
                            "PARITY"))
  assert result["runs"] == 6 and result["clipped_runs"] == 6, result
  assert result["weights"] < 1e-6 and result["state"] < 1e-5, result
  assert result["checkpoint"] < 1e-6, result
