"""What every update needs to know about a variable: its handle and its dtypes.

A variable may be a `tf.Variable`, a Keras 3 variable (anything with
`.handle`) or a resource handle tensor.
"""

import tensorflow as tf


def handle(variable):
  """The resource handle of `variable`."""
  if isinstance(variable, tf.Tensor) and variable.dtype == tf.resource:
    return variable
  return variable.handle


def value_dtype(variable, grad):
  """The dtype of `variable`'s values (`grad`'s for a bare resource handle)."""
  dtype = getattr(variable, "dtype", None)
  if dtype is None or (isinstance(variable, tf.Tensor) and variable.dtype == tf.resource):
    return tf.as_dtype(grad.dtype)
  return tf.as_dtype(dtype)


def scalar_dtype(dtype):
  """The dtype of the hyperparameter inputs for variables of `dtype`."""
  # Why: see docs/design.md, "The math" (half types compute in float32).
  return tf.float64 if tf.as_dtype(dtype) == tf.float64 else tf.float32
