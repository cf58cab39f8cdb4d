"""The routers for tf_keras new optimizers (`tf_keras.optimizers.Optimizer` base).

They take optimizers of both tf_keras APIs and have TFRS'/Merlin's state; see
`tf_opt_ops.routers.tf_keras_common` and docs/design.md, "Routers". Identifier
strings resolve to tf_keras (not legacy) optimizers.
"""

import tensorflow as tf

from tf_opt_ops import _keras2
from tf_opt_ops import _registry
from tf_opt_ops.routers import core
from tf_opt_ops.routers import tf_keras_common as _base

__all__ = ["CompositeOptimizer", "MultiOptimizer", "OptimizerBlocks"]

keras2 = _keras2.package()  # tf_keras, or keras 2.15 on TensorFlow 2.15


class OptimizerBlocks(core.OptimizerBlocks):
  __doc__ = core.OptimizerBlocks.__doc__
  _flavor = _base.TfKerasFlavor(legacy=False)


class _TfKerasRouter(_base.PeerRouter, keras2.optimizers.Optimizer):
  """tf_keras base of both routers: no state of its own."""

  _flavor = OptimizerBlocks._flavor
  _blocks_class = OptimizerBlocks

  def _init_base(self, name):
    super().__init__(name=name, jit_compile=False)

  def _create_iteration_variable(self):
    # No counter of its own: `iterations` is the first sub-optimizer's.
    self._iterations = None

  def build(self, var_list):
    if getattr(self, "_built", False):
      return
    with tf.init_scope():
      self._table.build(list(var_list))
    self._built = True

  def apply_gradients(self, grads_and_vars, name=None, skip_gradients_aggregation=False, **kwargs):
    aggregate = (not skip_gradients_aggregation and
                 kwargs.pop("experimental_aggregate_gradients", True))
    grads_and_vars = list(grads_and_vars)
    if not getattr(self, "_built", False):
      self.build([v for _, v in grads_and_vars])
    return self._route_and_apply(grads_and_vars, name, aggregate)

  @property
  def variables(self):
    """Every saved sub-optimizer's variables, in checkpoint order."""
    return _keras2.callable_list(self._all_variables())

  def set_weights(self, weights):
    if not getattr(self, "_built", False):
      raise ValueError("You are calling `set_weights()` on an optimizer that has not yet been "
                       "built. Call `optimizer.build(trainable_variables)` first.")
    self._assign_all(weights)

  def update_step(self, gradient, variable):
    raise NotImplementedError("A router applies gradients through its sub-optimizers.")


class CompositeOptimizer(core.CompositeMethods, _TfKerasRouter):
  """Applies a different optimizer to each group of variables (tf_keras).

  TensorFlow Recommenders' signature: `(optimizer, callable returning
  variables)` pairs (any block `OptimizerBlocks` accepts works too); either
  tf_keras optimizer API. A variable with a gradient that no pair claims raises
  `ValueError`.
  """


class MultiOptimizer(core.MultiMethods, _TfKerasRouter):
  """Applies a different optimizer to each group of layers (tf_keras; Merlin's signature).

  `OptimizerBlocks(optimizer, blocks)` items, optimizers as instances (either
  tf_keras API) or identifier strings, `default_optimizer` for every variable
  no block claims.
  Every sub-optimizer's state is saved, the default optimizer's included;
  `save_default_optimizer=False` keeps Merlin's checkpoint layout (see `__init__`).
  """


for _cls in (CompositeOptimizer, MultiOptimizer):
  _registry.register("tf_keras", _cls, "tf_opt_ops.tf_keras")
