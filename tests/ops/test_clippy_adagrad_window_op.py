"""A gradient accumulation window's apply step in one op (ops
ResourceSparseApplyClippyAdagradWindow and ...WWindow) against the two ops it fuses.

The fused op must give the bits of ResourceSparseTakeWindowGradient followed by
ResourceSparseApplyClippyAdagrad (...W with weight decay), scale included, on every table
dtype, both index dtypes, eager and in tf.function, over several windows of 2 and 3
micro-steps with duplicates within and across micro-steps; it must clear the window's
accumulator rows and count, leave the rows no micro-step named alone, and reject a bad index,
held id or count with nothing written. Why: see docs/optimizers.md, "Keras features at sparse
cost".
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
NAMES = ("var", "accum", "accumulator", "row_ids", "row_count")
# A threshold small enough that the updates are clipped (scale < 1).
HYPERS = dict(lr=0.05, epsilon=1e-7, variable_relative_threshold=0.01,
              accumulator_relative_threshold=0.0, absolute_threshold=1e-4)


def _state(rng, rows, dim, dtype, index_dtype):
  """Two copies of (var, accum, accumulator, row_ids, row_count): one for the fused op, one for
  the two ops."""
  values = [reference.random_values(rng, (rows, dim), dtype)]
  values.append(reference.random_values(rng, (rows, dim), dtype, 0.1, 1))  # accum > 0
  ids = rng.integers(0, rows, rows).astype(index_dtype)  # unread beyond the count

  def variables():
    return [tf.Variable(stored_tensor(x, dtype)) for x in values] + [
        tf.Variable(tf.zeros((rows, dim), tf.as_dtype(dtype))),
        tf.Variable(ids),
        tf.Variable(np.zeros((), index_dtype))
    ]

  return variables(), variables()


def _accumulate(state, grad, indices):
  ops.sparse_accumulate_rows(state[2], state[3], state[4], indices, grad)


def _fused(state, grad, indices, steps, weight_decay, **flags):
  var, accum, accumulator, row_ids, row_count = state
  return ops.sparse_clippy_adagrad(var, accum, grad, indices, weight_decay=weight_decay,
                                   window=(accumulator, row_ids, row_count, steps), **HYPERS,
                                   **flags)


def _two_ops(state, grad, indices, steps, weight_decay, **flags):
  var, accum, accumulator, row_ids, row_count = state
  rows, average = ops.sparse_take_window_gradient(accumulator, row_ids, row_count, indices, grad,
                                                  steps)
  return ops.sparse_clippy_adagrad(var, accum, average, rows, weight_decay=weight_decay, **HYPERS,
                                   **flags)


def _assert_same_bits(fused, two_ops, dtype, message=""):
  for name, ours, theirs in zip(NAMES, fused, two_ops):
    kind = dtype if name not in ("row_ids", "row_count") else "int"
    np.testing.assert_array_equal(stored_values(ours, kind), stored_values(theirs, kind),
                                  err_msg=f"{name} {message}")


def _assert_same_scale(fused, two_ops):
  ours, theirs = np.asarray(fused.numpy()), np.asarray(two_ops.numpy())
  assert ours.tobytes() == theirs.tobytes(), (ours, theirs)


def _grad(rng, n, dim, dtype):
  return tf.constant(stored_tensor(reference.random_values(rng, (n, dim), dtype, -3, 3), dtype))


@pytest.mark.parametrize("decays", [False, True], ids=["plain", "weight-decay"])
@pytest.mark.parametrize("mode", ["eager", "function"])
@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
@pytest.mark.parametrize("dtype", reference.DTYPES)
def test_fused_op_is_the_two_ops_bit_for_bit(dtype, index_dtype, mode, decays):
  rng = np.random.default_rng(7)
  fused, two_ops = _state(rng, ROWS, DIM, dtype, index_dtype)
  weight_decay = WEIGHT_DECAY if decays else None
  run_fused, run_two_ops = (f if mode == "eager" else tf.function(f) for f in (_fused, _two_ops))
  untouched = [stored_values(x, dtype).copy() for x in fused[:2]]
  scales = []
  for number, window in enumerate(WINDOWS, start=1):
    for k, step_indices in enumerate(window):
      indices = tf.constant(np.array(step_indices, index_dtype))
      grad = _grad(rng, len(step_indices), DIM, dtype)
      if k < len(window) - 1:
        _accumulate(fused, grad, indices)
        _accumulate(two_ops, grad, indices)
        continue
      scale = run_fused(fused, grad, indices, len(window), weight_decay)
      _assert_same_scale(scale, run_two_ops(two_ops, grad, indices, len(window), weight_decay))
      scales.append(float(scale))
      _assert_same_bits(fused, two_ops, dtype, f"window {number}")
      assert int(fused[4].numpy()) == 0
      assert not np.any(stored_values(fused[2], dtype))  # every window row cleared
      named = sorted(set(sum(window, [])))
      assert not np.array_equal(stored_values(fused[0], dtype)[named], untouched[0][named])
  assert min(scales) < 1  # the clipping ran
  for name, before, after in zip(NAMES, untouched, fused):
    np.testing.assert_array_equal(
        stored_values(after, dtype)[NEVER_NAMED], before[NEVER_NAMED], err_msg=name)


@pytest.mark.parametrize("flags", [{}, dict(clip_accumulator_update=True)],
                         ids=["default", "clip-accumulator-update"])
@pytest.mark.parametrize("size", [(4096, 64, 2000, 400), (40_000, 16, 9000, 1000)],
                         ids=["one-partition", "partitions"])
@pytest.mark.parametrize("steps", [2, 3])
@pytest.mark.parametrize("dtype", reference.DTYPES)
def test_a_window_on_the_thread_pool_is_the_two_ops_bit_for_bit(dtype, steps, size, flags):
  """A table large enough to run on the thread pool, micro-steps with duplicates, some rows
  held only, some in the last micro-step only; on the larger table the window's ids span
  several of the grouping's partitions."""
  rng = np.random.default_rng(5)
  rows, dim, distinct, duplicates = size
  fused, two_ops = _state(rng, rows, dim, dtype, np.int64)
  for k in range(steps):
    indices = np.concatenate([rng.permutation(rows)[:distinct], rng.integers(0, rows, duplicates)])
    indices = tf.constant(indices.astype(np.int64))
    grad = _grad(rng, distinct + duplicates, dim, dtype)
    if k < steps - 1:
      _accumulate(fused, grad, indices)
      _accumulate(two_ops, grad, indices)
    else:
      _assert_same_scale(_fused(fused, grad, indices, steps, WEIGHT_DECAY, **flags),
                         _two_ops(two_ops, grad, indices, steps, WEIGHT_DECAY, **flags))
  _assert_same_bits(fused, two_ops, dtype)
  assert not np.any(stored_values(fused[2], dtype))


def test_an_empty_window_changes_nothing_and_has_scale_1():
  rng = np.random.default_rng(3)
  state, _ = _state(rng, ROWS, DIM, "float32", np.int64)
  before = [x.numpy().copy() for x in state]
  scale = _fused(state, tf.zeros((0, DIM)), tf.zeros([0], tf.int64), 2, WEIGHT_DECAY)
  assert float(scale) == 1.0
  for name, x, b in zip(NAMES, state, before):
    np.testing.assert_array_equal(x.numpy(), b, err_msg=name)


@pytest.mark.parametrize("bad", ["index", "held id", "count", "steps"])
def test_a_bad_input_names_it_and_writes_nothing(bad):
  rng = np.random.default_rng(3)
  state, _ = _state(rng, ROWS, DIM, "float32", np.int64)
  _accumulate(state, tf.ones((2, DIM)), tf.constant([1, 2], tf.int64))
  indices = tf.constant([1, 4, 5], tf.int64)
  steps = 2
  if bad == "index":
    indices = tf.constant([1, ROWS + 3, 5], tf.int64)
    message = rf"indices\[1\] = {ROWS + 3} is not in \[0, {ROWS}\)"
  elif bad == "held id":
    state[3].scatter_nd_update([[1]], tf.constant([-2], tf.int64))
    message = rf"row_ids\[1\] = -2 is not in \[0, {ROWS}\)"
  elif bad == "count":
    state[4].assign(ROWS + 1)
    message = rf"row_count = {ROWS + 1} is not in \[0, {ROWS}\]"
  else:
    steps = 0
    message = "steps = 0 must be positive"
  before = [x.numpy().copy() for x in state]
  with pytest.raises(tf.errors.InvalidArgumentError, match=message):
    _fused(state, tf.ones((3, DIM)), indices, steps, WEIGHT_DECAY)
  for name, x, b in zip(NAMES, state, before):
    np.testing.assert_array_equal(x.numpy(), b, err_msg=name)


def test_an_accumulator_of_another_dtype_is_named_and_nothing_is_written():
  rng = np.random.default_rng(3)
  state, _ = _state(rng, ROWS, DIM, "float32", np.int32)
  state[2] = tf.Variable(tf.zeros((ROWS, DIM), tf.float64))
  before = [x.numpy().copy() for x in state]
  with pytest.raises(tf.errors.InvalidArgumentError,
                     match="accumulator has dtype double but grad has dtype float"):
    _fused(state, tf.ones((2, DIM)), tf.constant([1, 2]), 2, None)
  for x, b in zip(state, before):
    np.testing.assert_array_equal(x.numpy(), b)


def test_a_light_accumulator_refuses_the_window():
  var, accumulator = tf.Variable(tf.zeros((ROWS, DIM))), tf.Variable(tf.zeros((ROWS, DIM)))
  accum = tf.Variable(tf.zeros((ROWS, DIM), tf.bfloat16))
  row_ids, row_count = tf.Variable(tf.zeros([ROWS], tf.int32)), tf.Variable(0)
  with pytest.raises(ValueError, match="window= needs an accumulator of var's dtype"):
    ops.sparse_clippy_adagrad(var, accum, tf.ones((1, DIM)), [0],
                              window=(accumulator, row_ids, row_count, 2))
