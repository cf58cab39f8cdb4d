"""What the two tf_keras routers share (`routers.tf_keras`, `routers.legacy`).

Both take optimizers of either tf_keras API (new `tf_keras.optimizers.Optimizer`
and legacy OptimizerV2), as TensorFlow Recommenders' `CompositeOptimizer` does,
and have the peers' state: no counter of their own (`iterations` is the first
sub-optimizer's), `variables` are the sub-optimizers', and the checkpoint holds
`Optimizer<i>` dependencies, plus `default_optimizer` (MultiOptimizer; Merlin's
layout leaves it out with `save_default_optimizer=False`). A TFRS checkpoint
restores into ours with `assert_consumed()` and back; a Merlin one restores
into ours, the default optimizer starting fresh, and back with Merlin's layout.
Why: see docs/design.md, "Routers".
"""

import tensorflow as tf

from tf_opt_ops import _keras2
from tf_opt_ops import _tf_private
from tf_opt_ops.routers import core
from tf_opt_ops.routers.table import scope_name

keras2 = _keras2.package()  # tf_keras, or keras 2.15 on TensorFlow 2.15

_NewOptimizer = keras2.optimizers.Optimizer
_LegacyOptimizer = keras2.optimizers.legacy.Optimizer


class TfKerasFlavor(core.Flavor):
  """Both tf_keras optimizer APIs; `legacy` picks how identifier strings resolve."""

  own_counter = False

  def __init__(self, legacy):
    self.legacy = legacy
    self.name = "tf_keras legacy" if legacy else "tf_keras"

  def check_optimizer(self, optimizer, what):
    if not isinstance(optimizer, (_NewOptimizer, _LegacyOptimizer)):
      raise self.type_error(
          optimizer, what,
          "tf_keras.optimizers.Optimizer or tf_keras.optimizers.legacy.Optimizer (tf_keras)")
    if isinstance(optimizer, _keras2.loss_scale_optimizer_class()):
      raise ValueError(f"{what}: a LossScaleOptimizer cannot be used inside a router; wrap the "
                       "router in the LossScaleOptimizer instead.")

  def get(self, identifier):
    return keras2.optimizers.get(identifier, use_legacy_optimizer=self.legacy)

  def finish_config(self, config):
    # tf_keras' deserializer reads a config without this key as a legacy optimizer's.
    return config if self.legacy else dict(config, is_legacy_optimizer=False)

  def serialize(self, optimizer):
    return keras2.optimizers.serialize(optimizer)

  def deserialize(self, config, custom_objects=None):
    registered = config.get("registered_name") if isinstance(config, dict) else None
    if registered and registered != config.get("class_name"):
      # Inside tf_keras' SavedModel/HDF5 loading the legacy deserializer runs,
      # which looks classes up by `class_name` only.
      config = dict(config, class_name=registered)
    # A non-empty config says itself which API it is (`is_legacy_optimizer`).
    return keras2.optimizers.deserialize(config, custom_objects=custom_objects,
                                         use_legacy_optimizer=self.legacy)

  def serialize_layer(self, layer):
    return keras2.layers.serialize(layer)

  def deserialize_layer(self, config):
    return keras2.layers.deserialize(config)

  def var_key(self, variable):
    # As `tf_keras.optimizers.Optimizer._var_key`: one key per distributed variable.
    return _tf_private.variable_key(variable)

  def builds_once(self, optimizer):
    # OptimizerV2 creates slots for new variables on demand.
    return isinstance(optimizer, _NewOptimizer)

  def build(self, optimizer, variables, scope):
    if isinstance(optimizer, _NewOptimizer):
      with tf.init_scope():
        optimizer.build(variables)
      return
    # The scope keeps the names of the sub-optimizers' `iter` variables apart
    # (HDF5 files store optimizer weights by name).
    with tf.init_scope(), tf.name_scope(scope):
      _keras2.create_legacy_weights(optimizer, variables)

  def optimizer_variables(self, optimizer):
    if isinstance(optimizer, _NewOptimizer):
      return list(optimizer.variables)
    return list(optimizer.variables())

  def learning_rate(self, optimizer):
    if isinstance(optimizer, _NewOptimizer):
      return optimizer.learning_rate
    return _keras2.legacy_hyperparameter(optimizer, "learning_rate")

  def apply(self, optimizer, grads_and_vars, name, aggregate):
    """One sub-optimizer's `apply_gradients`, with the keywords of its API."""
    if isinstance(optimizer, _NewOptimizer):
      return optimizer.apply_gradients(grads_and_vars, name=name,
                                       skip_gradients_aggregation=not aggregate)
    return optimizer.apply_gradients(grads_and_vars, name=name,
                                     experimental_aggregate_gradients=aggregate)

  def own_trainable_variables(self, layer):
    # Merlin's walk: each module's own `_trainable_weights`.
    return _keras2.own_trainable_weights(layer)

  def sub_layers(self, layer):
    return _keras2.direct_sublayers(layer) if _keras2.is_module(layer) else []

  @staticmethod
  def rename_iterations(optimizer, scope):
    """Gives an unbuilt tf_keras sub-optimizer's counter a unique name (`<scope>/iteration`):
    see `_keras2.rename_iterations`. OptimizerV2 names its counter `iter` in the scope
    `build` opens."""
    if isinstance(optimizer, _NewOptimizer):
      _keras2.rename_iterations(optimizer, scope)


class PeerRouter:
  """The tf_keras routers' behaviour over either base class (mixed in before it)."""

  def _track_optimizer(self, optimizer, name):
    self._flavor.rename_iterations(optimizer, f"{scope_name(self._router_name())}/{name}")
    self._track_trackable(optimizer, name=name, overwrite=True)

  @property
  def iterations(self):
    """The first sub-optimizer's counter, as in TFRS' and Merlin's routers."""
    return self._first_optimizer().iterations

  @iterations.setter
  def iterations(self, variable):
    for optimizer in self.optimizers:
      optimizer.iterations = variable

  def _route_and_apply(self, grads_and_vars, name, aggregate):
    self._check_restored_default()
    grads_and_vars = list(grads_and_vars)
    for optimizer, pairs in self._table.route(grads_and_vars):
      self._flavor.apply(optimizer, pairs, name, aggregate)
    return self.iterations
