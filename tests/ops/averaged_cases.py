"""What the tests of the fused ops that keep lazy Adam's moving average (with and without a
gradient accumulation window) share: the average variables broken and the errors that must
name them.

A state is a list: var, m, v, average, synced, then the window's variables where there is one.
"""

import tensorflow as tf

BAD_AVERAGE_VARIABLES = ["synced shape", "synced dtype", "average dtype"]


def break_average_variable(what, state):
  """Replaces the average or synced of `state` (float32, var of shape [rows, dim]) by a
  variable of the wrong shape or dtype, as `what` says; returns the message the op must give."""
  rows, dim = state[0].shape
  if what == "synced shape":
    state[4] = tf.Variable(tf.zeros([rows + 1], tf.int32))
    return (f"synced holds one step count per row of var, so its shape must be [{rows}]: "
            f"synced [{rows + 1}] vs var [{rows},{dim}]: create synced with shape "
            f"[var.shape[0]].")
  if what == "synced dtype":
    state[4] = tf.Variable(tf.zeros([rows]))
    return ("synced has dtype float but must be int32: create synced as an int32 variable of "
            "one step count per row of var.")
  if what == "average dtype":
    state[3] = tf.Variable(tf.zeros((rows, dim), tf.float64))
    return "average has dtype double but grad has dtype float"
  raise ValueError(f"unknown bad variable {what!r}")
