"""A gradient accumulation window's apply step with the table's moving average in one pass
(ops ResourceSparseApplyLazyAdamWindowAveraged and ...WWindowAveraged) against the two ops it
fuses.

The fused op must give the bits of ResourceSparseTakeWindowGradient followed by
ResourceSparseApplyLazyAdamAveraged (...WAveraged with weight decay) on every table dtype, both
index dtypes, eager and in tf.function, over several windows of 2 and 3 micro-steps with
duplicates within and across micro-steps and rows that missed different step counts, on one
thread and on the thread pool; it must clear the window's accumulator rows and count, leave
the rows no micro-step named alone, and reject a bad index, held id, count, steps or variable
with nothing written. Why: see docs/optimizers.md, "Keras features at sparse cost". What the
window ops' tests share is in window_cases.py.
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

NAMES = ("var", "m", "v", "average", "synced") + WINDOW_NAMES
EMA_MOMENTUM = 0.8


def _state(rng, rows, dim, dtype, index_dtype, synced0):
  """(var, m, v, average, synced, accumulator, row_ids, row_count) twice: for the fused op and
  the two ops."""
  var, m, average = (reference.random_values(rng, (rows, dim), dtype) for _ in range(3))
  v = np.abs(reference.random_values(rng, (rows, dim), dtype))  # v >= 0
  states = two_states(rng, [var, m, v, average], dtype, index_dtype)
  for state in states:
    state.insert(4, tf.Variable(synced0))
  return states


def _hypers(step):
  beta_1, beta_2 = 0.9, 0.999
  return dict(beta_1_power=beta_1**step, beta_2_power=beta_2**step, lr=0.01, beta_1=beta_1,
              beta_2=beta_2, epsilon=1e-7)


def _fused(state, grad, indices, steps, count, step, weight_decay):
  var, m, v, average, synced = state[:5]
  ops.sparse_lazy_adam(var, m, v, grad, indices, weight_decay=weight_decay,
                       moving_average=(average, synced, count, EMA_MOMENTUM),
                       window=(*window_of(state), steps), **_hypers(step))


def _two_ops(state, grad, indices, steps, count, step, weight_decay):
  var, m, v, average, synced = state[:5]
  rows, window_average = ops.sparse_take_window_gradient(*window_of(state), indices, grad, steps)
  ops.sparse_lazy_adam(var, m, v, window_average, rows, weight_decay=weight_decay,
                       moving_average=(average, synced, count, EMA_MOMENTUM), **_hypers(step))


@fused_op_cases
def test_fused_op_is_the_two_ops_bit_for_bit(dtype, index_dtype, mode, decays):
  rng = np.random.default_rng(7)
  fused, two_ops = _state(rng, ROWS, DIM, dtype, index_dtype,
                          rng.integers(0, 3, ROWS).astype(np.int32))
  weight_decay = WEIGHT_DECAY if decays else None
  run_fused, run_two_ops = (f if mode == "eager" else tf.function(f) for f in (_fused, _two_ops))
  kinds = [dtype] * 4 + ["int"]  # var, m, v, average; synced

  def values(state):
    return [stored_values(x, kind) for x, kind in zip(state, kinds)]

  untouched = [x.copy() for x in values(fused)]
  for step, window, grad, indices in last_micro_steps(rng, dtype, index_dtype, (fused, two_ops)):
    # The EMA steps so far: one per micro-step, from a few before the first window's.
    count = tf.constant(3 + 3 * step)
    run_fused(fused, grad, indices, len(window), count, step, weight_decay)
    run_two_ops(two_ops, grad, indices, len(window), count, step, weight_decay)
    assert_same_bits(NAMES, fused, two_ops, dtype, f"window {step}")
    assert_window_applied(fused, dtype)
    named = sorted(set(sum(window, [])))
    np.testing.assert_array_equal(fused[4].numpy()[named], int(count))
    assert not np.array_equal(values(fused)[3][named], untouched[3][named])
  for name, before, after in zip(NAMES, untouched, values(fused)):
    np.testing.assert_array_equal(after[NEVER_NAMED], before[NEVER_NAMED], err_msg=name)


@pytest.mark.parametrize("size", POOL_SIZES, ids=POOL_SIZE_IDS)
@pytest.mark.parametrize("steps", [2, 3])
@pytest.mark.parametrize("dtype", reference.DTYPES)
def test_a_window_on_the_thread_pool_is_the_two_ops_bit_for_bit(dtype, steps, size):
  """Rows that missed thousands of different step counts (many sharing a slot of the
  per-thread decay cache)."""
  rng = np.random.default_rng(5)
  rows, count = size[0], 70_000
  synced0 = (count - rng.integers(0, 66_000, rows)).astype(np.int32)
  fused, two_ops = _state(rng, *size[:2], dtype, np.int64, synced0)
  grad, indices = pool_micro_steps(rng, dtype, steps, (fused, two_ops), size)
  _fused(fused, grad, indices, steps, count, 4, WEIGHT_DECAY)
  _two_ops(two_ops, grad, indices, steps, count, 4, WEIGHT_DECAY)
  assert_same_bits(NAMES, fused, two_ops, dtype)
  assert_window_applied(fused, dtype)
  np.testing.assert_array_equal(fused[4].numpy()[indices.numpy()], count)


def _float32_state():
  rng = np.random.default_rng(3)
  state, _ = _state(rng, ROWS, DIM, "float32", np.int64, np.arange(ROWS, dtype=np.int32))
  return state


@pytest.mark.parametrize("bad", BAD_INPUTS)
def test_a_bad_input_names_it_and_writes_nothing(bad):
  state = _float32_state()
  grad, indices, steps, message = bad_input(bad, state)
  assert_rejected_with_nothing_written(NAMES, state,
                                       lambda: _fused(state, grad, indices, steps, 20, 1, None),
                                       message)


@pytest.mark.parametrize("what", BAD_AVERAGE_VARIABLES + ["accumulator dtype"])
def test_a_bad_variable_is_named_in_the_op_inputs_words_and_nothing_is_written(what):
  state = _float32_state()
  if what == "accumulator dtype":
    state[-3] = tf.Variable(tf.zeros((ROWS, DIM), tf.float64))
    message = "accumulator has dtype double but grad has dtype float"
  else:
    message = break_average_variable(what, state)
  grad, indices = tf.ones((2, DIM)), tf.constant([1, 2], tf.int64)
  assert_rejected_with_nothing_written(NAMES, state,
                                       lambda: _fused(state, grad, indices, 2, 20, 1, None),
                                       re.escape(message))
