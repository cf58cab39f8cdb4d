"""LazyAdam, ClippyAdagrad and RowwiseAdagrad for tf_keras (`tf_keras.optimizers.Optimizer`).

This is `tf.keras` when `TF_USE_LEGACY_KERAS=1`. `LazyAdam`'s state is that of
`tf_keras.optimizers.Adam` (`[iteration, m0, v0, m1, v1, ...]`), and
`ClippyAdagrad`'s that of TensorFlow Recommenders' `ClippyAdagrad`
(`[iteration, accumulator0, clipping_factor0, ...]`), so checkpoints move both
ways. `jit_compile` defaults as the base class's does (on with a GPU): inside
XLA the fused ops run through their XLA kernels. Only where this install has
no XLA kernels for GPUs does it default to False (XLA would run the
standard-ops fallback; see `_core.xla_fallback`).
"""

import contextlib
import functools
import re

import tensorflow as tf

from tf_opt_ops import _core
from tf_opt_ops import _keras2
from tf_opt_ops import _registry
from tf_opt_ops import _restore_hints
from tf_opt_ops import _tf_private
from tf_opt_ops.routers.tf_keras import CompositeOptimizer
from tf_opt_ops.routers.tf_keras import MultiOptimizer
from tf_opt_ops.routers.tf_keras import OptimizerBlocks

__all__ = [
    "LazyAdam", "ClippyAdagrad", "RowwiseAdagrad", "CompositeOptimizer", "MultiOptimizer",
    "OptimizerBlocks"
]

# tf_keras, or keras 2.15 on TensorFlow 2.15 (where it is tf.keras): see `_keras2`.
keras2 = _keras2.package()
# tf_keras (TF 2.16+) keeps the state of a sharded variable as one ShardedVariable per slot in
# `variables` and checkpoints; keras 2.15 keeps each shard's slot apart. `_TfKerasMixin`
# joins them itself where the base class does not (see `_join_shards`).
_BASE_JOINS_SHARDS = _keras2.base_optimizer_joins_shards()


class _TfKerasMixin(_core.LazyMovingAverageMixin):
  """Behaviour both tf_keras optimizers share with the base class."""

  def _check_base_kwargs(self, kwargs):
    """tf_keras' Adam takes `adaptive_epsilon`, which LazyAdam does not implement; the
    `jit_compile` default is ours (`_core.default_jit_compile`)."""
    if kwargs.pop("adaptive_epsilon", False):
      raise ValueError("LazyAdam does not support `adaptive_epsilon=True`.")
    _core.default_jit_compile(kwargs)

  def _deduplicate_sparse_grad(self, grads):
    # The kernels (and the XLA fallback) sum duplicate indices themselves.
    return list(grads)

  def _clip_gradients(self, grads):
    # tf.clip_by_norm's numbers, without a tensor of the squared values.
    if self.clipnorm and self.clipnorm > 0:
      return [None if g is None else _core.clip_by_norm(g, self.clipnorm) for g in grads]
    # tf.clip_by_global_norm's, the sparse ones scaled where the update reads them.
    if self.global_clipnorm and self.global_clipnorm > 0 and _core.has_sparse(grads):
      return _core.tf_clip_by_global_norm(grads, self.global_clipnorm)
    return super()._clip_gradients(grads)

  def _apply_weight_decay(self, variables):
    # tf_keras' default weight_decay is 0, which would rewrite every row of
    # every table each step without changing a value.
    if _core.is_zero(self.weight_decay):
      return
    # Each variable is decayed in its update step, where its gradient says which rows (the
    # weight decay of the lazy Adam and Clippy ops, `_weight_decay_of`), but under DTensor and for
    # shards of a sharded variable (whose Clippy scale is computed before the update steps,
    # from the decayed values).
    super()._apply_weight_decay([v for v in variables if self._decays_whole(v)])

  def _decays_whole(self, variable):
    return self._on_mesh or _tf_private.sharded_container(variable) is not None

  def _weight_decay_of(self, variable):
    """The base class's weight decay of `variable` in its update step, or None where it has none
    there."""
    if _core.is_zero(self.weight_decay) or self._decays_whole(variable):
      return None
    return self.weight_decay if self._use_weight_decay(variable) else None

  def build(self, var_list):
    """Checks a checkpoint restored before building, then builds the state (`_build_state`)
    and the per-row state, with that checkpoint reaching the state of sharded variables."""
    self._check_restored_slots(var_list)
    with self._restoring_into_shards(var_list):
      self._build_state(var_list)
      self._build_row_state(var_list)

  def _build_base_state(self, var_list):
    """The base optimizer's state; True the first time only, when the optimizer's own state
    is to be created (the idiom of tf_keras' Adam.build)."""
    keras2.optimizers.Optimizer.build(self, var_list)
    if getattr(self, "_built", False):
      return False
    self._built = True
    return True

  def _build_row_state(self, var_list):
    """With EMA (outside tf.distribute and DTensor): each average's per-row sync step and its
    count of EMA steps, which keep it at sparse cost. Why: see docs/optimizers.md, "Keras
    features at sparse cost"."""
    if ("_average_synced" in self.__dict__ or not self.use_ema or tf.distribute.has_strategy() or
        self._on_mesh):
      return
    synced, counts = [], []
    for var in var_list:
      name = _tf_private.shared_name(var)
      synced.append(
          self.add_variable(shape=var.shape[:1], dtype=tf.int32, name=f"average_synced/{name}"))
      counts.append(self.add_variable(shape=(), dtype=tf.int32, name=f"average_count/{name}"))
    self._average_synced, self._average_counts = synced, counts

  @property
  def _lazy_average(self):
    return "_average_synced" in self.__dict__

  def _average_state(self, variable):
    index = self._index(variable)
    return (variable, self._model_variables_moving_average[index], self._average_synced[index],
            self._average_counts[index])

  def _update_model_variables_moving_average(self, var_list):
    if not self._lazy_average:
      return super()._update_model_variables_moving_average(var_list)
    # The averages of the rows the step changed moved in its update steps.
    for variable in var_list:
      _core.moving_average_applied(*self._average_state(variable))

  def _overwrite_model_variables_with_average_value(self, var_list):
    if self._lazy_average:
      for variable in var_list:
        _core.sync_moving_average(*self._average_state(variable), self.ema_momentum)
    return super()._overwrite_model_variables_with_average_value(var_list)

  def _index(self, variable):
    return self._index_dict[self._var_key(variable)]

  def _check_restored_slots(self, var_list):
    """Before building: a checkpoint restored already holds slots of this optimizer's layout
    (the slots of sharded variables are listed joined, and checked at their first step)."""
    var_list = list(var_list)
    if not getattr(self, "_built", False) and all(
        _tf_private.sharded_container(v) is None for v in var_list):
      _restore_hints.check_deferred_slot_lists(self, var_list, self._slot_layouts)

  def _lookup_dependency(self, name, cached_dependencies=None):
    # A checkpoint restored into the built optimizer: its slots, before any is read.
    # (The slots of sharded variables are listed by shard here, joined in checkpoints: they are
    # checked at their first step.)
    if (cached_dependencies is not None and name in _restore_hints.SLOT_LISTS and
        getattr(self, "_built", False)):
      slot_lists = {n: getattr(self, n) for n in _restore_hints.SLOT_LISTS if hasattr(self, n)}
      if all(
          _tf_private.sharded_container(v) is None for slots in slot_lists.values() for v in slots):
        _restore_hints.check_restored_slot_lists(self, slot_lists)
    return super()._lookup_dependency(name, cached_dependencies)

  def load_own_variables(self, store):
    _restore_hints.check_stored_slots(self, store)
    super().load_own_variables(store)

  def _create_or_restore_slot_variable(self, *args, **kwargs):
    # A TFA/Merlin (OptimizerV2) checkpoint: say which class restores it.
    with _restore_hints.name_the_legacy_class(self):
      return super()._create_or_restore_slot_variable(*args, **kwargs)

  @property
  def _on_mesh(self):
    """True under DTensor (`mesh=`): updates in the formulation DTensor can lay out."""
    return bool(self._mesh or self._run_with_dtensor)

  def add_variable_from_reference(self, model_variable, variable_name, shape=None,
                                  initial_value=None):
    container = None if _BASE_JOINS_SHARDS else _tf_private.sharded_container(model_variable)
    if container is None:
      return super().add_variable_from_reference(model_variable, variable_name, shape=shape,
                                                 initial_value=initial_value)
    # keras 2.15 would list this shard's slot in `_variables`: it goes to a list of its own.
    listed = self.__dict__["_variables"]
    self.__dict__["_variables"] = []  # not tracked: set in __dict__, as it is put back
    try:
      variable = super().add_variable_from_reference(model_variable, variable_name, shape=shape,
                                                     initial_value=initial_value)
    finally:
      self.__dict__["_variables"] = listed
    self._join_shards(container, model_variable, variable_name, variable)
    return variable

  def _join_shards(self, container, model_variable, variable_name, variable):
    """keras 2.15 only: lists the slots of a sharded variable's shards as tf_keras does.

    tf_keras lists the slots of a sharded variable's shards in `_variables`
    (and in checkpoints, `_trackable_children`) as one ShardedVariable, so a
    checkpoint restores into another sharding (see `_restoring_into_shards`).
    keras 2.15, TensorFlow 2.15's tf.keras, lists and saves each shard's slot:
    a checkpoint written on one device, restored into shards, restored the
    first shard's slot from the whole slot's position in `_variables` and left
    the rest at zero. This appends the ShardedVariable once its last shard's
    slot exists, where tf_keras does, so the state, the checkpoints and their
    restores are the same on every TensorFlow.
    """
    if "_shard_slot_builders" not in self.__dict__:
      self._shard_slot_builders = self._no_dependency({})  # stored unwrapped, not tracked
    shards = self._shard_slot_builders.setdefault((id(container), variable_name),
                                                  [None] * len(container.variables))
    shards[next(i for i, v in enumerate(container.variables) if v is model_variable)] = variable
    if all(shard is not None for shard in shards):
      self._variables.append(tf.__internal__.distribute.ShardedVariable(shards))
      self.__dict__.pop("_coalesced_children", None)  # children cached before this slot

  def _trackable_children(self, save_type="checkpoint", **kwargs):
    """keras 2.15 only: as tf_keras, lists of slots hold a sharded variable's slots as one
    ShardedVariable (see `_join_shards`)."""
    if _BASE_JOINS_SHARDS:
      return super()._trackable_children(save_type, **kwargs)
    if "_coalesced_children" not in self.__dict__:  # the same objects on every call
      children = super()._trackable_children(save_type, **kwargs)
      joined = {}
      for key, value in children.items():
        if isinstance(value, list) and key not in ("_variables", "_index_dict", "_learning_rate",
                                                   "_iterations"):
          items = []
          for var in value:
            container = _tf_private.sharded_container(var)
            item = var if container is None else container
            if not any(other is item for other in items):
              items.append(item)
          value = tf.__internal__.tracking.wrap(items)
        joined[key] = value
      self._coalesced_children = self._no_dependency(joined)
    return self._coalesced_children

  @contextlib.contextmanager
  def _restoring_into_shards(self, var_list):
    """Around `build`: a checkpoint restored before it reaches the state of sharded variables.

    tf_keras' optimizer restores its state by position in its lists
    (`_variables`, `_momentums`, ...), and joins the shards of a sharded
    variable's slots into one `ShardedVariable` only when it is built. A
    restore pending from before `build` would be applied while the lists
    fill, to single shards and lists that do not line up with the
    checkpoint: the slots silently kept their initial values. Here the
    pending restore waits until the state is complete and joined, then
    restores into the `ShardedVariable`s, each shard taking its rows (the
    checkpoint may have been written with any sharding, or none). Why: see
    docs/design.md, "Invariants".
    """
    building = not getattr(self, "_built", False)
    pending = {}
    if building and any(_tf_private.sharded_container(v) is not None for v in var_list):
      pending = dict(self._deferred_dependencies)
      self._deferred_dependencies.clear()
    yield
    if building:
      # The children tf_keras cached before the state existed (a restore before the first
      # step asks for them) lack the slot lists: checkpoints would list the slots in
      # `_variables` only, where tf_opt_ops.convert_checkpoint cannot tell them apart.
      self.__dict__.pop("_coalesced_children", None)
    if not pending:
      return
    children = self._trackable_children()
    for name, positions in pending.items():
      self._deferred_dependencies[name] = positions
      if name in children:
        self._handle_deferred_dependencies(name=name, trackable=children[name])


class LazyAdam(_core.LazyAdamMixin, _TfKerasMixin, keras2.optimizers.Adam):
  __doc__ = _core.LAZY_ADAM_DOC

  def build(self, var_list):
    self._check_restored_slots(var_list)
    with self._restoring_into_shards(var_list), _restore_hints.name_the_slot_layout(self):
      if not self._light_slots.enabled:
        keras2.optimizers.Adam.build(self, var_list)
      else:
        self._build_light_state(var_list)
      self._build_row_state(var_list)

  def _build_light_state(self, var_list):
    # Adam.build's state (same names and order), in the light slots' dtypes and shapes.
    if not self._build_base_state(var_list):
      return
    self._momentums, self._velocities = [], []
    for var in var_list:
      dtype = self._light_slots.slot_dtype_for(var)
      reference = _keras2.VariableWithSlotDtype(var, dtype)
      self._momentums.append(
          self.add_variable_from_reference(reference, "m", initial_value=tf.zeros(var.shape,
                                                                                  dtype)))
      self._velocities.append(
          self.add_variable_from_reference(
              reference, "v", initial_value=tf.zeros(self._light_slots.v_shape_for(var), dtype)))

  def update_step(self, gradient, variable):
    index = self._index(variable)
    light = self._light_options(variable)

    def update(moving_average=None):
      # The op decays the rows it updates (and with `moving_average` keeps their average), in
      # the same pass.
      return _core.lazy_adam(variable, self._momentums[index], self._velocities[index], gradient,
                             lr=self.learning_rate, beta_1=self.beta_1, beta_2=self.beta_2,
                             epsilon=self.epsilon, step=self.iterations + 1, on_mesh=self._on_mesh,
                             light=light, weight_decay=self._weight_decay_of(variable),
                             moving_average=moving_average)

    fused = update if light is None and not self._on_mesh else None
    return self._with_moving_average(gradient, variable, update, fused)


class ClippyAdagrad(_core.ClippyAdagradMixin, _TfKerasMixin, keras2.optimizers.Optimizer):
  __doc__ = _core.CLIPPY_DOC

  def _init_base_optimizer(self, learning_rate, name, kwargs, init_options):
    _core.default_jit_compile(kwargs)
    init_options()
    super(_core.ClippyAdagradMixin, self).__init__(name=name, **kwargs)
    self._learning_rate = self._build_learning_rate(learning_rate)
    self.clipping_factors = []

  def _build_state(self, var_list):
    # Same variables, names and order as TensorFlow Recommenders' ClippyAdagrad.
    if not self._build_base_state(var_list):
      return
    self._accumulators = []
    self.clipping_factors = []
    # _var_key(model variable) -> its clipping factor. The shards of a sharded
    # variable share one, created after the last shard's accumulator (Why: see
    # docs/design.md, "Invariants").
    self._factor_of = self._no_dependency({})
    shards_seen = {}
    initializer = keras2.initializers.Constant(self.initial_accumulator_value)
    for var in var_list:
      dtype = self._accumulator_dtype(var)
      if self._mesh:
        # With the variable's layout (a callable is not copied to a replicated one).
        initial_value = functools.partial(_filled_like, var, self.initial_accumulator_value)
      else:
        initial_value = initializer(shape=var.shape, dtype=dtype)
      reference = var if dtype == var.dtype else _keras2.VariableWithSlotDtype(var, dtype)
      self._accumulators.append(
          self.add_variable_from_reference(reference, "accumulator", initial_value=initial_value))
      if not self.export_clipping_factors:
        continue
      container = _tf_private.sharded_container(var)
      if container is None:
        factor = self.add_variable_from_reference(
            var,
            "clipping_factor",
            shape=(),
            # Under a mesh a scalar needs an initial value (else: zeros like `var`).
            initial_value=tf.zeros((), var.dtype) if self._mesh else None)
        self._add_clipping_factor(factor, [var])
        continue
      shards = shards_seen.setdefault(id(container), [])
      shards.append(var)
      if len(shards) == len(container.variables):
        name = re.sub(r"/part_\d+$", "", _tf_private.shared_name(var))
        factor = self.add_variable(shape=(), dtype=var.dtype, name=f"clipping_factor/{name}")
        self._add_clipping_factor(factor, shards)

  def _add_clipping_factor(self, factor, model_variables):
    self.clipping_factors.append(factor)
    for var in model_variables:
      self._factor_of[self._var_key(var)] = factor

  def _distributed_apply_gradients_fn(self, distribution, grads_and_vars, **kwargs):
    grads_and_vars = self._compute_sharded_scales(grads_and_vars, self._var_key,
                                                  lambda var: self._accumulators[self._index(var)],
                                                  lambda var: self.learning_rate)
    return super()._distributed_apply_gradients_fn(distribution, grads_and_vars, **kwargs)

  def update_step(self, gradient, variable):
    key = self._var_key(variable)
    factor = self._factor_of[key] if self.export_clipping_factors else None

    def update(moving_average=None):
      # The op decays the rows it updates (and with `moving_average` keeps their average), in
      # the same passes.
      return self._clippy_apply(gradient, variable, self._accumulators[self._index(variable)],
                                factor, self.learning_rate, key=key, on_mesh=self._on_mesh,
                                step=self.iterations + 1,
                                weight_decay=self._weight_decay_of(variable),
                                moving_average=moving_average)

    light = self._light_accumulator.op_options(variable)
    fused = update if light is None and not self._on_mesh else None
    return self._with_moving_average(gradient, variable, update, fused)

  def get_config(self):
    config = super().get_config()
    config["learning_rate"] = self._serialize_hyperparameter(self._learning_rate)
    config.update(self._clippy_config())
    return config


class RowwiseAdagrad(_core.RowwiseAdagradMixin, _TfKerasMixin, keras2.optimizers.Optimizer):
  __doc__ = _core.ROWWISE_ADAGRAD_DOC

  def _init_base_optimizer(self, learning_rate, name, kwargs, init_options):
    _core.default_jit_compile(kwargs)
    super(_core.RowwiseAdagradMixin, self).__init__(name=name, **kwargs)
    init_options()  # after the base class, which sets its own weight_decay
    self._learning_rate = self._build_learning_rate(learning_rate)

  def _apply_weight_decay(self, variables):
    # weight_decay is FBGEMM's, applied by the op on the rows each step touches.
    return

  def _build_state(self, var_list):
    if not self._build_base_state(var_list):
      return
    self._accumulators = []
    for var in var_list:
      dtype = _core.rowwise_accumulator_dtype(var)
      reference = var if dtype == var.dtype else _keras2.VariableWithSlotDtype(var, dtype)
      self._accumulators.append(
          self.add_variable_from_reference(reference, "accumulator",
                                           shape=_core.rowwise_accumulator_shape(var),
                                           initial_value=self._initial_accumulator(var)))

  def update_step(self, gradient, variable):

    def update():
      return self._rowwise_apply(gradient, variable, self._accumulators[self._index(variable)],
                                 self.learning_rate)

    return self._with_moving_average(gradient, variable, update)

  def get_config(self):
    config = super().get_config()
    config["learning_rate"] = self._serialize_hyperparameter(self._learning_rate)
    config.update(self._rowwise_adagrad_config())
    return config


def _filled_like(variable, value):
  """`value` in every element of a tensor shaped and laid out like `variable`."""
  return tf.ones_like(variable) * value


# Our names, and the names of the classes we replace. Why: see docs/design.md,
# "Keras flavors and checkpoints".
# TFRS' ClippyAdagrad is a tf_keras (new) optimizer; TFA's and Merlin's LazyAdam
# are legacy optimizers, whose names `tf_opt_ops.legacy` takes.
_registry.register("tf_keras", LazyAdam, "tf_opt_ops.tf_keras")
_registry.register("tf_keras", ClippyAdagrad, "tf_opt_ops.tf_keras",
                   aliases=("Custom>ClippyAdagrad",))
_registry.register("tf_keras", RowwiseAdagrad, "tf_opt_ops.tf_keras")
