"""tf_opt_ops: fused sparse lazy Adam and Clippy Adagrad ops for TensorFlow.

`tf_opt_ops.ops` holds the raw op wrappers. Importing the package loads the op
library, so a missing or mismatched build fails here with an ImportError that
says what to do.

The optimizers come in one module per Keras optimizer API:
`tf_opt_ops.keras` (Keras 3), `tf_opt_ops.tf_keras` (tf_keras new optimizers)
and `tf_opt_ops.legacy` (tf_keras OptimizerV2). `tf_opt_ops.LazyAdam` and
`tf_opt_ops.ClippyAdagrad` are the flavor matching `tf.keras` in this process
(Keras 3, or tf_keras when `TF_USE_LEGACY_KERAS=1`).
"""

import importlib

from tf_opt_ops import ops
from tf_opt_ops._loader import load_library

load_library()

from tf_opt_ops._version import __version__

_FLAVOR_EXPORTS = ("LazyAdam", "ClippyAdagrad", "CompositeOptimizer", "MultiOptimizer",
                   "OptimizerBlocks")


def keras_flavor():
  """The flavor module name matching `tf.keras` here: "keras" or "tf_keras"."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top

  module = tf.keras.optimizers.Optimizer.__module__
  return "tf_keras" if module.split(".")[0] == "tf_keras" else "keras"


def __getattr__(name):
  if name in _FLAVOR_EXPORTS:
    module = importlib.import_module(f"tf_opt_ops.{keras_flavor()}")
    return getattr(module, name)
  raise AttributeError(f"module 'tf_opt_ops' has no attribute {name!r}")


def _register_serializables():
  """Imports the flavor modules whose Keras is installed, registering our classes.

  Afterwards `Addons>LazyAdam`, `merlin.models>LazyAdam` and
  `Custom>ClippyAdagrad` resolve to our optimizers in model files. A Keras
  that is not installed is skipped (tf_keras is optional).
  """
  for flavor, package in (("keras", "keras"), ("tf_keras", "tf_keras"), ("legacy", "tf_keras")):
    try:
      importlib.import_module(f"tf_opt_ops.{flavor}")
    except ModuleNotFoundError as e:
      if e.name != package:
        raise


_register_serializables()
