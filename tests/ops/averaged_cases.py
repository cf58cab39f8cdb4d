"""What the tests of the fused ops that keep a table's moving average (lazy Adam's, with and
without a gradient accumulation window, and Clippy's) share: the steps both paths run and
their comparison, the rows that missed many different counts, the average variables broken
and the errors that must name them.

A state is a list: var, the optimizer's slots, average, synced, then the window's variables
where there is one; `names` name its entries.
"""

import re

import numpy as np
import tensorflow as tf

from tf_opt_ops import reference

from common import stored_tensor
from common import stored_values
from window_cases import assert_rejected_with_nothing_written

ROWS, DIM = 13, 37
# Steps of a table: row 3 repeats within a step, rows 6 and 8 are never named, row 11 misses
# several steps between its updates.
STEP_INDICES = [[3, 0, 3, 7, 3], [11, 5, 0], [7, 7], [2, 9, 4, 9, 1, 12], [3], [11, 3, 11]]
NEVER_NAMED = [6, 8]
EMA_MOMENTUM = 0.8
WEIGHT_DECAY = 0.05

BAD_AVERAGE_VARIABLES = ["synced shape", "synced dtype", "average dtype"]
BAD_INPUTS = ["index"] + BAD_AVERAGE_VARIABLES


def assert_same_bits(names, fused, two_ops, dtype, message=""):
  """Every variable of the two states holds the same bits (synced: int32)."""
  for name, ours, theirs in zip(names, fused, two_ops):
    kind = "int32" if name == "synced" else dtype
    np.testing.assert_array_equal(stored_values(ours, kind), stored_values(theirs, kind),
                                  err_msg=f"{name} {message}")


def run_steps(rng, names, fused, two_ops, run_fused, run_two_ops, dtype, index_dtype, weight_decay):
  """Runs each step of STEP_INDICES (random gradient rows of `dtype`) as
  `run(state, grad, indices, count, step, weight_decay)` on both states, `count` the EMA steps
  applied before it and `step` the 1-based step: after each, the states hold the same bits and
  the two runs return the same values (Clippy's scale); the NEVER_NAMED rows keep theirs."""
  untouched = [x.numpy().copy() for x in fused]
  for count, step_indices in enumerate(STEP_INDICES):
    indices = tf.constant(np.array(step_indices, index_dtype))
    grad = stored_tensor(reference.random_values(rng, (len(step_indices), DIM), dtype), dtype)
    ours = run_fused(fused, grad, indices, tf.constant(count), count + 1, weight_decay)
    theirs = run_two_ops(two_ops, grad, indices, tf.constant(count), count + 1, weight_decay)
    if ours is not None:
      np.testing.assert_array_equal(np.asarray(ours), np.asarray(theirs),
                                    err_msg=f"returned value, step {count}")
    assert_same_bits(names, fused, two_ops, dtype, f"step {count}")
  for name, before, after in zip(names, untouched, fused):
    np.testing.assert_array_equal(after.numpy()[NEVER_NAMED], before[NEVER_NAMED], err_msg=name)


def many_counts_step(rng, dtype):
  """A table large enough to run on the thread pool, its rows having missed thousands of
  different step counts (many sharing a slot of the per-thread decay cache), and a step's
  indices with duplicates: (rows, dim, count, synced0, indices, grad)."""
  rows, dim, count = 4096, 64, 70_000
  synced0 = (count - rng.integers(0, 66_000, rows)).astype(np.int32)
  indices = np.concatenate([rng.permutation(rows)[:3000], rng.integers(0, rows, 500)])
  assert len(np.unique(synced0[indices])) > 2000
  grad = stored_tensor(reference.random_values(rng, (len(indices), dim), dtype), dtype)
  return rows, dim, count, synced0, tf.constant(indices.astype(np.int64)), grad


def break_average_variable(what, state, average_at=3):
  """Replaces the average (`state[average_at]`) or synced (the next) of `state` (float32, var
  of shape [rows, dim]) by a variable of the wrong shape or dtype, as `what` says; returns the
  message the op must give."""
  rows, dim = state[0].shape
  if what == "synced shape":
    state[average_at + 1] = tf.Variable(tf.zeros([rows + 1], tf.int32))
    return (f"synced holds one step count per row of var, so its shape must be [{rows}]: "
            f"synced [{rows + 1}] vs var [{rows},{dim}]: create synced with shape "
            f"[var.shape[0]].")
  if what == "synced dtype":
    state[average_at + 1] = tf.Variable(tf.zeros([rows]))
    return ("synced has dtype float but must be int32: create synced as an int32 variable of "
            "one step count per row of var.")
  if what == "average dtype":
    state[average_at] = tf.Variable(tf.zeros((rows, dim), tf.float64))
    return "average has dtype double but grad has dtype float"
  raise ValueError(f"unknown bad variable {what!r}")


def assert_bad_input_rejected(what, names, state, run):
  """`run(state, grad, indices, count, step, weight_decay)` with an index past the table's
  rows (`what`: "index") or the variable `what` names broken (`break_average_variable`)
  fails naming it, in the op inputs' words, and nothing is written."""
  indices = [1, 2]
  if what == "index":
    indices = [1, ROWS + 3, 4]
    message = rf"indices\[1\] = {ROWS + 3} is not in \[0, {ROWS}\)"
  else:
    message = re.escape(break_average_variable(what, state, names.index("average")))
  grad = tf.ones((len(indices), DIM))
  assert_rejected_with_nothing_written(names, state,
                                       lambda: run(state, grad, tf.constant(indices), 20, 1, None),
                                       message)
