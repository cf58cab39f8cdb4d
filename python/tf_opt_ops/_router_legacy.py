"""Router adapter for tf_keras legacy optimizers (OptimizerV2); see `tf_opt_ops.router`.

Like TensorFlow Recommenders' `CompositeOptimizer` and Merlin's
`MultiOptimizer`, which are OptimizerV2 subclasses, with every sub-optimizer
(the default one included) a checkpoint dependency.
"""

import tensorflow as tf
import tf_keras

from tf_opt_ops import router as _router
from tf_opt_ops._router_tf_keras import TfKerasFlavorBase
from tf_opt_ops._router_tf_keras import register
from tf_opt_ops.router import OptimizerBlocks

__all__ = ["CompositeOptimizer", "MultiOptimizer", "OptimizerBlocks"]

_LegacyOptimizer = tf_keras.optimizers.legacy.Optimizer


class _LegacyFlavor(TfKerasFlavorBase):
  name = "tf_keras legacy"
  builds_once = False  # OptimizerV2 creates slots for new variables on demand.
  own_variables_attr = "_weights"

  def check_optimizer(self, optimizer, what):
    if not isinstance(optimizer, _LegacyOptimizer):
      raise self.type_error(optimizer, what, "tf_keras.optimizers.legacy.Optimizer (OptimizerV2)")
    if isinstance(optimizer, tf_keras.mixed_precision.LossScaleOptimizer):
      raise ValueError(f"{what}: a LossScaleOptimizer cannot be used inside a router; wrap the "
                       "router in the LossScaleOptimizer instead.")

  def get(self, identifier):
    return tf_keras.optimizers.get(identifier, use_legacy_optimizer=True)

  use_legacy_optimizer = True

  def build(self, optimizer, variables, scope):
    # The scope keeps the names of the sub-optimizers' `iter` variables apart
    # (HDF5 files store optimizer weights by name).
    with tf.init_scope(), tf.name_scope(scope):
      optimizer._create_all_weights(variables)  # pylint: disable=protected-access

  def optimizer_variables(self, optimizer):
    return list(optimizer.variables())

  def learning_rate(self, optimizer):
    return optimizer._get_hyper("learning_rate")  # pylint: disable=protected-access


class _LegacyRouter(_LegacyOptimizer):
  """OptimizerV2 base of both routers: owns only its `iter` counter."""

  _flavor = _LegacyFlavor()
  _HAS_AGGREGATE_GRAD = True

  def _init_base(self, name):
    super().__init__(name)

  def _router_name(self):
    return self._name

  def _track_optimizer(self, optimizer, name):
    self._track_trackable(optimizer, name=name, overwrite=True)

  def _create_all_weights(self, var_list):
    _ = self.iterations
    self._table.build(list(var_list))

  def apply_gradients(self, grads_and_vars, name=None, experimental_aggregate_gradients=True):
    grads_and_vars = list(grads_and_vars)
    with tf.init_scope():
      _ = self.iterations
    for optimizer, pairs in self._table.route(grads_and_vars):
      optimizer.apply_gradients(pairs,
                                experimental_aggregate_gradients=experimental_aggregate_gradients)
    return self.iterations.assign_add(1)

  def variables(self):
    """The router's `iter`, then every sub-optimizer's variables."""
    return self._own_variables() + self._sub_variables()

  @property
  def weights(self):
    return self.variables()

  def set_weights(self, weights):
    self._assign_all(weights)

  def get_config(self):
    return self._router_config()

  def _resource_apply_dense(self, grad, handle, apply_state):
    raise NotImplementedError("A router applies gradients through its sub-optimizers.")

  def _resource_apply_sparse(self, grad, handle, indices, apply_state):
    raise NotImplementedError("A router applies gradients through its sub-optimizers.")


class CompositeOptimizer(_router.CompositeMixin, _LegacyRouter):
  """Applies a different optimizer to each group of variables (tf_keras legacy optimizers).

  TensorFlow Recommenders' signature: `(optimizer, callable returning
  variables)` pairs. A variable with a gradient that no pair claims raises
  `ValueError`.
  """

  def __init__(self, optimizers_and_vars, name="CompositeOptimizer"):
    self._init_base(name)
    self._init_composite(optimizers_and_vars, name)


class MultiOptimizer(_router.MultiMixin, _LegacyRouter):
  """Applies a different optimizer to each group of layers (tf_keras legacy; Merlin's class).

  `OptimizerBlocks(optimizer, blocks)` items, optimizers as instances or Keras
  identifier strings (resolved to legacy optimizers), `default_optimizer` for
  every variable no block claims.
  """

  def __init__(self, optimizers_and_blocks, default_optimizer="rmsprop", name="MultiOptimizer"):
    self._init_base(name)
    self._init_multi(optimizers_and_blocks, default_optimizer, name)


register(
    {
        "tf_opt_ops.legacy>CompositeOptimizer": CompositeOptimizer,
        "tf_opt_ops.legacy>MultiOptimizer": MultiOptimizer
    }, {"merlin.models>MultiOptimizer": MultiOptimizer})
