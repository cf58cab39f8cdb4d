"""A TFA/Merlin-layout (OptimizerV2) checkpoint in the wrong flavor: the error names the class."""

import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from tf_opt_ops import legacy
from tf_opt_ops import tf_keras as tfk


def _trained(optimizer):
  tf_keras.utils.set_random_seed(0)
  model = tf_keras.Sequential([tf_keras.layers.Embedding(10, 2), tf_keras.layers.Dense(1)])
  model.compile(optimizer=optimizer, loss="mse")
  model.fit(np.arange(8).reshape(8, 1), np.ones((8, 1)), verbose=0)
  return model


@pytest.mark.parametrize("name", ["LazyAdam", "ClippyAdagrad"])
def test_legacy_checkpoint_into_tf_keras_flavor_says_use_the_legacy_class(name, tmp_path):
  # tf_opt_ops.legacy.LazyAdam has the layout of TFA's and Merlin's LazyAdam (slots m, v).
  writer = getattr(legacy, name)(0.1)
  path = tf.train.Checkpoint(model=_trained(writer), optimizer=writer).write(str(tmp_path / "c"))
  wrong = getattr(tfk, name)(0.1)
  with pytest.raises(ValueError, match=rf"Use tf_opt_ops\.legacy\.{name} instead"):
    tf.train.Checkpoint(model=_trained(wrong), optimizer=wrong).read(path)
  right = getattr(legacy, name)(0.1)
  model = _trained(right)
  status = tf.train.Checkpoint(model=model, optimizer=right).read(path)
  status.assert_consumed()
  assert int(right.iterations.numpy()) == int(writer.iterations.numpy()) == 1
