"""What the ops take: variables as resource handles, hyperparameters as scalar tensors.

A variable may be a `tf.Variable`, a Keras 3 variable (anything with
`.handle`) or a resource handle tensor; a hyperparameter a number, tensor,
variable or callable.
"""

import numbers

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


def resolve(value):
  """A hyperparameter's current value: calls callables, leaves the rest."""
  if callable(value) and not isinstance(value, (tf.Variable, tf.Tensor)):
    return value()
  return value


def scalar(value, dtype):
  """A hyperparameter as a scalar tensor of `dtype`."""
  value = resolve(value)
  if isinstance(value, (tf.Tensor, tf.Variable)) or hasattr(value, "value"):
    return tf.cast(tf.convert_to_tensor(value), dtype)
  return tf.constant(value, dtype)


def adam_scalars(dtype, *, lr, beta_1, beta_2, epsilon, step):
  """Adam's hyperparameters as `dtype` scalars, keyed as `ops.sparse_lazy_adam` takes
  them, with `beta_1_power`, `beta_2_power` = beta^step (None when `step` is None);
  and (1 - beta_1, 1 - beta_2), taken in Python double precision for numbers as
  Keras' and tf_keras' `Adam.update_step` do."""
  beta_1, beta_2 = resolve(beta_1), resolve(beta_2)
  one_minus = tuple(
      scalar(1 - b if isinstance(b, numbers.Number) else 1 - scalar(b, dtype), dtype)
      for b in (beta_1, beta_2))
  scalars = dict(lr=scalar(lr, dtype), beta_1=scalar(beta_1, dtype), beta_2=scalar(beta_2, dtype),
                 epsilon=scalar(epsilon, dtype), beta_1_power=None, beta_2_power=None)
  if step is not None:
    step = scalar(step, dtype)
    scalars.update(beta_1_power=tf.pow(scalars["beta_1"], step),
                   beta_2_power=tf.pow(scalars["beta_2"], step))
  return scalars, one_minus


def clippy_scalars(dtype, *, lr, epsilon, variable_relative_threshold,
                   accumulator_relative_threshold, absolute_threshold):
  """Clippy Adagrad's hyperparameters as `dtype` scalars, keyed as `ops.clippy_adagrad`
  takes them."""
  return dict(lr=scalar(lr, dtype), epsilon=scalar(epsilon, dtype),
              variable_relative_threshold=scalar(variable_relative_threshold, dtype),
              accumulator_relative_threshold=scalar(accumulator_relative_threshold, dtype),
              absolute_threshold=scalar(absolute_threshold, dtype))
