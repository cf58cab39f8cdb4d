"""Each raw op (tf_opt_ops.ops) against the package's NumPy reference, on this TensorFlow."""

import numpy as np
import pytest
import tensorflow as tf

from tf_opt_ops import ops
from tf_opt_ops import reference

ROWS, DIM = 9, 4
INDICES = np.array([2, 5, 2, 0, 5, 5], np.int32)  # duplicates, summed by the kernels
TOLERANCE = {"float32": dict(rtol=2e-6, atol=2e-6), "float64": dict(rtol=1e-12, atol=1e-12)}
ADAM = dict(lr=0.05, beta_1=0.9, beta_2=0.999, epsilon=1e-7)
CLIPPY = dict(lr=0.5, epsilon=1e-7, variable_relative_threshold=0.1,
              accumulator_relative_threshold=1e-3, absolute_threshold=1e-4)


def values(shape, dtype, seed, low=-1.0, high=1.0):
  return np.random.default_rng(seed).uniform(low, high, shape).astype(dtype)


def as_variables(*arrays):
  return [tf.Variable(a) for a in arrays]


@pytest.mark.parametrize("mode", ["eager", "tf.function"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_sparse_lazy_adam(dtype, mode):
  var0, m0 = values((ROWS, DIM), dtype, 1), values((ROWS, DIM), dtype, 2)
  v0 = values((ROWS, DIM), dtype, 3, 0.0, 1.0)
  var, m, v = as_variables(var0, m0, v0)
  expected = (var0, m0, v0)

  def apply(grad, beta_1_power, beta_2_power):
    ops.sparse_lazy_adam(var, m, v, grad, INDICES, beta_1_power=beta_1_power,
                         beta_2_power=beta_2_power, **ADAM)

  apply = apply if mode == "eager" else tf.function(apply)  # traced once: tensor arguments
  for step in range(1, 4):
    grad = values((len(INDICES), DIM), dtype, 10 + step)
    powers = dict(beta_1_power=0.9**step, beta_2_power=0.999**step)
    apply(tf.constant(grad), *(tf.constant(p, dtype) for p in powers.values()))
    expected = reference.sparse_lazy_adam(*expected, grad, INDICES, dtype, lr=ADAM["lr"],
                                          beta1=ADAM["beta_1"], beta2=ADAM["beta_2"],
                                          epsilon=ADAM["epsilon"],
                                          beta1_power=powers["beta_1_power"],
                                          beta2_power=powers["beta_2_power"])
    for got, want in zip((var, m, v), expected):
      np.testing.assert_allclose(got.numpy(), want, **TOLERANCE[dtype])
  untouched = np.setdiff1d(np.arange(ROWS), INDICES)
  np.testing.assert_array_equal(var.numpy()[untouched], var0[untouched])  # lazy: rows kept
  assert not np.array_equal(var.numpy()[2], var0[2])


def clippy_steps(dtype, seed, grad_rows, make_apply, reference_step):
  """Three steps of `make_apply(var, accum)(grad)` (the op; returns the scale) against
  `reference_step(var, accum, grad)` (NumPy; returns them and the scale), from tables drawn
  with `seed` and `seed + 1`. Returns the initial table, the table and the scales."""
  var0 = values((ROWS, DIM), dtype, seed)
  accum0 = values((ROWS, DIM), dtype, seed + 1, 0.1, 1.0)
  var, accum = as_variables(var0, accum0)
  expected = (var0, accum0)
  apply = make_apply(var, accum)
  scales = []
  for step in range(1, 4):
    grad = values((grad_rows, DIM), dtype, 5 * seed + step, -3.0, 3.0)
    scale = apply(grad)
    *expected, want_scale = reference_step(*expected, grad)
    np.testing.assert_allclose(var.numpy(), expected[0], **TOLERANCE[dtype])
    np.testing.assert_allclose(accum.numpy(), expected[1], **TOLERANCE[dtype])
    np.testing.assert_allclose(scale.numpy(), want_scale, **TOLERANCE[dtype])
    assert scale.dtype == (tf.float64 if dtype == "float64" else tf.float32)
    scales.append(float(scale.numpy()))
  return var0, var, scales


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_sparse_clippy_adagrad(dtype):

  def make_apply(var, accum):
    return lambda grad: ops.sparse_clippy_adagrad(var, accum, grad, INDICES, **CLIPPY)

  def reference_step(var, accum, grad):
    return reference.sparse_clippy_adagrad(var, accum, grad, INDICES, dtype, **CLIPPY)

  var0, var, scales = clippy_steps(dtype, 4, len(INDICES), make_apply, reference_step)
  assert min(scales) < 1.0  # clipping was active
  untouched = np.setdiff1d(np.arange(ROWS), INDICES)
  np.testing.assert_array_equal(var.numpy()[untouched], var0[untouched])


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_dense_clippy_adagrad(dtype):

  def make_apply(var, accum):
    step = tf.function(lambda grad: ops.clippy_adagrad(var, accum, grad, **CLIPPY))
    return lambda grad: step(tf.constant(grad))

  clippy_steps(dtype, 6, ROWS, make_apply,
               lambda var, accum, grad: reference.clippy_adagrad(var, accum, grad, dtype, **CLIPPY))


@pytest.mark.parametrize("op", ["lazy_adam", "clippy_adagrad"])
def test_bad_index_names_it_and_writes_nothing(op):
  var0 = values((ROWS, DIM), "float32", 8)
  slots0 = [values((ROWS, DIM), "float32", 9 + i, 0.1, 1.0) for i in range(2)]
  variables = as_variables(var0, *slots0)
  indices = np.array([1, ROWS + 3, 4], np.int32)
  grad = np.ones((3, DIM), np.float32)
  with pytest.raises(tf.errors.InvalidArgumentError,
                     match=rf"indices\[1\] = {ROWS + 3} is not in \[0, {ROWS}\)"):
    if op == "lazy_adam":
      ops.sparse_lazy_adam(*variables, grad, indices, beta_1_power=0.9, beta_2_power=0.999)
    else:
      ops.sparse_clippy_adagrad(variables[0], variables[1], grad, indices)
  for got, want in zip(variables, (var0, *slots0)):
    np.testing.assert_array_equal(got.numpy(), want)  # validate before write


def test_ops_are_registered_under_the_library_prefix():
  registered = {op for op in ops.OP_NAMES}
  assert registered == {
      "TfOptOps>ResourceSparseApplyLazyAdam", "TfOptOps>ResourceApplyClippyAdagrad",
      "TfOptOps>ResourceSparseApplyClippyAdagrad", "TfOptOps>ResourceSparseApplyLazyAdamV2",
      "TfOptOps>ResourceApplyClippyAdagradV2", "TfOptOps>ResourceSparseApplyClippyAdagradV2",
      "TfOptOps>ResourceSparseApplyRowwiseAdagrad", "TfOptOps>ResourceSparseApplyLazyMovingAverage",
      "TfOptOps>ResourceSparseApplyLazyAdamW", "TfOptOps>ResourceSparseApplyLazyAdamWV2",
      "TfOptOps>ResourceSparseApplyClippyAdagradW", "TfOptOps>ResourceSparseApplyClippyAdagradWV2",
      "TfOptOps>ResourceSparseAccumulateRows", "TfOptOps>ResourceSparseTakeWindowGradient",
      "TfOptOps>ResourceSparseApplyLazyAdamAveraged",
      "TfOptOps>ResourceSparseApplyLazyAdamWAveraged", "TfOptOps>ResourceSparseApplyLazyAdamWindow",
      "TfOptOps>ResourceSparseApplyLazyAdamWWindow",
      "TfOptOps>ResourceSparseApplyLazyAdamWindowAveraged",
      "TfOptOps>ResourceSparseApplyLazyAdamWWindowAveraged",
      "TfOptOps>ResourceSparseApplyClippyAdagradWindow",
      "TfOptOps>ResourceSparseApplyClippyAdagradWWindow",
      "TfOptOps>ResourceSparseApplyClippyAdagradAveraged",
      "TfOptOps>ResourceSparseApplyClippyAdagradWAveraged"
  } | {
      f"TfOptOps>ResourceSparseApply{op}Scaled"
      for op in ("LazyAdam", "LazyAdamV2", "LazyAdamW", "LazyAdamWV2", "LazyAdamAveraged",
                 "LazyAdamWAveraged", "ClippyAdagrad", "ClippyAdagradV2", "ClippyAdagradW",
                 "ClippyAdagradWV2", "ClippyAdagradAveraged", "ClippyAdagradWAveraged")
  }

  @tf.function
  def step(var, m, v):
    ops.sparse_lazy_adam(var, m, v, tf.ones((1, 2)), tf.constant([1]), beta_1_power=0.9,
                         beta_2_power=0.999)

  graph = step.get_concrete_function(*as_variables(*(np.zeros((3, 2), np.float32),) * 3)).graph
  assert "TfOptOps>ResourceSparseApplyLazyAdam" in {op.type for op in graph.get_operations()}


def _bfloat16_variable(bits):
  return tf.Variable(tf.constant(bits.view(tf.bfloat16.as_numpy_dtype)))


def test_light_state_bit_for_bit_on_this_tensorflow():
  # The V2 ops (light state) as the reference computes them, on every supported TensorFlow:
  # bfloat16 m and a row-wise v, stochastically rounded; a bfloat16 Clippy accumulator.
  rng = np.random.default_rng(4)
  var = reference.random_values(rng, (ROWS, DIM), "float32")
  m = reference.random_values(rng, (ROWS, DIM), "bfloat16", -0.01, 0.01)
  v = reference.random_values(rng, (ROWS,), "bfloat16", 0, 1e-4)
  grad = reference.random_values(rng, (len(INDICES), DIM), "float32", -1e-2, 1e-2)
  light = dict(rowwise_second_moment=True, stochastic_rounding=True, seed=11, step=3)
  want = reference.sparse_lazy_adam(var, m, v, grad, INDICES, "float32", lr=0.05, beta1=0.9,
                                    beta2=0.999, epsilon=1e-7, beta1_power=0.9**3,
                                    beta2_power=0.999**3, slot_dtype="bfloat16", **light)
  tv, tm, tvv = tf.Variable(var), _bfloat16_variable(m), _bfloat16_variable(v)
  ops.sparse_lazy_adam(tv, tm, tvv, grad, INDICES, beta_1_power=0.9**3, beta_2_power=0.999**3,
                       slot_dtype=tf.bfloat16, **ADAM, **light)
  for got, expected in zip((tv.numpy(), tm.numpy().view(np.uint16), tvv.numpy().view(np.uint16)),
                           want):
    np.testing.assert_array_equal(got.view(np.uint8), np.asarray(expected).view(np.uint8))

  accum = reference.random_values(rng, (ROWS, DIM), "bfloat16", 0, 0.1)
  want_var, want_accum, want_scale = reference.sparse_clippy_adagrad(var, accum, grad, INDICES,
                                                                     "float32",
                                                                     accumulator_dtype="bfloat16",
                                                                     stochastic_rounding=True,
                                                                     seed=11, step=3, **CLIPPY)
  tv, ta = tf.Variable(var), _bfloat16_variable(accum)
  scale = ops.sparse_clippy_adagrad(tv, ta, grad, INDICES, accumulator_dtype=tf.bfloat16,
                                    stochastic_rounding=True, seed=11, step=3, **CLIPPY)
  np.testing.assert_array_equal(tv.numpy().view(np.uint8), want_var.view(np.uint8))
  np.testing.assert_array_equal(ta.numpy().view(np.uint16), want_accum)
  assert float(scale) == float(want_scale)
