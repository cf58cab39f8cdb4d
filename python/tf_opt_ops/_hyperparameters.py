"""Hyperparameter values each Keras API's base class would refuse, turned into ones it takes.

Keras 3's optimizer base class takes a learning rate only as a Python float, a
schedule or a callable; tf_keras' take tensors and NumPy scalars too. Why the
Keras 3 flavor converts: see docs/design.md, "Keras flavors and checkpoints".
"""

import numbers

import numpy as np
import tensorflow as tf


def keras3_learning_rate(value):
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
