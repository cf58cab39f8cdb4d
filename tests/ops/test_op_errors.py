"""Every bad input fails with InvalidArgumentError naming the problem, and leaves
every variable bit-identical. Why: see docs/design.md, "Invariants"."""

import re

import numpy as np
import pytest
import tensorflow as tf

from tf_opt_ops import ops

ROWS, DIM = 6, 4


def state(n=3):
  rng = np.random.default_rng(0)
  return [tf.Variable(rng.uniform(0.1, 1, (ROWS, DIM)).astype(np.float32)) for _ in range(n)]


def snapshot(variables):
  return [v.numpy().copy() for v in variables]


def assert_unchanged(before, variables):
  for b, v in zip(before, variables):
    np.testing.assert_array_equal(b.view(np.uint32), v.numpy().view(np.uint32))


def lazy_adam(var, m, v, grad, indices, **kwargs):
  hyper = dict(beta_1_power=0.9, beta_2_power=0.999)
  hyper.update(kwargs)
  return ops.sparse_lazy_adam(var, m, v, grad, indices, **hyper)


def sparse_clippy(var, accum, _unused, grad, indices, **kwargs):
  return ops.sparse_clippy_adagrad(var, accum, grad, indices, **kwargs)


SPARSE_OPS = {"lazy_adam": lazy_adam, "sparse_clippy": sparse_clippy}
GOOD_GRAD = np.ones((3, DIM), np.float32)

BAD_SPARSE_INPUTS = [
    # (case, grad, indices, message fragment)
    ("index past the end", GOOD_GRAD, [0, 2, ROWS], f"indices[2] = {ROWS} is not in [0, {ROWS})"),
    ("negative index", GOOD_GRAD, [1, -1, 3], "indices[1] = -1 is not in [0, 6)"),
    ("grad rows vs indices", np.ones(
        (2, DIM), np.float32), [0, 1,
                                2], "grad must have one row per index: grad [2,4] vs indices [3]"),
    ("grad row shape", np.ones(
        (3, DIM + 1),
        np.float32), [0, 1,
                      2], "grad rows must have the shape of var rows: grad [3,5] vs var [6,4]"),
    ("grad rank", np.ones(
        (3, DIM, 1),
        np.float32), [0, 1,
                      2], "grad rows must have the shape of var rows: grad [3,4,1] vs var [6,4]"),
    ("indices not a vector", GOOD_GRAD, [[0, 1, 2]], "indices must be a vector, got shape [1,3]"),
]


@pytest.mark.parametrize("op_name", SPARSE_OPS)
@pytest.mark.parametrize("case,grad,indices,message", BAD_SPARSE_INPUTS,
                         ids=[c[0] for c in BAD_SPARSE_INPUTS])
def test_bad_sparse_input_is_rejected_before_any_write(op_name, case, grad, indices, message):
  del case
  variables = state()
  before = snapshot(variables)
  # use_standard_accumulator_update writes the accumulator in Clippy's first
  # pass: validation must come before it too.
  extra = {"use_standard_accumulator_update": True} if op_name == "sparse_clippy" else {}
  with pytest.raises(tf.errors.InvalidArgumentError, match=re.escape(message)):
    SPARSE_OPS[op_name](*variables, grad, tf.constant(indices), **extra)
  assert_unchanged(before, variables)


def test_out_of_range_index_is_rejected_in_tf_function_too():
  variables = state()
  before = snapshot(variables)
  step = tf.function(lambda i: lazy_adam(*variables, GOOD_GRAD, i) and None)
  with pytest.raises(tf.errors.InvalidArgumentError, match="is not in"):
    step(tf.constant([0, 1, 99]))
  assert_unchanged(before, variables)


def test_slot_shape_must_match_var():
  var, m, _ = state()
  v = tf.Variable(tf.zeros((ROWS, DIM + 1)))
  before = snapshot((var, m, v))
  with pytest.raises(tf.errors.InvalidArgumentError,
                     match=r"v must have the shape of var: v \[6,5\] vs var \[6,4\]"):
    lazy_adam(var, m, v, GOOD_GRAD, [0, 1, 2])
  with pytest.raises(tf.errors.InvalidArgumentError,
                     match=r"accum must have the shape of var: accum \[6,5\] vs var \[6,4\]"):
    ops.clippy_adagrad(var, v, np.ones((ROWS, DIM), np.float32))
  assert_unchanged(before, (var, m, v))


@pytest.mark.parametrize("hyper", ["lr", "beta_1", "beta_2", "epsilon", "beta_1_power"])
def test_non_scalar_hyperparameter(hyper):
  variables = state()
  before = snapshot(variables)
  op_input = {"beta_1": "beta1", "beta_2": "beta2", "beta_1_power": "beta1_power"}.get(hyper, hyper)
  with pytest.raises(tf.errors.InvalidArgumentError,
                     match=rf"{op_input} must be a scalar, got shape \[2\]"):
    lazy_adam(*variables, GOOD_GRAD, [0, 1, 2], **{hyper: tf.constant([0.1, 0.2])})
  assert_unchanged(before, variables)


@pytest.mark.parametrize("hyper", [
    "lr", "epsilon", "variable_relative_threshold", "accumulator_relative_threshold",
    "absolute_threshold"
])
def test_non_scalar_clippy_hyperparameter(hyper):
  var, accum = state(2)
  before = snapshot((var, accum))
  with pytest.raises(tf.errors.InvalidArgumentError, match=rf"{hyper} must be a scalar"):
    ops.clippy_adagrad(var, accum, np.ones((ROWS, DIM), np.float32),
                       **{hyper: tf.constant([0.1, 0.2])})
  assert_unchanged(before, (var, accum))


def test_dense_grad_shape_must_match_var():
  var, accum = state(2)
  before = snapshot((var, accum))
  with pytest.raises(tf.errors.InvalidArgumentError,
                     match=r"grad must have the shape of var: grad \[6,3\] vs var \[6,4\]"):
    ops.clippy_adagrad(var, accum, np.ones((ROWS, DIM - 1), np.float32))
  assert_unchanged(before, (var, accum))


def test_scalar_variable_is_rejected():
  var, m, v = (tf.Variable(1.0) for _ in range(3))
  with pytest.raises(tf.errors.InvalidArgumentError, match="var must be at least 1-D"):
    lazy_adam(var, m, v, np.ones((1,), np.float32), [0])
  assert var.numpy() == 1.0


def test_uninitialized_variable():
  _, m, v = state()
  before = snapshot((m, v))
  handle = tf.raw_ops.VarHandleOp(dtype=tf.float32, shape=[ROWS, DIM],
                                  shared_name="tf_opt_ops_never_initialized")
  with pytest.raises(tf.errors.InvalidArgumentError,
                     match="var is an uninitialized or deleted variable"):
    lazy_adam(handle, m, v, GOOD_GRAD, [0, 1, 2])
  with pytest.raises(tf.errors.InvalidArgumentError, match="accum is an uninitialized"):
    ops.sparse_clippy_adagrad(m, handle, GOOD_GRAD, [0, 1, 2])
  assert_unchanged(before, (m, v))


def test_uninitialized_variable_after_a_failed_xla_call():
  # The failed compiled call leaves the variable's resource behind with no
  # dtype: each later call, eager or in a graph, still says what is wrong
  # (uninitialized), not that its dtype differs from the gradient's.
  _, m, v = state()
  before = snapshot((m, v))
  handle = tf.raw_ops.VarHandleOp(dtype=tf.float32, shape=[ROWS, DIM],
                                  shared_name="tf_opt_ops_failed_xla_call")

  @tf.function(jit_compile=True)
  def compiled():
    lazy_adam(handle, m, v, GOOD_GRAD, [0, 1, 2])

  with pytest.raises(tf.errors.InvalidArgumentError,
                     match="var is an uninitialized or deleted variable"):
    compiled()

  def eager():
    lazy_adam(handle, m, v, GOOD_GRAD, [0, 1, 2])

  for call in (eager, tf.function(eager)):
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=re.escape("var is uninitialized (input 0 of")) as error:
      call()
    assert "dtype" not in str(error.value)
  with pytest.raises(tf.errors.InvalidArgumentError,
                     match=re.escape("accum is uninitialized (input 1 of")) as error:
    ops.sparse_clippy_adagrad(m, handle, GOOD_GRAD, [0, 1, 2])
  assert "dtype" not in str(error.value)
  assert_unchanged(before, (m, v))


def test_both_clippy_accumulator_flags():
  var, accum = state(2)
  before = snapshot((var, accum))
  with pytest.raises(tf.errors.InvalidArgumentError,
                     match="clip_accumulator_update and use_standard_accumulator_update"):
    ops.sparse_clippy_adagrad(var, accum, GOOD_GRAD, [0, 1, 2], clip_accumulator_update=True,
                              use_standard_accumulator_update=True)
  assert_unchanged(before, (var, accum))


def test_shape_functions_reject_at_graph_construction():
  var, m, v = state()

  @tf.function(input_signature=[tf.TensorSpec([3, DIM + 1]), tf.TensorSpec([3], tf.int32)])
  def bad_row_shape(grad, indices):
    lazy_adam(var, m, v, grad, indices)

  with pytest.raises(ValueError, match="Dimension 1 in both shapes must be equal"):
    bad_row_shape.get_concrete_function()

  @tf.function(input_signature=[tf.TensorSpec([2, DIM]), tf.TensorSpec([3], tf.int32)])
  def bad_row_count(grad, indices):
    ops.sparse_clippy_adagrad(var, m, grad, indices)

  with pytest.raises(ValueError, match="Dimensions must be equal"):
    bad_row_count.get_concrete_function()

  @tf.function(input_signature=[tf.TensorSpec([2], tf.float32)])
  def vector_lr(lr):
    lazy_adam(var, m, v, GOOD_GRAD, [0, 1, 2], lr=lr)

  with pytest.raises(ValueError, match="must be rank 0"):
    vector_lr.get_concrete_function()


def test_optimizer_variable_errors_name_the_gradient_and_the_row_wise_slot():
  # The optimizers' words for these errors; the moving average op has its own
  # (test_moving_average_op.py).
  var, m, v = state()
  before = snapshot((var, m, v))
  m64 = tf.Variable(tf.zeros((ROWS, DIM), tf.float64))
  with pytest.raises(
      tf.errors.InvalidArgumentError,
      match=re.escape("m has dtype double but grad has dtype float: the variable, "
                      "its slots and the gradient must share one dtype")):
    lazy_adam(var, m64, v, GOOD_GRAD, [0, 1, 2])
  with pytest.raises(
      tf.errors.InvalidArgumentError,
      match=re.escape("v holds one value per row of var (rowwise_second_moment=True), "
                      f"so its shape must be [{ROWS}]: v [{ROWS},{DIM}] vs var")):
    lazy_adam(var, m, v, GOOD_GRAD, [0, 1, 2], rowwise_second_moment=True)
  assert_unchanged(before, (var, m, v))
