"""Router adapter for the tf_keras new optimizer (`tf_keras.optimizers.Optimizer`).

See `tf_opt_ops.router`. `TfKerasFlavorBase` is shared with the legacy adapter.
"""

import re

import tensorflow as tf
import tf_keras

from tf_keras.src.optimizers.optimizer import CallableList as _CallableList

from tf_opt_ops import router as _router
from tf_opt_ops.router import OptimizerBlocks

__all__ = ["CompositeOptimizer", "MultiOptimizer", "OptimizerBlocks"]


def _tf_var_key(variable):
  # As `tf_keras.optimizers.Optimizer._var_key`: one key per distributed variable.
  if hasattr(variable, "_distributed_container"):
    variable = variable._distributed_container()  # pylint: disable=protected-access
  else:
    try:
      handle = variable.handle
    except (AttributeError, ValueError):  # A DistributedVariable in cross-replica context.
      handle = None
    if hasattr(handle, "_distributed_container"):
      variable = handle._distributed_container()  # pylint: disable=protected-access
  return getattr(variable, "_unique_id", id(variable))


class TfKerasFlavorBase(_router.Flavor):
  """Behaviour both tf_keras flavors share."""

  def var_key(self, variable):
    return _tf_var_key(variable)

  use_legacy_optimizer = False

  def serialize(self, optimizer):
    return tf_keras.optimizers.serialize(optimizer)

  def deserialize(self, config, custom_objects=None):
    registered = config.get("registered_name") if isinstance(config, dict) else None
    if registered and registered != config.get("class_name"):
      # Inside tf_keras' SavedModel/HDF5 loading the legacy deserializer runs,
      # which looks classes up by `class_name` only.
      config = dict(config, class_name=registered)
    return tf_keras.optimizers.deserialize(config, custom_objects=custom_objects,
                                           use_legacy_optimizer=self.use_legacy_optimizer)


class _TfKerasFlavor(TfKerasFlavorBase):
  name = "tf_keras"

  def check_optimizer(self, optimizer, what):
    if not isinstance(optimizer, tf_keras.optimizers.Optimizer):
      raise self.type_error(optimizer, what, "tf_keras.optimizers.Optimizer (tf_keras new)")
    if isinstance(optimizer, tf_keras.mixed_precision.LossScaleOptimizer):
      raise ValueError(f"{what}: a LossScaleOptimizer cannot be used inside a router; wrap the "
                       "router in the LossScaleOptimizer instead.")

  def get(self, identifier):
    return tf_keras.optimizers.get(identifier)

  def build(self, optimizer, variables, scope):
    with tf.init_scope():
      optimizer.build(variables)

  @staticmethod
  def rename_iterations(optimizer, scope):
    """Gives an unbuilt sub-optimizer's counter a unique name (`<router>/Optimizer0/iteration`).

    Every tf_keras optimizer names its counter `iteration`, and HDF5 files store
    optimizer weights by name, so two sub-optimizers could not be saved. When the
    router takes the optimizer, the counter is replaced (same value) the way the
    base class allows before the optimizer is built: `iterations` and its slot
    in `variables`.
    """
    # pylint: disable=protected-access
    old = optimizer._iterations
    variables = optimizer._variables
    if (getattr(optimizer, "_built", False) or getattr(optimizer, "_mesh", None) or not variables or
        variables[0] is not old):
      return
    if not str(old.name).startswith("iteration:"):
      return
    with tf.name_scope(scope):
      new = tf.Variable(old.read_value(), name="iteration", dtype=old.dtype, trainable=False)
    optimizer._iterations = new
    # A new list: a ListWrapper changed in place refuses to be checkpointed.
    optimizer._variables = [new] + list(variables[1:])
    if hasattr(optimizer, "_coalesced_children"):  # Checkpoint children cached by the base.
      delattr(optimizer, "_coalesced_children")

  def optimizer_variables(self, optimizer):
    return list(optimizer.variables)


def _scope_name(name):
  return re.sub(r"[^A-Za-z0-9_.\-]", "_", str(name))


def increment_iterations(iterations):
  """`iterations += 1` once per step, also in a replica context of a strategy."""
  context = tf.distribute.get_replica_context()
  if tf.distribute.has_strategy() and context is not None:
    return context.merge_call(lambda strategy: iterations.assign_add(1))
  return iterations.assign_add(1)


class _TfKerasRouter(tf_keras.optimizers.Optimizer):
  """tf_keras base of both routers: owns only its `iteration` counter."""

  _flavor = _TfKerasFlavor()

  def _init_base(self, name):
    super().__init__(name=name, jit_compile=False)

  def _create_iteration_variable(self):
    # `<router name>/iteration`, apart from the sub-optimizers' counters.
    with tf.init_scope(), tf.name_scope(_scope_name(self.name)):
      self._iterations = tf.Variable(0, name="iteration", dtype=tf.int64, trainable=False)
    self._variables.append(self._iterations)

  def _router_name(self):
    return self.name

  def _track_optimizer(self, optimizer, name):
    with tf.init_scope():
      self._flavor.rename_iterations(optimizer, f"{_scope_name(self.name)}/{name}")
    self._track_trackable(optimizer, name=name, overwrite=True)

  def build(self, var_list):
    super().build(var_list)
    if getattr(self, "_built", False):
      return
    self._table.build(list(var_list))
    self._built = True

  def apply_gradients(self, grads_and_vars, name=None, skip_gradients_aggregation=False, **kwargs):
    grads_and_vars = list(grads_and_vars)
    if not getattr(self, "_built", False):
      with tf.init_scope():
        self.build([v for _, v in grads_and_vars])
    for optimizer, pairs in self._table.route(grads_and_vars):
      optimizer.apply_gradients(pairs, skip_gradients_aggregation=skip_gradients_aggregation,
                                **kwargs)
    return increment_iterations(self._iterations)

  @property
  def variables(self):
    """The router's `iteration`, then every sub-optimizer's variables."""
    return _CallableList(list(self._variables) + self._sub_variables())

  def set_weights(self, weights):
    if not getattr(self, "_built", False):
      raise ValueError("You are calling `set_weights()` on an optimizer that has not yet been "
                       "built. Call `optimizer.build(trainable_variables)` first.")
    self._assign_all(weights)

  def update_step(self, gradient, variable):
    raise NotImplementedError("A router applies gradients through its sub-optimizers.")

  def get_config(self):
    config = self._router_config()
    config["is_legacy_optimizer"] = False
    return config

  @classmethod
  def _clean_config(cls, config):
    config = dict(config)
    config.pop("is_legacy_optimizer", None)
    return config


class CompositeOptimizer(_router.CompositeMixin, _TfKerasRouter):
  """Applies a different optimizer to each group of variables (tf_keras new optimizers).

  Args:
    optimizers_and_vars: `(optimizer, variables)` pairs; `variables` is a
      callable returning variables (TensorFlow Recommenders' signature), or any
      block `OptimizerBlocks` accepts. A variable with a gradient that no pair
      claims raises `ValueError`.
    name: the router's name.
  """

  def __init__(self, optimizers_and_vars, name="CompositeOptimizer"):
    self._init_base(name)
    self._init_composite(optimizers_and_vars, name)

  get_config = _TfKerasRouter.get_config

  @classmethod
  def from_config(cls, config, custom_objects=None):
    return super().from_config(cls._clean_config(config), custom_objects)


class MultiOptimizer(_router.MultiMixin, _TfKerasRouter):
  """Applies a different optimizer to each group of layers (tf_keras new optimizers).

  Merlin's signature: `OptimizerBlocks(optimizer, blocks)` items, optimizers as
  instances or Keras identifier strings, `default_optimizer` for every
  variable no block claims.
  """

  def __init__(self, optimizers_and_blocks, default_optimizer="rmsprop", name="MultiOptimizer"):
    self._init_base(name)
    self._init_multi(optimizers_and_blocks, default_optimizer, name)

  get_config = _TfKerasRouter.get_config

  @classmethod
  def from_config(cls, config, custom_objects=None):
    return super().from_config(cls._clean_config(config), custom_objects)


def register(registered, aliases=None):
  for name, cls in registered.items():
    package, class_name = name.split(">")
    tf_keras.utils.register_keras_serializable(package=package, name=class_name)(cls)
  objects = tf_keras.utils.get_custom_objects()
  for name, cls in (aliases or {}).items():
    objects.setdefault(name, cls)


register({
    "tf_opt_ops.tf_keras>CompositeOptimizer": CompositeOptimizer,
    "tf_opt_ops.tf_keras>MultiOptimizer": MultiOptimizer
})
