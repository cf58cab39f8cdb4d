"""Lazy Adam with its moving average in one pass (ops ResourceSparseApplyLazyAdamAveraged and
...WAveraged) against the two ops it fuses.

The fused op must give the bits of ResourceSparseApplyLazyMovingAverage followed by
ResourceSparseApplyLazyAdam (...W with weight decay) on every table dtype, both index dtypes,
eager and in tf.function, with duplicate indices and rows that missed thousands of different
step counts; and a bad index must fail it with nothing written. Why: see docs/optimizers.md,
"Keras features at sparse cost".
"""

import re

import numpy as np
import pytest
import tensorflow as tf

from tf_opt_ops import ops
from tf_opt_ops import reference

from averaged_cases import BAD_AVERAGE_VARIABLES
from averaged_cases import break_average_variable
from common import fused_op_cases
from common import stored_tensor
from common import stored_values

ROWS, DIM = 13, 37
# Steps of a table: row 3 repeats within a step, rows 6 and 8 are never named, row 11 misses
# several steps between its updates.
STEP_INDICES = [[3, 0, 3, 7, 3], [11, 5, 0], [7, 7], [2, 9, 4, 9, 1, 12], [3], [11, 3, 11]]
EMA_MOMENTUM = 0.8
WEIGHT_DECAY = 0.05


def _state(rng, rows, dim, dtype, synced0):
  """Two copies of (var, m, v, average, synced): one for the fused op, one for the two ops."""
  values = [reference.random_values(rng, (rows, dim), dtype) for _ in range(2)]
  values.append(np.abs(reference.random_values(rng, (rows, dim), dtype)))  # v >= 0
  values.append(reference.random_values(rng, (rows, dim), dtype))

  def variables():
    return [tf.Variable(stored_tensor(x, dtype)) for x in values] + [tf.Variable(synced0)]

  return variables(), variables()


def _hypers(step):
  beta_1, beta_2 = 0.9, 0.999
  return dict(beta_1_power=beta_1**step, beta_2_power=beta_2**step, lr=0.01, beta_1=beta_1,
              beta_2=beta_2, epsilon=1e-7)


def _fused(state, grad, indices, count, step, weight_decay):
  var, m, v, average, synced = state
  ops.sparse_lazy_adam(var, m, v, grad, indices, weight_decay=weight_decay,
                       moving_average=(average, synced, count, EMA_MOMENTUM), **_hypers(step))


def _two_ops(state, grad, indices, count, step, weight_decay):
  var, m, v, average, synced = state
  ops.sparse_moving_average(average, synced, var, indices, count=count, ema_momentum=EMA_MOMENTUM)
  ops.sparse_lazy_adam(var, m, v, grad, indices, weight_decay=weight_decay, **_hypers(step))


def _assert_same_bits(fused, two_ops, dtype, message=""):
  for name, ours, theirs in zip(("var", "m", "v", "average", "synced"), fused, two_ops):
    kind = "int32" if name == "synced" else dtype
    np.testing.assert_array_equal(stored_values(ours, kind), stored_values(theirs, kind),
                                  err_msg=f"{name} {message}")


@fused_op_cases
def test_fused_op_is_the_two_ops_bit_for_bit(dtype, index_dtype, mode, decays):
  rng = np.random.default_rng(7)
  fused, two_ops = _state(rng, ROWS, DIM, dtype, np.zeros(ROWS, np.int32))
  weight_decay = WEIGHT_DECAY if decays else None
  run_fused, run_two_ops = (f if mode == "eager" else tf.function(f) for f in (_fused, _two_ops))
  untouched = [x.numpy().copy() for x in fused]
  for count, step_indices in enumerate(STEP_INDICES):
    indices = tf.constant(np.array(step_indices, index_dtype))
    grad = tf.constant(
        stored_tensor(reference.random_values(rng, (len(step_indices), DIM), dtype), dtype))
    run_fused(fused, grad, indices, tf.constant(count), count + 1, weight_decay)
    run_two_ops(two_ops, grad, indices, tf.constant(count), count + 1, weight_decay)
    _assert_same_bits(fused, two_ops, dtype, f"step {count}")
  for before, after in zip(untouched, fused):
    np.testing.assert_array_equal(after.numpy()[[6, 8]], before[[6, 8]])


@pytest.mark.parametrize("dtype", reference.DTYPES)
def test_rows_that_missed_many_different_counts_are_the_two_ops_bit_for_bit(dtype):
  """A table large enough to run on the thread pool, its rows having missed thousands of
  different step counts (many sharing a slot of the per-thread decay cache), indices with
  duplicates."""
  rng = np.random.default_rng(5)
  rows, dim, count = 4096, 64, 70_000
  synced0 = (count - rng.integers(0, 66_000, rows)).astype(np.int32)
  fused, two_ops = _state(rng, rows, dim, dtype, synced0)
  indices = np.concatenate([rng.permutation(rows)[:3000], rng.integers(0, rows, 500)])
  indices = tf.constant(indices.astype(np.int64))
  grad = tf.constant(stored_tensor(reference.random_values(rng, (3500, dim), dtype), dtype))
  _fused(fused, grad, indices, count, 3, None)
  _two_ops(two_ops, grad, indices, count, 3, None)
  assert len(np.unique(synced0[indices.numpy()])) > 2000
  _assert_same_bits(fused, two_ops, dtype)
  np.testing.assert_array_equal(fused[4].numpy()[indices.numpy()], count)


def test_bad_index_names_it_and_writes_nothing():
  rng = np.random.default_rng(3)
  state, _ = _state(rng, ROWS, DIM, "float32", np.arange(ROWS, dtype=np.int32))
  before = [x.numpy().copy() for x in state]
  with pytest.raises(tf.errors.InvalidArgumentError,
                     match=rf"indices\[1\] = {ROWS + 3} is not in \[0, {ROWS}\)"):
    _fused(state, tf.ones((3, DIM)), tf.constant([1, ROWS + 3, 4]), 20, 1, None)
  for name, x, b in zip(("var", "m", "v", "average", "synced"), state, before):
    np.testing.assert_array_equal(x.numpy(), b, err_msg=name)


@pytest.mark.parametrize("what", BAD_AVERAGE_VARIABLES)
def test_a_bad_variable_is_named_in_the_op_inputs_words_and_nothing_is_written(what):
  rng = np.random.default_rng(3)
  state, _ = _state(rng, ROWS, DIM, "float32", np.arange(ROWS, dtype=np.int32))
  message = break_average_variable(what, state)
  before = [x.numpy().copy() for x in state]
  with pytest.raises(tf.errors.InvalidArgumentError, match=re.escape(message)):
    _fused(state, tf.ones((2, DIM)), tf.constant([1, 2]), 20, 1, None)
  for x, b in zip(state, before):
    np.testing.assert_array_equal(x.numpy(), b)


def test_light_slots_refuse_the_moving_average():
  var = tf.Variable(tf.zeros((ROWS, DIM)))
  m, v = (tf.Variable(tf.zeros((ROWS, DIM), tf.bfloat16)) for _ in range(2))
  average, synced = tf.Variable(tf.zeros((ROWS, DIM))), tf.Variable(tf.zeros([ROWS], tf.int32))
  with pytest.raises(ValueError, match="moving_average= needs slots of var's dtype"):
    ops.sparse_lazy_adam(var, m, v, tf.ones((1, DIM)), [0], beta_1_power=0.9, beta_2_power=0.999,
                         moving_average=(average, synced, 1, EMA_MOMENTUM))
