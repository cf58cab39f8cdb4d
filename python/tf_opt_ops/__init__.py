"""tf_opt_ops: fused sparse lazy Adam and Clippy Adagrad ops for TensorFlow.

`tf_opt_ops.ops` holds the raw op wrappers. Importing the package loads the op
library, so a missing or mismatched build fails here with an ImportError that
says what to do.

The optimizers come in one module per Keras optimizer API:
`tf_opt_ops.keras` (Keras 3), `tf_opt_ops.tf_keras` (tf_keras new optimizers)
and `tf_opt_ops.legacy` (tf_keras OptimizerV2). Importing the package imports
each one whose Keras is installed, which registers our classes and the names
of the classes they replace (`Addons>LazyAdam`, `merlin.models>LazyAdam`,
`Custom>ClippyAdagrad`, ...) for loading model files. The names at the top
level are the flavor matching `tf.keras` in this process (Keras 3, or tf_keras
when `TF_USE_LEGACY_KERAS=1`).

On TensorFlow 2.15 `tf.keras` is Keras 2 (the keras 2.15 package): the tf_keras
and legacy flavors are built on it, `tf_opt_ops.keras` (Keras 3, which needs
TensorFlow 2.16) raises ImportError, and the top-level names are the tf_keras
flavor's.
"""

import importlib

from tf_opt_ops import _keras2
from tf_opt_ops import ops
from tf_opt_ops._loader import cpu_isa
from tf_opt_ops._loader import load_library
from tf_opt_ops._version import __version__
from tf_opt_ops.checkpoints import convert_checkpoint

__all__ = [
    "LazyAdam", "ClippyAdagrad", "RowwiseAdagrad", "CompositeOptimizer", "MultiOptimizer",
    "OptimizerBlocks", "ops", "keras_flavor", "convert_checkpoint", "cpu_isa", "__version__"
]

load_library()


def keras_flavor():
  """The flavor module name matching `tf.keras` here: "keras" or "tf_keras"."""
  return "tf_keras" if _keras2.is_tf_keras() else "keras"


def _import_flavor(flavor, keras_package):
  """The flavor module, or None when its Keras is not installed (tf_keras is optional)
  or, for Keras 3, this TensorFlow (2.15) predates it."""
  if flavor == "keras" and not _keras2.has_keras3():
    return None
  try:
    return importlib.import_module(f"tf_opt_ops.{flavor}")
  except ModuleNotFoundError as e:
    if e.name != keras_package:
      raise
    return None


_FLAVORS = {
    "keras": _import_flavor("keras", "keras"),
    "tf_keras": _import_flavor("tf_keras", _keras2.NAME),
    "legacy": _import_flavor("legacy", _keras2.NAME),
}
_default = _FLAVORS[keras_flavor()]
LazyAdam = _default.LazyAdam
ClippyAdagrad = _default.ClippyAdagrad
RowwiseAdagrad = _default.RowwiseAdagrad
CompositeOptimizer = _default.CompositeOptimizer
MultiOptimizer = _default.MultiOptimizer
OptimizerBlocks = _default.OptimizerBlocks
