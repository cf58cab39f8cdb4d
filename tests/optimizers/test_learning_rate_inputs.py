"""What each flavor takes as `learning_rate`: the README's promise, checked against numbers."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from tf_opt_ops import keras as k3
from tf_opt_ops import legacy
from tf_opt_ops import tf_keras as tfk

FLAVORS = {
    "keras3": (k3, keras.Variable), "tf_keras": (tfk, tf.Variable), "legacy": (legacy, tf.Variable)
}
CONSTANTS = {"float": 0.25, "int": 1, "numpy": np.float32(0.25), "tensor": tf.constant(0.25)}


def _step(cls, variable_cls, learning_rate):
  variable = variable_cls(np.ones(3, np.float32))
  cls(learning_rate=learning_rate).apply_gradients([(tf.constant([1.0, 2.0, 3.0]), variable)])
  return variable.numpy()


@pytest.mark.parametrize("kind", CONSTANTS)
@pytest.mark.parametrize("name", ["LazyAdam", "ClippyAdagrad"])
@pytest.mark.parametrize("flavor", FLAVORS)
def test_every_flavor_takes_a_constant_learning_rate(flavor, name, kind):
  module, variable_cls = FLAVORS[flavor]
  cls = getattr(module, name)
  expected = _step(cls, variable_cls, float(CONSTANTS[kind]))
  np.testing.assert_array_equal(_step(cls, variable_cls, CONSTANTS[kind]), expected)
  assert not np.array_equal(expected, np.ones(3))
  if flavor == "keras3":
    assert isinstance(cls(learning_rate=CONSTANTS[kind]).get_config()["learning_rate"], float)


@pytest.mark.parametrize("name", ["LazyAdam", "ClippyAdagrad"])
def test_keras3_flavor_refuses_a_variable_learning_rate_saying_what_to_pass(name):
  with pytest.raises(TypeError, match=r"Pass a float and change it with `optimizer.learning_rate"):
    getattr(k3, name)(learning_rate=tf.Variable(0.1))
  with pytest.raises(TypeError, match="cannot take a variable"):
    getattr(k3, name)(learning_rate=keras.Variable(0.1))
