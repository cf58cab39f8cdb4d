"""A 0-D variable is a variable: Clippy Adagrad trains scalars, as TFRS' does.

The dense Clippy op takes 0-D var/accum/grad (the sparse ops keep needing
>= 1-D, as TensorFlow's own sparse ops: indices name rows). Each optimizer
flavor trains a scalar variable for a few steps and lands where the NumPy
reference does; the tf_keras flavor is also held to TensorFlow Recommenders'
ClippyAdagrad itself (in a subprocess: TFRS needs TF_USE_LEGACY_KERAS=1).
"""

import json
import os
import textwrap

import numpy as np
import pytest
import tensorflow as tf

from tf_opt_ops import ops
from tf_opt_ops import reference

import common

ROOT = common.ROOT

# Clips (0 < scale < 1) in the first steps: lr is large against |var| * 0.1.
HYPER = dict(lr=0.5, epsilon=1e-7, variable_relative_threshold=0.1,
             accumulator_relative_threshold=0.01, absolute_threshold=1e-3)
FLAGS = [(False, False), (True, False), (False, True)]
GRADS = (0.7, -1.3, 0.25, 2.0, -0.4)


def _tf_value(x, dtype):
  if dtype == "bfloat16":
    return tf.cast(tf.constant(reference.load(x, dtype), tf.float32), tf.bfloat16)
  return tf.constant(x)


def _stored(t, dtype):
  return reference.store(
      tf.cast(t, tf.float64 if dtype == "float64" else tf.float32).numpy(), dtype)


@pytest.mark.parametrize("flags", FLAGS, ids=["plain", "clip_accum", "standard_accum"])
@pytest.mark.parametrize("dtype", reference.DTYPES)
def test_dense_op_trains_a_scalar_like_the_reference(dtype, flags):
  clip, standard = flags
  hyper = dict(HYPER, clip_accumulator_update=clip, use_standard_accumulator_update=standard)
  var0 = reference.store(np.array(1.5), dtype)
  accum0 = reference.store(np.array(0.1), dtype)
  var, accum = tf.Variable(_tf_value(var0, dtype)), tf.Variable(_tf_value(accum0, dtype))
  want_var, want_accum = var0, accum0
  scales = []
  for g in GRADS:
    grad = reference.store(np.array(g), dtype)
    scale = ops.clippy_adagrad(var, accum, _tf_value(grad, dtype), **hyper)
    want_var, want_accum, want_scale = reference.clippy_adagrad(want_var, want_accum, grad, dtype,
                                                                **hyper)
    assert var.shape == () and accum.shape == ()
    np.testing.assert_array_equal(_stored(var, dtype), want_var)
    np.testing.assert_array_equal(_stored(accum, dtype), want_accum)
    np.testing.assert_allclose(float(scale), float(want_scale), rtol=0)
    scales.append(float(scale))
  assert min(scales) < 1, "the case should clip"


def test_dense_op_scalar_in_tf_function():
  var, accum = tf.Variable(1.5), tf.Variable(0.1)
  step = tf.function(lambda g: ops.clippy_adagrad(var, accum, g, **HYPER))
  scale = step(tf.constant(0.7))
  want_var, want_accum, want_scale = reference.clippy_adagrad(np.float32(1.5), np.float32(0.1),
                                                              np.float32(0.7), "float32",
                                                              clip_accumulator_update=False,
                                                              use_standard_accumulator_update=False,
                                                              **HYPER)
  assert float(var.numpy()) == float(want_var) and float(accum.numpy()) == float(want_accum)
  assert float(scale) == float(want_scale) and float(scale) < 1


@pytest.mark.parametrize("op_name", ["lazy_adam", "sparse_clippy"])
def test_sparse_ops_still_need_rows(op_name):
  var, m, v = (tf.Variable(1.0) for _ in range(3))
  with pytest.raises(tf.errors.InvalidArgumentError,
                     match=r"var must be at least 1-D for a sparse update, got \[\]"):
    if op_name == "lazy_adam":
      ops.sparse_lazy_adam(var, m, v, np.ones((1,), np.float32), [0], beta_1_power=0.9,
                           beta_2_power=0.999)
    else:
      ops.sparse_clippy_adagrad(var, m, np.ones((1,), np.float32), [0])
  assert [x.numpy() for x in (var, m, v)] == [1.0, 1.0, 1.0]


# ------------------------------------------------------------------ flavors

FLAVOR_OPTIONS = dict(learning_rate=0.5, initial_accumulator_value=0.1,
                      variable_relative_threshold=0.1, accumulator_relative_threshold=0.01,
                      absolute_threshold=1e-3, epsilon=1e-7)


def _reference_run(var0, grads):
  """(var after each step) by the NumPy reference, from the flavor options."""
  var, accum = np.float32(var0), np.float32(FLAVOR_OPTIONS["initial_accumulator_value"])
  out = []
  for g in grads:
    var, accum, _ = reference.clippy_adagrad(
        var, accum, np.float32(g), "float32", lr=FLAVOR_OPTIONS["learning_rate"],
        epsilon=FLAVOR_OPTIONS["epsilon"],
        variable_relative_threshold=FLAVOR_OPTIONS["variable_relative_threshold"],
        accumulator_relative_threshold=FLAVOR_OPTIONS["accumulator_relative_threshold"],
        absolute_threshold=FLAVOR_OPTIONS["absolute_threshold"], clip_accumulator_update=False,
        use_standard_accumulator_update=False)
    out.append(float(var))
  return out


def _train(opt, var, read):
  out = []
  for g in GRADS:
    opt.apply_gradients([(tf.constant(g, tf.float32), var)])
    out.append(read(var))
  return out


def test_keras3_flavor_trains_a_scalar():
  import keras

  from tf_opt_ops import keras as flavor
  var = keras.Variable(1.5, dtype="float32")
  got = _train(flavor.ClippyAdagrad(**FLAVOR_OPTIONS), var, lambda v: float(v.numpy()))
  np.testing.assert_allclose(got, _reference_run(1.5, GRADS), rtol=1e-6)


def test_legacy_flavor_trains_a_scalar():
  from tf_opt_ops import legacy as flavor
  var = tf.Variable(1.5)
  got = _train(flavor.ClippyAdagrad(**FLAVOR_OPTIONS), var, lambda v: float(v.numpy()))
  np.testing.assert_allclose(got, _reference_run(1.5, GRADS), rtol=1e-6)


def test_tf_keras_flavor_trains_a_scalar():
  from tf_opt_ops import tf_keras as flavor
  var = tf.Variable(1.5)
  got = _train(flavor.ClippyAdagrad(**FLAVOR_OPTIONS), var, lambda v: float(v.numpy()))
  np.testing.assert_allclose(got, _reference_run(1.5, GRADS), rtol=1e-6)


# TFRS' ClippyAdagrad and ours on the same scalar, in a fresh process with
# TF_USE_LEGACY_KERAS=1; prints {"tfrs": [...], "ours": [...]}.
_TFRS_WORKER = textwrap.dedent("""
    import json, os, sys
    os.environ["TF_USE_LEGACY_KERAS"] = "1"
    sys.path.insert(0, {python_dir!r})
    import tensorflow as tf
    from tensorflow_recommenders.experimental import optimizers as tfrs_optimizers
    from tf_opt_ops import tf_keras as flavor
    out = {{}}
    for name, cls in (("tfrs", tfrs_optimizers.ClippyAdagrad), ("ours", flavor.ClippyAdagrad)):
      var = tf.Variable(1.5)
      opt = cls(**{options!r})
      values = []
      for g in {grads!r}:
        opt.apply_gradients([(tf.constant(g, tf.float32), var)])
        values.append(float(var.numpy()))
      out[name] = values
    print(json.dumps(out))
""")


@pytest.mark.slow
def test_tf_keras_flavor_matches_tfrs_on_a_scalar():
  script = _TFRS_WORKER.format(python_dir=os.path.join(ROOT, "python"), options=FLAVOR_OPTIONS,
                               grads=GRADS)
  proc = common.run_python(script, env={"TF_USE_LEGACY_KERAS": "1"}, timeout=300)
  got = json.loads(proc.stdout.strip().splitlines()[-1])
  assert len(got["tfrs"]) == len(GRADS)
  np.testing.assert_allclose(got["ours"], got["tfrs"], rtol=1e-6)
  np.testing.assert_allclose(got["ours"], _reference_run(1.5, GRADS), rtol=1e-6)
