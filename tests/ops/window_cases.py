"""What the tests of the fused window ops (LazyAdam's, with and without its moving average,
and ClippyAdagrad's apply step of a gradient accumulation window in one op) share: the
windows, the state in two copies (one for the fused op, one for the two ops it fuses), the
micro-steps, the bad inputs and the bit-for-bit comparison. Each test file keeps only what its
optimizer adds: its slots, its hyperparameters and its two ways of applying a window.

A state is a list: the optimizer's variables (var and its slots), then the window's
accumulator, row_ids and row_count.
"""

import numpy as np
import pytest
import tensorflow as tf

from tf_opt_ops import ops
from tf_opt_ops import reference

from common import stored_tensor
from common import stored_values

ROWS, DIM = 13, 37
# Windows: row 3 repeats within and across micro-steps; rows 0 and 7 are held but not in the
# last micro-step, rows 9, 5, 4 are in the last only; rows 6 and 10 are never named.
WINDOWS = [
    [[3, 0, 3, 7, 3], [9, 3, 5, 4, 3, 8]],
    [[7, 1, 7, 2], [3, 0, 3], [9, 3, 5, 4, 3, 8]],
    [[11, 12], [12, 2, 2]],
]
NEVER_NAMED = [6, 10]
WEIGHT_DECAY = 0.05
WINDOW_NAMES = ("accumulator", "row_ids", "row_count")


def two_states(rng, values, dtype, index_dtype):
  """Two copies of the state of the optimizer variables `values` (NumPy, stored as
  tf_opt_ops.reference stores `dtype`), with an empty window: one for the fused op, one for
  the two ops."""
  rows, dim = values[0].shape
  ids = rng.integers(0, rows, rows).astype(index_dtype)  # unread beyond the count

  def state():
    return [tf.Variable(stored_tensor(x, dtype)) for x in values] + [
        tf.Variable(tf.zeros((rows, dim), tf.as_dtype(dtype))),
        tf.Variable(ids),
        tf.Variable(np.zeros((), index_dtype))
    ]

  return state(), state()


def window_of(state):
  """The state's (accumulator, row_ids, row_count)."""
  return state[-3:]


def accumulate(state, grad, indices):
  ops.sparse_accumulate_rows(*window_of(state), indices, grad)


def window_grad(rng, n, dim, dtype):
  return tf.constant(stored_tensor(reference.random_values(rng, (n, dim), dtype, -3, 3), dtype))


def last_micro_steps(rng, dtype, index_dtype, states, windows=WINDOWS):
  """For each window, accumulates every micro-step but the last into each state and yields
  (window number, window, grad, indices) for the last: the caller applies it."""
  for number, window in enumerate(windows, start=1):
    for k, step_indices in enumerate(window):
      indices = tf.constant(np.array(step_indices, index_dtype))
      grad = window_grad(rng, len(step_indices), DIM, dtype)
      if k < len(window) - 1:
        for state in states:
          accumulate(state, grad, indices)
      else:
        yield number, window, grad, indices


# Tables large enough for the thread pool: (rows, dim, distinct rows, duplicates) per
# micro-step. On the larger, the window's ids span several of the grouping's partitions.
POOL_SIZES = [(4096, 64, 2000, 400), (40_000, 16, 9000, 1000)]
POOL_SIZE_IDS = ["one-partition", "partitions"]


def pool_micro_steps(rng, dtype, steps, states, size):
  """One window of `steps` micro-steps of a POOL_SIZES `size`: its distinct rows, then its
  duplicates drawn with repeats, per micro-step, so some rows are held only and some in the last
  micro-step only. Accumulates all but the last into each state and returns (grad, indices) of
  the last."""
  rows, dim, distinct, duplicates = size
  for k in range(steps):
    indices = np.concatenate([rng.permutation(rows)[:distinct], rng.integers(0, rows, duplicates)])
    indices = tf.constant(indices.astype(np.int64))
    grad = window_grad(rng, distinct + duplicates, dim, dtype)
    if k == steps - 1:
      return grad, indices
    for state in states:
      accumulate(state, grad, indices)


def assert_same_bits(names, fused, two_ops, dtype, message=""):
  for name, ours, theirs in zip(names, fused, two_ops):
    kind = dtype if name not in ("row_ids", "row_count", "synced") else "int"
    np.testing.assert_array_equal(stored_values(ours, kind), stored_values(theirs, kind),
                                  err_msg=f"{name} {message}")


def assert_window_applied(state, dtype):
  """The window's count is 0 and every accumulator row cleared."""
  accumulator, _, row_count = window_of(state)
  assert int(row_count.numpy()) == 0
  assert not np.any(stored_values(accumulator, dtype))


BAD_INPUTS = ["index", "held id", "count", "steps"]


def bad_input(bad, state):
  """A window of one held micro-step in `state` (float32, int64 ids), then the last micro-step's
  (grad, indices, steps) and the message the op must give, with `bad` broken: an index, a held
  id, the count, or steps."""
  _, row_ids, row_count = window_of(state)
  accumulate(state, tf.ones((2, DIM)), tf.constant([1, 2], tf.int64))
  indices = tf.constant([1, 4, 5], tf.int64)
  steps = 2
  if bad == "index":
    indices = tf.constant([1, ROWS + 3, 5], tf.int64)
    message = rf"indices\[1\] = {ROWS + 3} is not in \[0, {ROWS}\)"
  elif bad == "held id":
    row_ids.scatter_nd_update([[1]], tf.constant([-2], tf.int64))
    message = rf"row_ids\[1\] = -2 is not in \[0, {ROWS}\)"
  elif bad == "count":
    row_count.assign(ROWS + 1)
    message = rf"row_count = {ROWS + 1} is not in \[0, {ROWS}\]"
  elif bad == "steps":
    steps = 0
    message = "steps = 0 must be positive"
  else:
    raise ValueError(f"unknown bad input {bad!r}")
  return tf.ones((3, DIM)), indices, steps, message


def assert_rejected_with_nothing_written(names, state, apply, message):
  """apply() raises InvalidArgumentError matching `message` and no variable of `state`
  changes."""
  before = [x.numpy().copy() for x in state]
  with pytest.raises(tf.errors.InvalidArgumentError, match=message):
    apply()
  for name, x, b in zip(names, state, before):
    np.testing.assert_array_equal(x.numpy(), b, err_msg=name)
