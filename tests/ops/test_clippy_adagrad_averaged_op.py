"""Sparse Clippy Adagrad with its moving average kept in its update pass (ops
ResourceSparseApplyClippyAdagradAveraged and ...WAveraged) against the two ops it fuses.

The fused op must give the bits of ResourceSparseApplyLazyMovingAverage followed by
ResourceSparseApplyClippyAdagrad (...W with weight decay), scale included, on every table
dtype, both index dtypes, eager and in tf.function, with both accumulator-update flags,
duplicate indices and rows that missed thousands of different step counts; and a bad input
must fail it with nothing written. What it shares with lazy Adam's averaged op is in
averaged_cases.py. Why: see docs/optimizers.md, "Keras features at sparse cost".
"""

import numpy as np
import pytest
import tensorflow as tf

from tf_opt_ops import ops
from tf_opt_ops import reference

from averaged_cases import BAD_INPUTS
from averaged_cases import DIM
from averaged_cases import EMA_MOMENTUM
from averaged_cases import ROWS
from averaged_cases import WEIGHT_DECAY
from averaged_cases import assert_bad_input_rejected
from averaged_cases import assert_same_bits
from averaged_cases import many_counts_step
from averaged_cases import run_steps
from common import fused_op_cases
from common import stored_tensor
from window_cases import assert_rejected_with_nothing_written

NAMES = ("var", "accum", "average", "synced")
# A threshold small enough that the updates are clipped (scale < 1).
HYPERS = dict(lr=0.05, epsilon=1e-7, variable_relative_threshold=0.01,
              accumulator_relative_threshold=0.0, absolute_threshold=1e-4)
FLAGS = {
    "default": {},
    "clip-accumulator-update": dict(clip_accumulator_update=True),
    "standard-accumulator-update": dict(use_standard_accumulator_update=True),
}


def _state(rng, rows, dim, dtype, synced0):
  """Two copies of (var, accum, average, synced): one for the fused op, one for the two ops."""
  values = [
      reference.random_values(rng, (rows, dim), dtype),
      reference.random_values(rng, (rows, dim), dtype, 0.1, 1),  # accum > 0
      reference.random_values(rng, (rows, dim), dtype),
  ]

  def variables():
    return [tf.Variable(stored_tensor(x, dtype)) for x in values] + [tf.Variable(synced0)]

  return variables(), variables()


def _fused(state, grad, indices, count, step, weight_decay, **flags):
  del step  # Clippy has none
  var, accum, average, synced = state
  return ops.sparse_clippy_adagrad(var, accum, grad, indices, weight_decay=weight_decay,
                                   moving_average=(average, synced, count, EMA_MOMENTUM), **HYPERS,
                                   **flags)


def _two_ops(state, grad, indices, count, step, weight_decay, **flags):
  del step
  var, accum, average, synced = state
  ops.sparse_moving_average(average, synced, var, indices, count=count, ema_momentum=EMA_MOMENTUM)
  return ops.sparse_clippy_adagrad(var, accum, grad, indices, weight_decay=weight_decay, **HYPERS,
                                   **flags)


@pytest.mark.parametrize("flags", FLAGS)
@fused_op_cases
def test_fused_op_is_the_two_ops_bit_for_bit(dtype, index_dtype, mode, decays, flags):
  rng = np.random.default_rng(7)
  fused, two_ops = _state(rng, ROWS, DIM, dtype, np.zeros(ROWS, np.int32))

  def with_flags(f):
    run = lambda *args: f(*args, **FLAGS[flags])  # noqa: E731
    return run if mode == "eager" else tf.function(run)

  run_steps(rng, NAMES, fused, two_ops, with_flags(_fused), with_flags(_two_ops), dtype,
            index_dtype, WEIGHT_DECAY if decays else None)


@pytest.mark.parametrize("dtype", reference.DTYPES)
def test_rows_that_missed_many_different_counts_are_the_two_ops_bit_for_bit(dtype):
  rng = np.random.default_rng(5)
  rows, dim, count, synced0, indices, grad = many_counts_step(rng, dtype)
  fused, two_ops = _state(rng, rows, dim, dtype, synced0)
  scale = _fused(fused, grad, indices, count, 3, None)
  np.testing.assert_array_equal(scale.numpy(),
                                _two_ops(two_ops, grad, indices, count, 3, None).numpy())
  assert scale.numpy() < 1  # clipped
  assert_same_bits(NAMES, fused, two_ops, dtype)
  np.testing.assert_array_equal(fused[3].numpy()[indices.numpy()], count)


def test_no_indices_change_nothing_and_return_a_scale_of_one():
  rng = np.random.default_rng(3)
  state, _ = _state(rng, ROWS, DIM, "float32", np.arange(ROWS, dtype=np.int32))
  before = [x.numpy().copy() for x in state]
  scale = _fused(state, tf.zeros((0, DIM)), tf.zeros([0], tf.int32), 20, 1, None)
  assert scale.numpy() == 1
  for name, x, b in zip(NAMES, state, before):
    np.testing.assert_array_equal(x.numpy(), b, err_msg=name)


@pytest.mark.parametrize("what", BAD_INPUTS)
def test_a_bad_input_is_named_and_nothing_is_written(what):
  state, _ = _state(np.random.default_rng(3), ROWS, DIM, "float32", np.arange(ROWS, dtype=np.int32))
  assert_bad_input_rejected(what, NAMES, state, _fused)


def test_accum_of_another_dtype_is_named_and_nothing_is_written():
  state, _ = _state(np.random.default_rng(3), ROWS, DIM, "float32", np.arange(ROWS, dtype=np.int32))
  state[1] = tf.Variable(tf.ones((ROWS, DIM), tf.float64))
  # accumulator_dtype names var's: the op, not the wrapper, sees the mismatch.
  assert_rejected_with_nothing_written(
      NAMES, state,
      lambda: ops.sparse_clippy_adagrad(state[0], state[1], tf.ones(
          (2, DIM)), [1, 2], accumulator_dtype=tf.float32, moving_average=(state[2], state[
              3], 20, EMA_MOMENTUM), **HYPERS), "accum has dtype double but grad has dtype float")


@pytest.mark.parametrize("light",
                         [dict(accumulator_dtype=tf.bfloat16),
                          dict(stochastic_rounding=True)], ids=["bfloat16", "stochastic"])
def test_a_light_accumulator_refuses_the_moving_average(light):
  var = tf.Variable(tf.zeros((ROWS, DIM)))
  accum = tf.Variable(tf.ones((ROWS, DIM), light.get("accumulator_dtype", tf.float32)))
  average, synced = tf.Variable(tf.zeros((ROWS, DIM))), tf.Variable(tf.zeros([ROWS], tf.int32))
  with pytest.raises(ValueError, match="moving_average= needs an accumulator of var's dtype"):
    ops.sparse_clippy_adagrad(var, accum, tf.ones((1, DIM)), [0], **light,
                              moving_average=(average, synced, 1, EMA_MOMENTUM))


def test_a_window_with_the_moving_average_is_refused():
  var, accum, average = (tf.Variable(tf.ones((ROWS, DIM))) for _ in range(3))
  synced = tf.Variable(tf.zeros([ROWS], tf.int32))
  window = (tf.Variable(tf.zeros((ROWS, DIM))), tf.Variable(tf.zeros([ROWS],
                                                                     tf.int32)), tf.Variable(0), 2)
  with pytest.raises(ValueError, match="no op takes both window= and moving_average="):
    ops.sparse_clippy_adagrad(var, accum, tf.ones((1, DIM)), [0], window=window,
                              moving_average=(average, synced, 1, EMA_MOMENTUM))
