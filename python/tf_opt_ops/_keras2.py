"""The Keras 2 package of this TensorFlow, the one place that knows where it lives.

TensorFlow 2.15's `tf.keras` is the `keras` 2.15 package; from TensorFlow 2.16
on, `keras` is Keras 3 and Keras 2 ships as `tf_keras` (what `tf.keras` is under
`TF_USE_LEGACY_KERAS=1`). The tf_keras-API and legacy flavors, their routers and
the serialization registry build on the optimizers, layers and registry of that
package, so that models built with `tf.keras` on TensorFlow 2.15 compile with
them and the names we register are the ones `tf.keras` looks up. Every module
that needs Keras 2 asks here (never `import tf_keras`). A TensorFlow 2.15
process may have `tf_keras` 2.15 installed as well (TFRS depends on it): it is
not `tf.keras` there, and is not used.

Importing this module imports TensorFlow, but no Keras: `package()` and `src()`
import the package on first use and raise ModuleNotFoundError (naming it) when
it is not installed.
"""

import importlib

import tensorflow as tf

# The first TensorFlow whose `tf.keras` is Keras 3 (and Keras 2 is `tf_keras`).
KERAS3_TF_VERSION = (2, 16)


def tf_version():
  """(major, minor) of the running TensorFlow."""
  major, minor = tf.__version__.split(".")[:2]
  return int(major), int(minor)


def has_keras3():
  """Whether this TensorFlow works with Keras 3 (2.16 and later)."""
  return tf_version() >= KERAS3_TF_VERSION


# "tf_keras" from TensorFlow 2.16 on, "keras" (2.x) before.
NAME = "tf_keras" if has_keras3() else "keras"


def package():
  """The Keras 2 package (`tf_keras`, or `keras` 2.x on TensorFlow 2.15)."""
  return importlib.import_module(NAME)


def src(path):
  """A private module of the Keras 2 package, e.g. `src("optimizers.optimizer")`.

  tf_keras was forked from keras 2.15 and keeps its `src` layout, so one dotted
  path names the module in both.
  """
  return importlib.import_module(f"{NAME}.src.{path}")


def require_keras3():
  """Raises ImportError on TensorFlow 2.15, where `keras` is Keras 2 (tf.keras itself)
  and the Keras 3 flavor cannot exist; says what to use instead."""
  if has_keras3():
    return
  raise ImportError(
      f"tf_opt_ops.keras needs Keras 3, which needs TensorFlow 2.16 or later; this process runs "
      f"TensorFlow {tf.__version__}, whose tf.keras is Keras 2 (the keras 2.15 package). Use "
      "tf_opt_ops.tf_keras (for tf.keras.optimizers.Optimizer) or tf_opt_ops.legacy (for "
      "tf.keras.optimizers.legacy.Optimizer, e.g. TF Addons' LazyAdam checkpoints) instead; the "
      "top-level tf_opt_ops.LazyAdam etc. are tf_opt_ops.tf_keras's here.")


def is_tf_keras():
  """Whether `tf.keras` in this process is the Keras 2 package (TF 2.15, or
  TF_USE_LEGACY_KERAS=1 from 2.16 on)."""
  return tf.keras.optimizers.Optimizer.__module__.split(".")[0] == NAME


class SlotReference:
  """A model variable as Keras 2's slot creation reads it, with slots of `dtype`.

  `add_variable_from_reference` and `add_slot` give a slot the dtype of its
  variable, or its `true_dtype` when it has one (a mixed-precision variable's
  storage dtype); this view of `variable` has `dtype` there and forwards
  everything else (its key, name, shape, sharding) to `variable`, so the slot
  is created, listed and restored as the variable's.
  """

  def __init__(self, variable, dtype):
    self._slot_variable_of = variable
    self.true_dtype = tf.as_dtype(dtype)

  def __getattr__(self, name):
    return getattr(self.__dict__["_slot_variable_of"], name)
