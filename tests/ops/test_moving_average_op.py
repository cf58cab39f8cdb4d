"""The lazy moving average (op ResourceSparseApplyLazyMovingAverage) against the NumPy reference.

The kernel must match `reference.sparse_moving_average` bit for bit on every table dtype,
with duplicate indices (each row brought up to date once), rows never touched (never read or
written) and rows that missed several steps; and the lazy average, every row brought up to
date, must be the stock EMA that moves every row every step. Why: see docs/optimizers.md,
"Keras features at sparse cost".
"""

import re

import numpy as np
import pytest
import tensorflow as tf

from tf_opt_ops import ops
from tf_opt_ops import reference

from common import stored_tensor
from common import stored_values

ROWS, DIM = 13, 37
# Steps of a table whose rows change where the indices name them: row 3 repeats within a
# step, rows 6 and 8 are never named, row 11 misses several steps between its changes.
STEP_INDICES = [[3, 0, 3, 7, 3], [11, 5, 0], [7, 7], [2, 9, 4, 9, 1, 12], [3], [11, 3, 11]]
UNTOUCHED_ROWS = [6, 8]
EMA_MOMENTUM = 0.8


def _run_steps(dtype, index_dtype, mode):
  """Runs STEP_INDICES through the op and the reference, each step bringing the named rows'
  averages up to date and then changing those rows of the table; checks every step's average
  and synced bit for bit."""
  rng = np.random.default_rng(3)
  table0 = reference.random_values(rng, (ROWS, DIM), dtype)
  average0 = reference.random_values(rng, (ROWS, DIM), dtype)
  table, average = tf.Variable(stored_tensor(table0,
                                             dtype)), tf.Variable(stored_tensor(average0, dtype))
  synced = tf.Variable(tf.zeros([ROWS], tf.int32))
  ref_table, ref_average, ref_synced = table0.copy(), average0.copy(), np.zeros(ROWS, np.int32)

  def apply(indices, count):
    ops.sparse_moving_average(average, synced, table, indices, count=count,
                              ema_momentum=EMA_MOMENTUM)

  run = apply if mode == "eager" else tf.function(apply)
  for count, step_indices in enumerate(STEP_INDICES):
    indices = np.array(step_indices, index_dtype)
    run(tf.constant(indices), tf.constant(count, tf.int32))
    ref_average, ref_synced = reference.sparse_moving_average(ref_average, ref_synced, ref_table,
                                                              indices, dtype, count=count,
                                                              ema_momentum=EMA_MOMENTUM)
    np.testing.assert_array_equal(stored_values(average, dtype), ref_average,
                                  err_msg=f"step {count}")
    np.testing.assert_array_equal(synced.numpy(), ref_synced, err_msg=f"step {count}")
    np.testing.assert_array_equal(
        stored_values(average, dtype)[UNTOUCHED_ROWS], average0[UNTOUCHED_ROWS])
    changed = np.unique(indices)
    ref_table[changed] = reference.random_values(rng, (len(changed), DIM), dtype)
    table.scatter_update(tf.IndexedSlices(stored_tensor(ref_table[changed], dtype), changed))


@pytest.mark.parametrize("mode", ["eager", "function"])
@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
@pytest.mark.parametrize("dtype", reference.DTYPES)
def test_op_matches_the_reference_bit_for_bit(dtype, index_dtype, mode):
  _run_steps(dtype, index_dtype, mode)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_lazy_average_brought_up_to_date_is_the_stock_average(dtype):
  """Stock EMA moves every row every step, after the step's update; the lazy one, each row
  brought up to date before it changes and, at the end, every row, gives the same numbers to
  float rounding."""
  rng = np.random.default_rng(3)
  C = reference.compute_type(dtype)
  table = reference.random_values(rng, (ROWS, DIM), dtype)
  stock = table.astype(C)  # Keras 3's first step sets every average to its variable
  lazy, synced = table.copy(), np.ones(ROWS, np.int32)
  m = C(EMA_MOMENTUM)
  for count, step_indices in enumerate(STEP_INDICES, start=1):
    lazy, synced = reference.sparse_moving_average(lazy, synced, table, step_indices, dtype,
                                                   count=count, ema_momentum=EMA_MOMENTUM)
    changed = np.unique(step_indices)
    table = table.copy()
    table[changed] = reference.random_values(rng, (len(changed), DIM), dtype)
    stock = m * stock + (C(1) - m) * table.astype(C)
  lazy, _ = reference.sparse_moving_average(lazy, synced, table, np.arange(ROWS), dtype,
                                            count=len(STEP_INDICES) + 1, ema_momentum=EMA_MOMENTUM)
  tolerance = dict(rtol=1e-5, atol=1e-6) if dtype == "float32" else dict(rtol=1e-12, atol=1e-13)
  np.testing.assert_allclose(lazy, stock, **tolerance)


@pytest.mark.parametrize("dtype", reference.DTYPES)
def test_rows_that_missed_many_different_counts_match_the_reference_bit_for_bit(dtype):
  """A table large enough to run on the thread pool, its rows having missed thousands of
  different step counts (many sharing a slot of the kernel's per-thread decay cache, by count
  modulo its size), some far more steps than a 16-bit type holds exactly; indices with
  duplicates."""
  rng = np.random.default_rng(5)
  rows, dim, count = 4096, 64, 70_000
  table0 = reference.random_values(rng, (rows, dim), dtype)
  average0 = reference.random_values(rng, (rows, dim), dtype)
  synced0 = (count - rng.integers(0, 66_000, rows)).astype(np.int32)
  indices = np.concatenate([rng.permutation(rows)[:3000], rng.integers(0, rows, 500)])
  table, average = tf.Variable(stored_tensor(table0,
                                             dtype)), tf.Variable(stored_tensor(average0, dtype))
  synced = tf.Variable(synced0)
  ops.sparse_moving_average(average, synced, table, tf.constant(indices), count=count,
                            ema_momentum=0.999)
  ref_average, ref_synced = reference.sparse_moving_average(average0, synced0, table0, indices,
                                                            dtype, count=count, ema_momentum=0.999)
  np.testing.assert_array_equal(stored_values(average, dtype), ref_average)
  np.testing.assert_array_equal(synced.numpy(), ref_synced)


def _variables(dtype=tf.float32):
  table = tf.Variable(tf.random.stateless_uniform((ROWS, DIM), seed=(1, 2), dtype=dtype))
  average = tf.Variable(tf.random.stateless_uniform((ROWS, DIM), seed=(3, 4), dtype=dtype))
  synced = tf.Variable(tf.range(ROWS, dtype=tf.int32))
  return table, average, synced


def test_bad_index_names_it_and_writes_nothing():
  table, average, synced = _variables()
  before = [average.numpy(), synced.numpy()]
  indices = tf.constant([1, ROWS + 3, 4])
  with pytest.raises(tf.errors.InvalidArgumentError,
                     match=rf"indices\[1\] = {ROWS + 3} is not in \[0, {ROWS}\)"):
    ops.sparse_moving_average(average, synced, table, indices, count=5, ema_momentum=EMA_MOMENTUM)
  np.testing.assert_array_equal(average.numpy(), before[0])
  np.testing.assert_array_equal(synced.numpy(), before[1])


def _replaced(what):
  """The op's inputs with `what` replaced by a bad one; the error that names it."""
  table, average, synced = _variables()
  kwargs = {}
  if what == "var dtype":
    table = tf.Variable(tf.zeros((ROWS, DIM), tf.float64))
    message = ("var has dtype double but average has dtype float: create the average with the "
               "dtype of the table it averages.")
  elif what == "average dtype":
    average, kwargs = tf.Variable(tf.zeros((ROWS, DIM), tf.float64)), dict(dtype=tf.float32)
    message = ("average has dtype double but T is float: pass the table's dtype as T (the dtype "
               "of average and var).")
  elif what == "synced dtype":
    synced = tf.Variable(tf.zeros([ROWS]))
    message = ("synced has dtype float but must be int32: create synced as an int32 variable of "
               "one step count per row of average.")
  else:
    synced = tf.Variable(tf.zeros([ROWS + 1], tf.int32))
    message = (f"synced holds one step count per row of average, so its shape must be [{ROWS}]: "
               f"synced [{ROWS + 1}] vs average [{ROWS},{DIM}]: create synced with shape "
               f"[average.shape[0]].")
  return (table, average, synced, kwargs), message


@pytest.mark.parametrize("what", ["var dtype", "average dtype", "synced dtype", "synced shape"])
def test_bad_variable_is_named_in_the_op_inputs_words_and_nothing_is_written(what):
  (table, average, synced, kwargs), message = _replaced(what)
  before = [average.numpy(), synced.numpy()]
  with pytest.raises(tf.errors.InvalidArgumentError, match=re.escape(message)) as error:
    ops.sparse_moving_average(average, synced, table, tf.constant([1, 2]), count=5,
                              ema_momentum=EMA_MOMENTUM, **kwargs)
  # The optimizers' words (a gradient, row-wise v) are not this op's.
  assert "grad" not in str(error.value) and "rowwise" not in str(error.value)
  np.testing.assert_array_equal(average.numpy(), before[0])
  np.testing.assert_array_equal(synced.numpy(), before[1])


def test_empty_indices_change_nothing():
  table, average, synced = _variables()
  before = [average.numpy(), synced.numpy()]
  ops.sparse_moving_average(average, synced, table, tf.constant([], tf.int32), count=5,
                            ema_momentum=EMA_MOMENTUM)
  np.testing.assert_array_equal(average.numpy(), before[0])
  np.testing.assert_array_equal(synced.numpy(), before[1])
