"""LazyAdam, ClippyAdagrad and RowwiseAdagrad for the Keras 2 legacy optimizer API (OptimizerV2).

Base class `tf_keras.optimizers.legacy.Optimizer`. `LazyAdam` is what
TensorFlow Addons' and Merlin's `LazyAdam` are under TensorFlow >= 2.11: a
legacy `Adam` with slots `m` and `v` (all `m` slots, then all `v` slots), so
checkpoints move both ways with `tf_keras.optimizers.legacy.Adam` and
`Addons>LazyAdam` / `merlin.models>LazyAdam` model files load.
`ClippyAdagrad` keeps slots `accumulator`; with `export_clipping_factors=True`
each model variable also gets a scalar clipping factor, kept as a non-slot
optimizer weight (`add_weight`) named after the variable: a scalar *slot* could
not be revived from a SavedModel (tf_keras' `RestoredOptimizer.add_slot` gives
every slot its variable's shape).
"""

import re

import tensorflow as tf

from tf_opt_ops import _core
from tf_opt_ops import _keras2
from tf_opt_ops import _registry
from tf_opt_ops import _restore_hints
from tf_opt_ops import _tf_private
from tf_opt_ops._op_inputs import scalar_dtype
from tf_opt_ops.routers.legacy import CompositeOptimizer
from tf_opt_ops.routers.legacy import MultiOptimizer
from tf_opt_ops.routers.legacy import OptimizerBlocks

__all__ = [
    "LazyAdam", "ClippyAdagrad", "RowwiseAdagrad", "CompositeOptimizer", "MultiOptimizer",
    "OptimizerBlocks"
]

# tf_keras, or keras 2.15 on TensorFlow 2.15 (where it is tf.keras): see `_keras2`.
keras2 = _keras2.package()
_var_key = _keras2.legacy_var_key


class _LegacyMixin:
  """Behaviour both legacy optimizers share with the base class; each class's `_apply(grad,
  var, indices=None)` runs its op."""

  def _check_base_kwargs(self, kwargs):
    """What the base class takes needs no change in the legacy API."""

  def _resource_apply_dense(self, grad, var, apply_state=None):
    return self._apply(grad, var)

  def _resource_apply_sparse(self, grad, var, indices, apply_state=None):
    return self._apply(grad, var, indices)

  def _create_slots_for_sharded_variables(self, var_list):
    """Also moves slots that a checkpoint restored whole into the shards' slots.

    A checkpoint restored before the first step creates each slot with the
    saved value, under its model variable, which for a sharded variable is
    the `ShardedVariable`: one whole slot. OptimizerV2 then creates the slots
    per shard (from zeros) and replaces the whole one, so training went on
    from zeros. Its value goes into the `ShardedVariable` of the shards'
    slots instead, each shard taking its rows (the checkpoint may have been
    written with any sharding, or none). Why: see docs/design.md, "Invariants".
    """
    containers = {}
    for var in var_list:
      container = _tf_private.sharded_container(var)
      if container is not None:
        containers[id(container)] = container
    restored = []
    for container in containers.values():
      for slot_name, slot in self._slots.get(_var_key(container), {}).items():
        if slot is not container:
          restored.append((container, slot_name, slot))
    super()._create_slots_for_sharded_variables(var_list)
    for container, slot_name, whole in restored:
      with tf.init_scope():
        self.get_slot(container, slot_name).assign(whole.read_value())
      # No longer a slot: not listed among the optimizer's weights either.
      self._weights[:] = [w for w in self._weights if w is not whole]

  def _create_or_restore_slot_variable(self, slot_variable_position, slot_name, variable, **kwargs):
    # A checkpoint's slots of `variable`, before any is created from it or restored.
    _restore_hints.check_slot_variable_position(self, slot_variable_position, variable,
                                                self._slot_layouts(variable))
    return super()._create_or_restore_slot_variable(slot_variable_position, slot_name, variable,
                                                    **kwargs)

  def _slot_dtype(self, var, slot_name):
    """The dtype light state gives `var`'s slot `slot_name`, or None (the variable's)."""
    del var, slot_name
    return None

  def add_slot(self, var, slot_name, initializer="zeros", shape=None):
    # Every slot, those a checkpoint restores included, in its dtype (`_slot_dtype`).
    dtype = self._slot_dtype(var, slot_name)
    if dtype is not None and not isinstance(var, _keras2.VariableWithSlotDtype):
      var = _keras2.VariableWithSlotDtype(var, dtype)
    try:
      return super().add_slot(var, slot_name, initializer=initializer, shape=shape)
    except ValueError as e:  # a restored slot of another dtype than this optimizer keeps
      if "Tensor conversion requested dtype" not in str(e):
        raise
      raise ValueError(f"The checkpoint's slot {slot_name!r} of {var.name} does not have the slot "
                       f"layout of this {type(self).__name__}: {e}. {_core.LAYOUT_ADVICE}") from e

  @property
  def clipnorm(self):
    return self._clipnorm

  @clipnorm.setter
  def clipnorm(self, value):
    # OptimizerV2's `tf.clip_by_norm` of each gradient squares a slice's values into a tensor
    # of their own for the norm; `_core.clip_by_norm` gives its numbers without it, and the
    # clipped slices are scaled where the update reads them
    # (`_resource_apply_sparse_duplicate_indices`). Dense gradients, and OptimizerV2's checks,
    # stay its own.
    keras2.optimizers.legacy.Optimizer.clipnorm.fset(self, value)
    if value is not None:
      self._clipnorm_fn = _clip_sparse_by_norm(value, self._clipnorm_fn)

  def _resource_apply_sparse_duplicate_indices(self, grad, handle, indices, **kwargs):
    # The kernels (and the XLA fallback) sum duplicate indices themselves. OptimizerV2 clips
    # (clipnorm, global_clipnorm) before it splits the slices: their values, a product in a
    # graph, go to the op unscaled with the factor (`_core.scaled_slices_of`).
    scaled = _core.scaled_slices_of(grad, indices)
    if scaled is not None:
      return self._apply(scaled, handle)
    return self._resource_apply_sparse(grad, handle, indices, **kwargs)

  def _scalar_hyper(self, name, var):
    """A hyperparameter in the kernels' scalar dtype (float32 for half variables)."""
    return self._get_hyper(name, scalar_dtype(var.dtype.base_dtype))

  def _lr(self, var):
    return self._decayed_lr(scalar_dtype(var.dtype.base_dtype))


def _clip_sparse_by_norm(clipnorm, stock_clip):
  """OptimizerV2's clip of each gradient by `clipnorm` (`stock_clip`), its IndexedSlices by
  `_core.clip_by_norm` (the numbers of `tf.clip_by_norm`)."""

  def clip(grads_and_vars):
    grads_and_vars = list(grads_and_vars)
    # The stock clip runs on the dense gradients (and raises where it does, for any).
    sparse = [isinstance(g, tf.IndexedSlices) for g, _ in grads_and_vars]
    dense = iter(stock_clip([gv for gv, s in zip(grads_and_vars, sparse) if not s]))
    return [(_core.clip_by_norm(g, clipnorm), v) if s else next(dense)
            for (g, v), s in zip(grads_and_vars, sparse)]

  return clip


class LazyAdam(_core.LazyAdamMixin, _LegacyMixin, keras2.optimizers.legacy.Adam):
  __doc__ = _core.LAZY_ADAM_DOC

  def _create_slots(self, var_list):
    if not self._light_slots.enabled:
      return super()._create_slots(var_list)
    # Adam's slots (same names and order), in the light slots' shapes (and dtypes: add_slot).
    for var in var_list:
      self.add_slot(var, "m")
    for var in var_list:
      self.add_slot(var, "v", shape=self._light_slots.v_shape_for(var))

  def _slot_dtype(self, var, slot_name):
    return self._light_slots.slot_dtype_for(var) if self._light_slots.applies_to(var) else None

  def _apply(self, grad, var, indices=None):
    return _core.lazy_adam(var, self.get_slot(var, "m"), self.get_slot(var, "v"), grad,
                           indices=indices, lr=self._lr(var),
                           beta_1=self._scalar_hyper("beta_1", var),
                           beta_2=self._scalar_hyper("beta_2", var), epsilon=self.epsilon,
                           step=self.iterations + 1, use_locking=self._use_locking,
                           fused_dense=True, light=self._light_options(var))


class ClippyAdagrad(_core.ClippyAdagradMixin, _LegacyMixin, keras2.optimizers.legacy.Optimizer):
  __doc__ = _core.CLIPPY_DOC

  def _init_base_optimizer(self, learning_rate, name, kwargs, init_options):
    init_options()
    super(_core.ClippyAdagradMixin, self).__init__(name, **kwargs)
    self._set_hyper("learning_rate", kwargs.get("lr", learning_rate))
    self._set_hyper("decay", self._initial_decay)
    self._clipping_factors = {}  # _var_key(model variable) -> its clipping factor
    self._clipping_factor_names = set()

  def _create_slots(self, var_list):
    for var in var_list:
      self.add_slot(
          var, "accumulator",
          tf.compat.v1.constant_initializer(self.initial_accumulator_value,
                                            dtype=self._accumulator_dtype(var)))
      if self.export_clipping_factors:
        self._add_clipping_factor(var)

  def _slot_dtype(self, var, slot_name):
    light = self._light_accumulator
    return self._accumulator_dtype(var) if light.applies_to(var) else None

  def _add_clipping_factor(self, var):
    """A scalar zeros weight of `var`'s dtype, keyed like `var`'s slots; one for
    all the shards of a sharded variable (Why: see docs/design.md, "Invariants").

    Not a slot: tf_keras' `RestoredOptimizer` (what `tf.saved_model.load`
    revives) gives every slot its variable's shape. As a named optimizer
    weight it is a plain dependency of the optimizer in checkpoints and
    SavedModels (restored when created, like slots), and it is listed in
    `variables()` right after the variable's accumulator.
    """
    key = _factor_key(var)
    if key in self._clipping_factors:
      return self._clipping_factors[key]
    container = _tf_private.sharded_container(var)
    if container is not None:
      var = container.variables[0]
    # The variable's name, made unique among this optimizer's factors (eager
    # variables need not have unique names); stable for the same variables in
    # the same order. The suffix keeps it apart from `iter` and hyperparameters.
    base = str(_tf_private.shared_name(var) or var.name.split(":")[0])
    if container is not None:
      base = re.sub(r"/part_\d+$", "", base)
    base = base.replace("/", "_")
    name, n = f"{base}_clipping_factor", 0
    while name in self._clipping_factor_names:
      n += 1
      name = f"{base}_{n}_clipping_factor"
    # As `add_slot`: the variable's true dtype under mixed precision, created in
    # the optimizer's strategy scope and colocated with the variable.
    dtype = var.true_dtype if hasattr(var, "true_dtype") else var.dtype
    with self._distribution_strategy_scope():
      strategy = tf.distribute.get_strategy()
      if not strategy.extended.variable_created_in_scope(var):
        raise ValueError(
            f"Trying to create the clipping factor of {var.name} under the scope for "
            f"tf.distribute.Strategy ({strategy}), which is different from the scope used "
            "for the variable. Create it under the same strategy scope.")
      with strategy.extended.colocate_vars_with(var):
        factor = self.add_weight(name, shape=(), dtype=tf.as_dtype(dtype).base_dtype,
                                 initializer="zeros", trainable=False)
    self._clipping_factors[key] = factor
    self._clipping_factor_names.add(name)
    self._weights.append(factor)
    return factor

  def _get_clipping_factor(self, var):
    # As `get_slot`: looked up by `_var_key`, which maps a replica's component
    # (what `_apply` gets inside `strategy.extended.update`) to its distributed
    # variable. The factor is that strategy's distributed variable too, whose
    # `.handle` in the update context is this replica's component.
    return self._clipping_factors[_factor_key(var)]

  @property
  def clipping_factors(self):
    """The last clipping scale of each variable (scalar weights), in variable order."""
    if not self.export_clipping_factors:
      return []
    return list(self._clipping_factors.values())

  def _distributed_apply(self, distribution, grads_and_vars, apply_state, name):
    grads_and_vars = self._compute_sharded_scales(grads_and_vars, _var_key,
                                                  lambda var: self.get_slot(var, "accumulator"),
                                                  self._lr)
    return super()._distributed_apply(distribution, grads_and_vars, apply_state, name)

  def _apply(self, grad, var, indices=None):
    factor = self._get_clipping_factor(var) if self.export_clipping_factors else None
    return self._clippy_apply(grad, var, self.get_slot(var, "accumulator"), factor, self._lr(var),
                              use_locking=self._use_locking, indices=indices, key=_var_key(var),
                              step=self.iterations + 1)

  def get_config(self):
    config = super().get_config()
    config.update({
        "learning_rate": self._serialize_hyperparameter("learning_rate"),
        "decay": self._initial_decay,
    })
    config.update(self._clippy_config())
    return config


class RowwiseAdagrad(_core.RowwiseAdagradMixin, _LegacyMixin, keras2.optimizers.legacy.Optimizer):
  __doc__ = _core.ROWWISE_ADAGRAD_DOC

  def _init_base_optimizer(self, learning_rate, name, kwargs, init_options):
    init_options()
    super(_core.RowwiseAdagradMixin, self).__init__(name, **kwargs)
    self._set_hyper("learning_rate", kwargs.get("lr", learning_rate))
    self._set_hyper("decay", self._initial_decay)

  def _create_slots(self, var_list):
    for var in var_list:
      self.add_slot(
          var, "accumulator",
          tf.compat.v1.constant_initializer(self.initial_accumulator_value,
                                            dtype=_core.rowwise_accumulator_dtype(var)),
          shape=_core.rowwise_accumulator_shape(var))

  def _slot_dtype(self, var, slot_name):
    dtype = _core.rowwise_accumulator_dtype(var)
    return None if dtype == var.dtype.base_dtype else dtype

  def _apply(self, grad, var, indices=None):
    return self._rowwise_apply(grad, var, self.get_slot(var, "accumulator"), self._lr(var),
                               use_locking=self._use_locking, indices=indices)

  def get_config(self):
    config = super().get_config()
    config.update({
        "learning_rate": self._serialize_hyperparameter("learning_rate"),
        "decay": self._initial_decay,
    })
    config.update(self._rowwise_adagrad_config())
    return config


def _factor_key(var):
  """The key of `var`'s clipping factor: that of its first shard for a shard."""
  container = _tf_private.sharded_container(var)
  return _var_key(container.variables[0] if container is not None else var)


# Our names, and the names of the classes we replace. Why: see docs/design.md,
# "Keras flavors and checkpoints".
_registry.register("tf_keras", LazyAdam, "tf_opt_ops.legacy",
                   aliases=("Addons>LazyAdam", "merlin.models>LazyAdam"))
_registry.register("tf_keras", ClippyAdagrad, "tf_opt_ops.legacy")
_registry.register("tf_keras", RowwiseAdagrad, "tf_opt_ops.legacy")
