"""Lazy Adam with its moving average in one pass (ops ResourceSparseApplyLazyAdamAveraged and
...WAveraged) against the two ops it fuses.

The fused op must give the bits of ResourceSparseApplyLazyMovingAverage followed by
ResourceSparseApplyLazyAdam (...W with weight decay) on every table dtype, both index dtypes,
eager and in tf.function, with duplicate indices and rows that missed thousands of different
step counts; and a bad index must fail it with nothing written. Why: see docs/optimizers.md,
"Keras features at sparse cost".
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

NAMES = ("var", "m", "v", "average", "synced")


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


@fused_op_cases
def test_fused_op_is_the_two_ops_bit_for_bit(dtype, index_dtype, mode, decays):
  rng = np.random.default_rng(7)
  fused, two_ops = _state(rng, ROWS, DIM, dtype, np.zeros(ROWS, np.int32))
  run_fused, run_two_ops = (f if mode == "eager" else tf.function(f) for f in (_fused, _two_ops))
  run_steps(rng, NAMES, fused, two_ops, run_fused, run_two_ops, dtype, index_dtype,
            WEIGHT_DECAY if decays else None)


@pytest.mark.parametrize("dtype", reference.DTYPES)
def test_rows_that_missed_many_different_counts_are_the_two_ops_bit_for_bit(dtype):
  rng = np.random.default_rng(5)
  rows, dim, count, synced0, indices, grad = many_counts_step(rng, dtype)
  fused, two_ops = _state(rng, rows, dim, dtype, synced0)
  _fused(fused, grad, indices, count, 3, None)
  _two_ops(two_ops, grad, indices, count, 3, None)
  assert_same_bits(NAMES, fused, two_ops, dtype)
  np.testing.assert_array_equal(fused[4].numpy()[indices.numpy()], count)


@pytest.mark.parametrize("what", BAD_INPUTS)
def test_a_bad_input_is_named_and_nothing_is_written(what):
  state, _ = _state(np.random.default_rng(3), ROWS, DIM, "float32", np.arange(ROWS, dtype=np.int32))
  assert_bad_input_rejected(what, NAMES, state, _fused)


def test_light_slots_refuse_the_moving_average():
  var = tf.Variable(tf.zeros((ROWS, DIM)))
  m, v = (tf.Variable(tf.zeros((ROWS, DIM), tf.bfloat16)) for _ in range(2))
  average, synced = tf.Variable(tf.zeros((ROWS, DIM))), tf.Variable(tf.zeros([ROWS], tf.int32))
  with pytest.raises(ValueError, match="moving_average= needs slots of var's dtype"):
    ops.sparse_lazy_adam(var, m, v, tf.ones((1, DIM)), [0], beta_1_power=0.9, beta_2_power=0.999,
                         moving_average=(average, synced, 1, EMA_MOMENTUM))
