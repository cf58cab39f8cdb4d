"""The routers for tf_keras legacy optimizers (OptimizerV2 base), as TFRS' and Merlin's.

TensorFlow Recommenders' `CompositeOptimizer` and Merlin Models'
`MultiOptimizer` are OptimizerV2 subclasses; these have their state exactly
(see `tf_opt_ops.routers.tf_keras_common` and docs/design.md, "Routers") and
take optimizers of both tf_keras APIs. Identifier strings resolve to legacy
optimizers, as in Merlin.
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
  _flavor = _base.TfKerasFlavor(legacy=True)


class _LegacyRouter(_base.PeerRouter, keras2.optimizers.legacy.Optimizer):
  """OptimizerV2 base of both routers: no state of its own."""

  _flavor = OptimizerBlocks._flavor
  _blocks_class = OptimizerBlocks
  _HAS_AGGREGATE_GRAD = True

  def _init_base(self, name):
    super().__init__(name)

  def _create_all_weights(self, var_list):
    # What tf_keras calls before `set_weights` when it loads an HDF5 file.
    with tf.init_scope():
      self._table.build(list(var_list))

  def apply_gradients(self, grads_and_vars, name=None, experimental_aggregate_gradients=True):
    return self._route_and_apply(grads_and_vars, name, experimental_aggregate_gradients)

  def variables(self):
    """Every saved sub-optimizer's variables, in checkpoint order."""
    return self._all_variables()

  @property
  def weights(self):
    return self._all_variables()

  def set_weights(self, weights):
    self._assign_all(weights)

  def _resource_apply_dense(self, grad, handle, apply_state):
    raise NotImplementedError("A router applies gradients through its sub-optimizers.")

  def _resource_apply_sparse(self, grad, handle, indices, apply_state):
    raise NotImplementedError("A router applies gradients through its sub-optimizers.")


class CompositeOptimizer(core.CompositeMethods, _LegacyRouter):
  """Applies a different optimizer to each group of variables (tf_keras legacy).

  TensorFlow Recommenders' class: `(optimizer, callable returning variables)`
  pairs, optimizers of either tf_keras API. A variable with a gradient that no
  pair claims raises `ValueError`.
  """


class MultiOptimizer(core.MultiMethods, _LegacyRouter):
  """Applies a different optimizer to each group of layers (tf_keras legacy; Merlin's class).

  `OptimizerBlocks(optimizer, blocks)` items, optimizers as instances (either
  tf_keras API) or identifier strings (resolved to legacy optimizers),
  `default_optimizer` for every variable no block claims.
  Every sub-optimizer's state is saved, the default optimizer's included;
  `save_default_optimizer=False` keeps Merlin's checkpoint layout (see `__init__`).
  """


_registry.register("tf_keras", CompositeOptimizer, "tf_opt_ops.legacy")
_registry.register("tf_keras", MultiOptimizer, "tf_opt_ops.legacy",
                   aliases=("merlin.models>MultiOptimizer",))
