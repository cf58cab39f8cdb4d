"""A gradient accumulation window's apply step in one pass (ops
ResourceSparseApplyLazyAdamWindow and ...WWindow) against the two ops it fuses.

The fused op must give the bits of ResourceSparseTakeWindowGradient followed by
ResourceSparseApplyLazyAdam (...W with weight decay) on every table dtype, both index dtypes,
eager and in tf.function, over several windows of 2 and 3 micro-steps with duplicates within
and across micro-steps; it must clear the window's accumulator rows and count, leave the rows
no micro-step named alone, and reject a bad index, held id, count or steps with nothing
written. Why: see docs/optimizers.md, "Keras features at sparse cost". What the two files
share is in window_cases.py.
"""

import numpy as np
import pytest
import tensorflow as tf

from tf_opt_ops import ops
from tf_opt_ops import reference

from common import fused_op_cases
from common import stored_values
from window_cases import BAD_INPUTS
from window_cases import DIM
from window_cases import NEVER_NAMED
from window_cases import POOL_SIZE_IDS
from window_cases import POOL_SIZES
from window_cases import ROWS
from window_cases import WEIGHT_DECAY
from window_cases import WINDOW_NAMES
from window_cases import assert_rejected_with_nothing_written
from window_cases import assert_same_bits
from window_cases import assert_window_applied
from window_cases import bad_input
from window_cases import last_micro_steps
from window_cases import pool_micro_steps
from window_cases import two_states
from window_cases import window_of

NAMES = ("var", "m", "v") + WINDOW_NAMES


def _state(rng, rows, dim, dtype, index_dtype):
  """(var, m, v, accumulator, row_ids, row_count) twice: for the fused op and the two ops."""
  var, m = (reference.random_values(rng, (rows, dim), dtype) for _ in range(2))
  v = np.abs(reference.random_values(rng, (rows, dim), dtype))  # v >= 0
  return two_states(rng, [var, m, v], dtype, index_dtype)


def _hypers(step):
  beta_1, beta_2 = 0.9, 0.999
  return dict(beta_1_power=beta_1**step, beta_2_power=beta_2**step, lr=0.01, beta_1=beta_1,
              beta_2=beta_2, epsilon=1e-7)


def _fused(state, grad, indices, steps, step, weight_decay):
  var, m, v = state[:3]
  ops.sparse_lazy_adam(var, m, v, grad, indices, weight_decay=weight_decay,
                       window=(*window_of(state), steps), **_hypers(step))


def _two_ops(state, grad, indices, steps, step, weight_decay):
  var, m, v = state[:3]
  rows, average = ops.sparse_take_window_gradient(*window_of(state), indices, grad, steps)
  ops.sparse_lazy_adam(var, m, v, average, rows, weight_decay=weight_decay, **_hypers(step))


@fused_op_cases
def test_fused_op_is_the_two_ops_bit_for_bit(dtype, index_dtype, mode, decays):
  rng = np.random.default_rng(7)
  fused, two_ops = _state(rng, ROWS, DIM, dtype, index_dtype)
  weight_decay = WEIGHT_DECAY if decays else None
  run_fused, run_two_ops = (f if mode == "eager" else tf.function(f) for f in (_fused, _two_ops))
  untouched = [stored_values(x, dtype).copy() for x in fused[:3]]
  for step, window, grad, indices in last_micro_steps(rng, dtype, index_dtype, (fused, two_ops)):
    run_fused(fused, grad, indices, len(window), step, weight_decay)
    run_two_ops(two_ops, grad, indices, len(window), step, weight_decay)
    assert_same_bits(NAMES, fused, two_ops, dtype, f"window {step}")
    assert_window_applied(fused, dtype)
    named = sorted(set(sum(window, [])))
    assert not np.array_equal(stored_values(fused[0], dtype)[named], untouched[0][named])
  for name, before, after in zip(NAMES, untouched, fused):
    np.testing.assert_array_equal(
        stored_values(after, dtype)[NEVER_NAMED], before[NEVER_NAMED], err_msg=name)


@pytest.mark.parametrize("size", POOL_SIZES, ids=POOL_SIZE_IDS)
@pytest.mark.parametrize("steps", [2, 3])
@pytest.mark.parametrize("dtype", reference.DTYPES)
def test_a_window_on_the_thread_pool_is_the_two_ops_bit_for_bit(dtype, steps, size):
  rng = np.random.default_rng(5)
  fused, two_ops = _state(rng, *size[:2], dtype, np.int64)
  grad, indices = pool_micro_steps(rng, dtype, steps, (fused, two_ops), size)
  _fused(fused, grad, indices, steps, 4, WEIGHT_DECAY)
  _two_ops(two_ops, grad, indices, steps, 4, WEIGHT_DECAY)
  assert_same_bits(NAMES, fused, two_ops, dtype)
  assert_window_applied(fused, dtype)


@pytest.mark.parametrize("bad", BAD_INPUTS)
def test_a_bad_input_names_it_and_writes_nothing(bad):
  rng = np.random.default_rng(3)
  state, _ = _state(rng, ROWS, DIM, "float32", np.int64)
  grad, indices, steps, message = bad_input(bad, state)
  assert_rejected_with_nothing_written(NAMES, state,
                                       lambda: _fused(state, grad, indices, steps, 1, None),
                                       message)


def test_an_accumulator_of_another_dtype_is_named_and_nothing_is_written():
  rng = np.random.default_rng(3)
  state, _ = _state(rng, ROWS, DIM, "float32", np.int32)
  state[-3] = tf.Variable(tf.zeros((ROWS, DIM), tf.float64))
  assert_rejected_with_nothing_written(
      NAMES, state, lambda: _fused(state, tf.ones((2, DIM)), tf.constant([1, 2]), 2, 1, None),
      "accumulator has dtype double but grad has dtype float")


def test_light_slots_refuse_the_window():
  var, accumulator = tf.Variable(tf.zeros((ROWS, DIM))), tf.Variable(tf.zeros((ROWS, DIM)))
  m, v = (tf.Variable(tf.zeros((ROWS, DIM), tf.bfloat16)) for _ in range(2))
  row_ids, row_count = tf.Variable(tf.zeros([ROWS], tf.int32)), tf.Variable(0)
  with pytest.raises(ValueError, match="window= needs slots of var's dtype"):
    ops.sparse_lazy_adam(var, m, v, tf.ones((1, DIM)), [0], beta_1_power=0.9, beta_2_power=0.999,
                         window=(accumulator, row_ids, row_count, 2))
