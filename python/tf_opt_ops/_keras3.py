"""Keras 3 for the Keras 3 flavor's modules (`keras`, `routers.keras`).

`from tf_opt_ops._keras3 import keras` raises ImportError on TensorFlow 2.15,
where `keras` is Keras 2 (tf.keras itself): our Keras 3 classes cannot subclass
it, and registering them in its registry would override the tf_keras flavors'
names. The message says what to use there (see `_keras2.require_keras3`).

It is also the one module that reaches Keras 3's private attributes (docs/design.md,
"Private framework APIs"). Hooks our optimizer subclasses override or call on
themselves (`_momentums`, `_get_variable_index`...) are the subclass API of Keras 3's
optimizer base and stay in the subclasses. And it turns the values Keras 3 refuses as
a learning rate into ones it takes (`as_learning_rate`), and keeps Keras 3's
`LossScaleOptimizer` from densifying a sparse gradient to check it
(`_check_finite_of_slices`).
"""

import functools
import importlib
import numbers

import numpy as np
import tensorflow as tf

from tf_opt_ops import _keras2

_keras2.require_keras3()
keras = importlib.import_module("keras")


# Keras 3's LossScaleOptimizer checks each gradient with `ops.isfinite`, which turns an
# IndexedSlices into a dense tensor of the variable's shape (a fill of True, then the values'
# checks scattered in): a pass over the whole table per step, whatever optimizer it wraps. Its
# answer is that of the values alone (the other entries are zeros, finite), so the check reads
# the values. Why a patch of the class: Keras wraps the optimizer itself (`compile` under a
# mixed_float16 policy), and nothing of ours runs before the check. See docs/optimizers.md,
# "Mixed precision".
def _check_finite_of_slices(check_finite):
  """`check_finite` of each IndexedSlices' values instead of the slices, float32 and float64
  ones by `all_finite`."""

  @functools.wraps(check_finite)
  def check(self, grads):
    summed, rest = [], []
    for g in grads:
      sparse = isinstance(g, tf.IndexedSlices)
      values = g.values if sparse else g
      summable = sparse and tf.as_dtype(values.dtype) in (tf.float32, tf.float64)
      (summed if summable else rest).append(values)
    if not summed:
      return check_finite(self, rest)
    return tf.reduce_all(tf.stack([all_finite(v) for v in summed] + [check_finite(self, rest)]))

  check.checks_slices_values = True
  return check


def all_finite(values):
  """`reduce_all(is_finite(values))`, the answer of Keras' check, from one read of the values
  where they are finite: a finite sum of them means each is (an infinity or a NaN makes the sum
  one), and only a sum that is not (a value that is not, or finite values whose sum overflows)
  takes the check of each value. Keras' check writes a boolean tensor of the values, then
  reduces it."""
  return tf.cond(tf.math.is_finite(tf.reduce_sum(values)), lambda: tf.constant(True),
                 lambda: tf.reduce_all(tf.math.is_finite(values)))


def _keep_loss_scale_check_sparse():
  cls = getattr(keras.optimizers, "LossScaleOptimizer", None)
  check_finite = getattr(cls, "check_finite", None)
  if check_finite is not None and not getattr(check_finite, "checks_slices_values", False):
    cls.check_finite = _check_finite_of_slices(check_finite)


_keep_loss_scale_check_sparse()


def own_trainable_variables(layer):
  """The trainable variables `layer` made itself, not its sublayers'."""
  return list(layer._trainable_variables)


def optimizer_model_variables(optimizer):
  """The model variables a built Keras 3 optimizer keeps state for, in its slot lists' order
  (none for another Keras' optimizer)."""
  return list(getattr(optimizer, "_trainable_variables", None) or [])


def direct_sublayers(layer):
  """The layers `layer` tracks directly (one level down)."""
  return list(layer._flatten_layers(include_self=False, recursive=False))


# Keras 3's optimizer base class takes a learning rate only as a Python float, a schedule or a
# callable; tf_keras' take tensors and NumPy scalars too. Why the Keras 3 flavor converts: see
# docs/design.md, "Keras flavors and checkpoints".
def as_learning_rate(value):
  """`value` as Keras 3 takes it: a constant scalar (int, NumPy, eager tensor) becomes a float.

  A variable is refused: Keras 3 keeps the learning rate in a variable of its
  own, so a variable given here would be read once and then silently ignored.
  """
  if isinstance(value, bool):
    raise TypeError(f"learning_rate must be a number, got {value!r}.")
  if hasattr(value, "assign"):  # tf.Variable, keras.Variable
    raise TypeError(
        f"The Keras 3 flavor cannot take a variable as learning_rate (got {value!r}): Keras 3 "
        "keeps the rate in a variable of its own. Pass a float and change it with "
        "`optimizer.learning_rate = new_value`, or pass a callable (`lambda: variable`) or a "
        "schedule.")
  if isinstance(value, numbers.Real) and not isinstance(value, float):
    return float(value)
  if isinstance(value, np.ndarray) and value.shape == ():
    return float(value)
  if isinstance(value, tf.Tensor) and not tf.is_symbolic_tensor(value) and value.shape.rank == 0:
    return float(value.numpy())
  return value
