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

It is also the one module that reaches Keras 2's private modules and attributes
(docs/design.md, "Private framework APIs"): each use is one function below, so a
Keras 2 release that moves one breaks this module alone. Hooks our optimizer
subclasses override or call on themselves (`_resource_apply_sparse`,
`_create_slots`, `self._get_hyper`...) are the subclass API both Keras 2 bases
document, and stay in the subclasses.

Importing this module imports TensorFlow, but no Keras: `package()` and the
functions below import the package on first use and raise ModuleNotFoundError
(naming it) when it is not installed.
"""

import functools
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


def _src(path):
  """A private module of the Keras 2 package, e.g. `_src("optimizers.optimizer")`.

  tf_keras was forked from keras 2.15 and keeps its `src` layout, so one dotted
  path names the module in both.
  """
  return importlib.import_module(f"{NAME}.src.{path}")


# ------------------------------------------------------------ private Keras 2 APIs


def legacy_var_key(variable):
  """The key OptimizerV2 files `variable`'s slots under (`get_slot`, `_slots`): one per
  distributed variable, whatever replica's component `variable` is."""
  return _src("optimizers.legacy.optimizer_v2")._var_key(variable)


@functools.lru_cache(maxsize=None)
def base_optimizer_joins_shards():
  """Whether the new optimizer base checkpoints a sharded variable's slot as one
  ShardedVariable (tf_keras 2.16+: it defines `_trackable_children`), not one per shard."""
  return "_trackable_children" in vars(_src("optimizers.optimizer")._BaseOptimizer)


def loss_scale_optimizer_class():
  """The base of both Keras 2 LossScaleOptimizers (new and legacy API)."""
  return _src("mixed_precision.loss_scale_optimizer").BaseLossScaleOptimizer


def callable_list(items):
  """`items` as the new optimizer's `variables` returns them: a list that is also callable,
  since code written for OptimizerV2 calls `optimizer.variables()`."""
  return _src("optimizers.optimizer").CallableList(items)


def create_legacy_weights(optimizer, variables):
  """Creates an OptimizerV2's counter, hyperparameters and slots of `variables` now, as its
  first `apply_gradients` would."""
  optimizer._create_all_weights(variables)


def legacy_hyperparameter(optimizer, name):
  """An OptimizerV2's hyperparameter `name` as it holds it (a variable once created, else the
  value it was given); `getattr` would read it as a tensor."""
  return optimizer._get_hyper(name)


def is_module(layer):
  """Whether `layer` is a Keras 2 layer or model (a tf.Module with Keras' bookkeeping)."""
  return hasattr(layer, "_trainable_weights") and hasattr(layer, "_flatten_modules")


def own_trainable_weights(layer):
  """The trainable weights `layer` made itself, not its sublayers' (every trainable variable
  of an object that keeps no such list)."""
  if hasattr(layer, "_trainable_weights"):
    return list(layer._trainable_weights)
  return list(layer.trainable_variables)


def direct_sublayers(layer):
  """The layers and modules `layer` tracks directly (one level down)."""
  return list(layer._flatten_modules(include_self=False, recursive=False))


def rename_iterations(optimizer, scope):
  """Gives an unbuilt tf_keras optimizer's counter a unique name (`<scope>/iteration`).

  Every tf_keras optimizer names its counter `iteration`, and HDF5 files store
  optimizer weights by name, so two sub-optimizers of a router could not be
  saved. The counter is replaced (same value) the way the base class allows
  before the optimizer is built: `iterations` and its slot in `variables`.
  Checkpoints name it by attribute (`_iterations`), so their layout does not
  change. A built optimizer, one under a DTensor mesh, or one whose counter is
  named otherwise is left as it is.
  """
  old = optimizer._iterations
  variables = optimizer._variables
  if (getattr(optimizer, "_built", False) or getattr(optimizer, "_mesh", None) or not variables or
      variables[0] is not old or not str(old.name).startswith("iteration:")):
    return
  with tf.init_scope(), tf.name_scope(scope):
    new = tf.Variable(old.read_value(), name="iteration", dtype=old.dtype, trainable=False)
  optimizer._iterations = new
  # A new list: a ListWrapper changed in place refuses to be checkpointed.
  optimizer._variables = [new] + list(variables[1:])
  if hasattr(optimizer, "_coalesced_children"):  # Checkpoint children cached by the base.
    delattr(optimizer, "_coalesced_children")


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


class VariableWithSlotDtype:
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
