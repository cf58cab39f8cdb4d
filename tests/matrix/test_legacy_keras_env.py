"""Under TF_USE_LEGACY_KERAS=1 (TensorFlow 2.16 on) tf.keras is Keras 2 (tf_keras): the
top-level names are the tf_keras flavor's, every flavor still imports and trains, and the
serialization names resolve in the registry tf.keras reads."""

import pytest

import matrix_util

pytestmark = pytest.mark.skipif(not matrix_util.HAS_KERAS3,
                                reason="TensorFlow 2.15's tf.keras is always Keras 2")

CHECK = """
import numpy as np
import tensorflow as tf
import tf_opt_ops
from tf_opt_ops import keras as keras3_flavor, legacy, tf_keras as tf_keras_flavor

assert tf_opt_ops.keras_flavor() == "tf_keras", tf_opt_ops.keras_flavor()
assert tf.keras.optimizers.Optimizer.__module__.startswith("tf_keras."), tf.keras.__name__
for name in ("LazyAdam", "ClippyAdagrad", "CompositeOptimizer", "MultiOptimizer",
             "OptimizerBlocks"):
  assert getattr(tf_opt_ops, name) is getattr(tf_keras_flavor, name), name
assert issubclass(tf_opt_ops.LazyAdam, tf.keras.optimizers.Adam)
assert issubclass(legacy.LazyAdam, tf.keras.optimizers.legacy.Adam)

# The replaced libraries' names load into our classes through tf.keras.
get = tf.keras.optimizers.deserialize
assert type(get({"class_name": "Addons>LazyAdam", "config": {"learning_rate": 0.5}},
                use_legacy_optimizer=True)) is legacy.LazyAdam
assert type(get({"class_name": "Custom>ClippyAdagrad", "config": {"learning_rate": 0.5}},
                use_legacy_optimizer=False)) is tf_keras_flavor.ClippyAdagrad

# Each flavor's LazyAdam trains a model of its Keras; the Keras 3 one still works beside.
import keras
ids = np.random.default_rng(0).integers(0, 10, (32, 2)).astype(np.int32)
labels = np.random.default_rng(1).normal(size=(32, 1)).astype(np.float32)
for k, module in ((tf.keras, tf_opt_ops), (tf.keras, legacy), (keras, keras3_flavor)):
  model = k.Sequential([k.Input(shape=(2,), dtype="int32"), k.layers.Embedding(10, 3),
                       k.layers.Flatten(), k.layers.Dense(1)])
  model.compile(optimizer=module.LazyAdam(learning_rate=0.1), loss="mse")
  loss = model.fit(ids, labels, batch_size=8, epochs=3, shuffle=False, verbose=0).history["loss"]
  assert loss[-1] < loss[0], (module.__name__, loss)
print("LEGACY_KERAS_OK")
"""


def test_top_level_names_are_tf_keras_under_legacy_keras(tmp_path):
  result = matrix_util.run_python(CHECK, tmp_path, env={"TF_USE_LEGACY_KERAS": "1"})
  assert matrix_util.last_line(result, "LEGACY_KERAS_OK") == ""


def test_top_level_names_are_keras3_without_it(tmp_path):
  result = matrix_util.run_python(
      """
import tf_opt_ops
from tf_opt_ops import keras as keras3_flavor
assert tf_opt_ops.keras_flavor() == "keras"
assert tf_opt_ops.LazyAdam is keras3_flavor.LazyAdam
print("KERAS3_OK")
""", tmp_path, env={"TF_USE_LEGACY_KERAS": "0"})
  assert matrix_util.last_line(result, "KERAS3_OK") == ""
