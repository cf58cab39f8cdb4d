"""A gradient accumulation window's apply step in one op (ops
ResourceSparseApplyClippyAdagradWindow and ...WWindow) against the two ops it fuses.

The fused op must give the bits of ResourceSparseTakeWindowGradient followed by
ResourceSparseApplyClippyAdagrad (...W with weight decay), scale included, on every table
dtype, both index dtypes, eager and in tf.function, over several windows of 2 and 3
micro-steps with duplicates within and across micro-steps; it must clear the window's
accumulator rows and count, leave the rows no micro-step named alone, and reject a bad index,
held id, count or steps with nothing written. Why: see docs/optimizers.md, "Keras features at
sparse cost". What the two files share is in window_cases.py.
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

NAMES = ("var", "accum") + WINDOW_NAMES
# A threshold small enough that the updates are clipped (scale < 1).
HYPERS = dict(lr=0.05, epsilon=1e-7, variable_relative_threshold=0.01,
              accumulator_relative_threshold=0.0, absolute_threshold=1e-4)


def _state(rng, rows, dim, dtype, index_dtype):
  """(var, accum, accumulator, row_ids, row_count) twice: for the fused op and the two ops."""
  var = reference.random_values(rng, (rows, dim), dtype)
  accum = reference.random_values(rng, (rows, dim), dtype, 0.1, 1)  # accum > 0
  return two_states(rng, [var, accum], dtype, index_dtype)


def _fused(state, grad, indices, steps, weight_decay, **flags):
  var, accum = state[:2]
  return ops.sparse_clippy_adagrad(var, accum, grad, indices, weight_decay=weight_decay,
                                   window=(*window_of(state), steps), **HYPERS, **flags)


def _two_ops(state, grad, indices, steps, weight_decay, **flags):
  var, accum = state[:2]
  rows, average = ops.sparse_take_window_gradient(*window_of(state), indices, grad, steps)
  return ops.sparse_clippy_adagrad(var, accum, average, rows, weight_decay=weight_decay, **HYPERS,
                                   **flags)


def _assert_same_scale(fused, two_ops):
  ours, theirs = np.asarray(fused.numpy()), np.asarray(two_ops.numpy())
  assert ours.tobytes() == theirs.tobytes(), (ours, theirs)


@fused_op_cases
def test_fused_op_is_the_two_ops_bit_for_bit(dtype, index_dtype, mode, decays):
  rng = np.random.default_rng(7)
  fused, two_ops = _state(rng, ROWS, DIM, dtype, index_dtype)
  weight_decay = WEIGHT_DECAY if decays else None
  run_fused, run_two_ops = (f if mode == "eager" else tf.function(f) for f in (_fused, _two_ops))
  untouched = [stored_values(x, dtype).copy() for x in fused[:2]]
  scales = []
  for number, window, grad, indices in last_micro_steps(rng, dtype, index_dtype, (fused, two_ops)):
    scale = run_fused(fused, grad, indices, len(window), weight_decay)
    _assert_same_scale(scale, run_two_ops(two_ops, grad, indices, len(window), weight_decay))
    scales.append(float(scale))
    assert_same_bits(NAMES, fused, two_ops, dtype, f"window {number}")
    assert_window_applied(fused, dtype)
    named = sorted(set(sum(window, [])))
    assert not np.array_equal(stored_values(fused[0], dtype)[named], untouched[0][named])
  assert min(scales) < 1  # the clipping ran
  for name, before, after in zip(NAMES, untouched, fused):
    np.testing.assert_array_equal(
        stored_values(after, dtype)[NEVER_NAMED], before[NEVER_NAMED], err_msg=name)


@pytest.mark.parametrize("flags", [{}, dict(clip_accumulator_update=True)],
                         ids=["default", "clip-accumulator-update"])
@pytest.mark.parametrize("size", POOL_SIZES, ids=POOL_SIZE_IDS)
@pytest.mark.parametrize("steps", [2, 3])
@pytest.mark.parametrize("dtype", reference.DTYPES)
def test_a_window_on_the_thread_pool_is_the_two_ops_bit_for_bit(dtype, steps, size, flags):
  rng = np.random.default_rng(5)
  fused, two_ops = _state(rng, *size[:2], dtype, np.int64)
  grad, indices = pool_micro_steps(rng, dtype, steps, (fused, two_ops), size)
  _assert_same_scale(_fused(fused, grad, indices, steps, WEIGHT_DECAY, **flags),
                     _two_ops(two_ops, grad, indices, steps, WEIGHT_DECAY, **flags))
  assert_same_bits(NAMES, fused, two_ops, dtype)
  assert_window_applied(fused, dtype)


def test_an_empty_window_changes_nothing_and_has_scale_1():
  rng = np.random.default_rng(3)
  state, _ = _state(rng, ROWS, DIM, "float32", np.int64)
  before = [x.numpy().copy() for x in state]
  scale = _fused(state, tf.zeros((0, DIM)), tf.zeros([0], tf.int64), 2, WEIGHT_DECAY)
  assert float(scale) == 1.0
  for name, x, b in zip(NAMES, state, before):
    np.testing.assert_array_equal(x.numpy(), b, err_msg=name)


@pytest.mark.parametrize("bad", BAD_INPUTS)
def test_a_bad_input_names_it_and_writes_nothing(bad):
  rng = np.random.default_rng(3)
  state, _ = _state(rng, ROWS, DIM, "float32", np.int64)
  grad, indices, steps, message = bad_input(bad, state)
  assert_rejected_with_nothing_written(NAMES, state,
                                       lambda: _fused(state, grad, indices, steps, WEIGHT_DECAY),
                                       message)


def test_an_accumulator_of_another_dtype_is_named_and_nothing_is_written():
  rng = np.random.default_rng(3)
  state, _ = _state(rng, ROWS, DIM, "float32", np.int32)
  state[-3] = tf.Variable(tf.zeros((ROWS, DIM), tf.float64))
  assert_rejected_with_nothing_written(
      NAMES, state, lambda: _fused(state, tf.ones((2, DIM)), tf.constant([1, 2]), 2, None),
      "accumulator has dtype double but grad has dtype float")


def test_a_light_accumulator_refuses_the_window():
  var, accumulator = tf.Variable(tf.zeros((ROWS, DIM))), tf.Variable(tf.zeros((ROWS, DIM)))
  accum = tf.Variable(tf.zeros((ROWS, DIM), tf.bfloat16))
  row_ids, row_count = tf.Variable(tf.zeros([ROWS], tf.int32)), tf.Variable(0)
  with pytest.raises(ValueError, match="window= needs an accumulator of var's dtype"):
    ops.sparse_clippy_adagrad(var, accum, tf.ones((1, DIM)), [0],
                              window=(accumulator, row_ids, row_count, 2))
