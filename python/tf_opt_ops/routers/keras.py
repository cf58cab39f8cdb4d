"""The routers for Keras 3 (`keras.optimizers.Optimizer`); see `tf_opt_ops.routers.core`.

Keras 3's base class owns an iteration counter, so these routers keep their own
`iterations` (one per `apply_gradients`) and always save the default
optimizer: no peer router exists for Keras 3. Why: see docs/design.md,
"Routers".
"""

from tf_opt_ops import _keras3  # ImportError on TensorFlow 2.15
from tf_opt_ops import _registry
from tf_opt_ops import _tf_private
from tf_opt_ops._keras3 import keras
from tf_opt_ops.routers import core

__all__ = ["CompositeOptimizer", "MultiOptimizer", "OptimizerBlocks"]


class _KerasFlavor(core.Flavor):
  name = "Keras 3"

  def check_optimizer(self, optimizer, what):
    if not isinstance(optimizer, keras.optimizers.Optimizer):
      raise self.type_error(optimizer, what, "keras.optimizers.Optimizer (Keras 3)")
    if isinstance(optimizer, keras.optimizers.LossScaleOptimizer):
      raise ValueError(f"{what}: a LossScaleOptimizer cannot be used inside a router; wrap the "
                       "router in the LossScaleOptimizer instead.")

  def get(self, identifier):
    return keras.optimizers.get(identifier)

  def serialize(self, optimizer):
    return keras.optimizers.serialize(optimizer)

  def deserialize(self, config, custom_objects=None):
    return keras.optimizers.deserialize(config, custom_objects=custom_objects)

  def serialize_layer(self, layer):
    return keras.layers.serialize(layer)

  def deserialize_layer(self, config):
    return keras.layers.deserialize(config)

  def var_key(self, variable):
    if isinstance(variable, keras.Variable):
      variable = variable.value
    return _tf_private.variable_key(variable)

  def builds_once(self, optimizer):
    return True

  def build(self, optimizer, variables, scope):
    with keras.name_scope(optimizer.name, caller=optimizer):
      optimizer.build(variables)

  def optimizer_variables(self, optimizer):
    return list(optimizer.variables)

  def own_trainable_variables(self, layer):
    if isinstance(layer, keras.layers.Layer):
      return _keras3.own_trainable_variables(layer)
    return list(layer.trainable_variables)

  def sub_layers(self, layer):
    if isinstance(layer, keras.layers.Layer):
      return _keras3.direct_sublayers(layer)
    return []


class OptimizerBlocks(core.OptimizerBlocks):
  __doc__ = core.OptimizerBlocks.__doc__
  _flavor = _KerasFlavor()


class _KerasRouter(keras.optimizers.Optimizer):
  """Keras 3 base of both routers: owns only its `iteration` counter."""

  _flavor = OptimizerBlocks._flavor
  _blocks_class = OptimizerBlocks

  def _init_base(self, name):
    # A callable learning rate creates no variable; `learning_rate` is overridden.
    super().__init__(learning_rate=lambda: 0.0, name=name)

  def _track_optimizer(self, optimizer, name):
    self._track_trackable(optimizer, name=name, overwrite=True)

  def build(self, variables):
    if self.built:
      return
    variables = list(variables)
    self._table.build(variables)
    super().build(variables)

  def apply(self, grads, trainable_variables=None):
    if trainable_variables is None:
      if not self.built:
        raise ValueError("When passing `grads` without `variables`, the optimizer must already "
                         "be built on a list of variables.")
      trainable_variables = self._trainable_variables
    grads, trainable_variables = list(grads), list(trainable_variables)
    if not grads:
      return
    self._check_restored_default()
    if not self.built:
      self.build(trainable_variables)
    for optimizer, pairs in self._table.route(zip(grads, trainable_variables)):
      optimizer.apply([g for g, _ in pairs], [v for _, v in pairs])
    self._iterations.assign_add(1)

  def apply_gradients(self, grads_and_vars):
    grads_and_vars = list(grads_and_vars)
    if grads_and_vars:
      grads, variables = zip(*grads_and_vars)
      self.apply(list(grads), list(variables))
    return self._iterations

  @property
  def variables(self):
    """The router's `iteration`, then every sub-optimizer's variables."""
    return self._all_variables()

  def set_weights(self, weights):
    if not self.built:
      raise ValueError("You are calling `set_weights()` on an optimizer that has not yet been "
                       "built. Call `optimizer.build(trainable_variables)` first.")
    self._assign_all(weights)

  def update_step(self, gradient, variable, learning_rate):
    raise NotImplementedError("A router applies gradients through its sub-optimizers.")


class CompositeOptimizer(core.CompositeMethods, _KerasRouter):
  """Applies a different optimizer to each group of variables (Keras 3).

  Args:
    optimizers_and_vars: `(optimizer, variables)` pairs; `variables` is a
      callable returning variables (TensorFlow Recommenders' signature), or any
      block `OptimizerBlocks` accepts. A variable with a gradient that no pair
      claims raises `ValueError`.
    name: the router's name.
  """


class MultiOptimizer(core.MultiMethods, _KerasRouter):
  """Applies a different optimizer to each group of layers (Keras 3; Merlin's signature).

  Args:
    optimizers_and_blocks: `OptimizerBlocks(optimizer, blocks)` items; an
      optimizer may be an instance or a Keras identifier string; blocks are
      layers, variables, callables returning variables or regular expressions
      matched in full against variable paths.
    default_optimizer: trains every variable no block claims.
    name: the router's name.
    update_optimizers_and_blocks: items routed as by `update()`.
  """

  def __init__(self, optimizers_and_blocks, default_optimizer="rmsprop", name="MultiOptimizer",
               update_optimizers_and_blocks=None):
    self._init_base(name)
    self._init_multi(optimizers_and_blocks, default_optimizer, name, update_optimizers_and_blocks,
                     save_default=True)


for _cls in (CompositeOptimizer, MultiOptimizer):
  _registry.register("keras", _cls, "tf_opt_ops",
                     aliases=(("merlin.models>MultiOptimizer",) if _cls is MultiOptimizer else ()))
