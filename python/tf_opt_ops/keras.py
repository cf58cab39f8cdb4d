"""LazyAdam, ClippyAdagrad and RowwiseAdagrad for Keras 3 (`keras.optimizers.Optimizer`).

`tf.keras` is Keras 3 unless `TF_USE_LEGACY_KERAS=1`. The state of `LazyAdam`
is that of `keras.optimizers.Adam` (`[iteration, learning_rate, momentum0,
velocity0, ...]`), so checkpoints and `.keras` files move between the two.
Keras 3 never deduplicates sparse gradients; the fused kernels sum duplicates.
Keras 3 needs TensorFlow 2.16 or later: on TensorFlow 2.15 importing this
module raises ImportError naming the flavors that are `tf.keras` there.
"""

import tensorflow as tf

from tf_opt_ops import _core
from tf_opt_ops import _keras3  # ImportError on TensorFlow 2.15
from tf_opt_ops import _registry
from tf_opt_ops import _restore_hints
from tf_opt_ops import _tf_private
from tf_opt_ops._keras3 import keras
from tf_opt_ops.routers.keras import CompositeOptimizer
from tf_opt_ops.routers.keras import MultiOptimizer
from tf_opt_ops.routers.keras import OptimizerBlocks

__all__ = [
    "LazyAdam", "ClippyAdagrad", "RowwiseAdagrad", "CompositeOptimizer", "MultiOptimizer",
    "OptimizerBlocks"
]


class _ScalableIndexedSlices(tf.IndexedSlices):
  """IndexedSlices that `Optimizer.apply` can unscale (`g / loss_scale_factor`).

  Keras 3's base class divides every gradient by `loss_scale_factor`, which
  raises `TypeError` for a plain `tf.IndexedSlices`.
  """

  def __truediv__(self, other):
    return tf.IndexedSlices(self.values / tf.cast(other, self.values.dtype), self.indices,
                            self.dense_shape)


def _add_slot_variable(optimizer, var, name, dtype, shape=None, initializer="zeros"):
  """`optimizer.add_variable_from_reference(var, name)`, in `dtype` and `shape` (light state)
  where they differ from `var`'s; named as that names it."""
  shape = tuple(var.shape if shape is None else shape)
  if tf.as_dtype(dtype) == tf.as_dtype(var.dtype) and shape == tuple(var.shape):
    return optimizer.add_variable_from_reference(var, name, initializer=initializer)
  prefix = var.path if hasattr(var, "path") else str(var.name).replace(":", "_")
  return optimizer.add_variable(shape=shape, initializer=initializer, dtype=tf.as_dtype(dtype).name,
                                name=f"{prefix.replace('/', '_')}_{name}")


def _slot_prefix(var):
  """The name prefix `add_variable_from_reference` gives `var`'s slots."""
  prefix = var.path if hasattr(var, "path") else str(var.name).replace(":", "_")
  return prefix.replace("/", "_")


def _tf_variable(variable):
  """The tf.Variable a Keras 3 variable wraps (or `variable`)."""
  return variable.value if isinstance(variable, keras.Variable) else variable


class _Keras3Mixin(_core.LazyMovingAverageMixin):
  """Behaviour both Keras 3 optimizers share with the base class."""

  def __init__(self, learning_rate=0.001, **kwargs):
    # Keras 3 takes a Python float only; tensors and NumPy scalars are converted.
    super().__init__(learning_rate=_keras3.as_learning_rate(learning_rate), **kwargs)

  def _check_base_kwargs(self, kwargs):
    """What the base class takes needs no change in Keras 3."""

  def apply(self, grads, trainable_variables=None):
    if self.loss_scale_factor is not None:
      grads = [
          _ScalableIndexedSlices(g.values, g.indices, g.dense_shape) if isinstance(
              g, tf.IndexedSlices) else g for g in grads
      ]
    return super().apply(grads, trainable_variables)

  def _check_restored_slots(self, var_list):
    """Before building: a checkpoint restored already holds slots of this optimizer's layout."""
    if not self.built:
      _restore_hints.check_deferred_slot_lists(self, var_list, self._slot_layouts)

  def _lookup_dependency(self, name, cached_dependencies=None):
    # A checkpoint restored into the built optimizer: its slots, before any is read.
    if cached_dependencies is not None and name in _restore_hints.SLOT_LISTS and self.built:
      _restore_hints.check_restored_slot_lists(
          self, {n: getattr(self, n) for n in _restore_hints.SLOT_LISTS if hasattr(self, n)})
    return super()._lookup_dependency(name, cached_dependencies)

  def load_own_variables(self, store):
    _restore_hints.check_stored_slots(self, store)
    super().load_own_variables(store)

  def _clip_gradients(self, grads):
    # Keras 3 densifies sparse gradients to clip them by their global norm (its clipnorm and
    # clipvalue keep them sparse).
    if self.global_clipnorm and self.global_clipnorm > 0 and _core.has_sparse(grads):
      return _core.clip_by_global_norm(grads, self.global_clipnorm)
    return super()._clip_gradients(grads)

  def _clip_by_norm(self, values, axes=None):
    # The base class's numbers, without a tensor of the squared values.
    if axes is not None:
      return super()._clip_by_norm(values, axes)
    return _core.clip_by_norm(values, self.clipnorm)

  def _build_row_state(self, var_list):
    """The per-row state of the base class's features kept at sparse cost, after the base
    class's state: with gradient accumulation, the marks of the rows the window's sparse
    gradients named; with EMA (outside tf.distribute), each average's per-row sync step and
    its count of EMA steps. Why: see docs/optimizers.md, "Keras features at sparse cost"."""
    if getattr(self, "_row_state_built", False):
      return
    self._row_state_built = True
    if self.gradient_accumulation_steps:
      # Assigned whole, so tracked (in checkpoints).
      self._window_row_ids, self._window_row_counts = [], []
      for var in var_list:
        dtype = _core.row_id_dtype(var)
        self._window_row_ids.append(
            self._add_row_variable(var, "gradient_accumulator_row_ids", dtype))
        self._window_row_counts.append(
            self.add_variable(shape=(), initializer="zeros", dtype=dtype,
                              name=f"{_slot_prefix(var)}_gradient_accumulator_row_count"))
    if self.use_ema and not tf.distribute.has_strategy():
      self._average_synced = [self._add_row_variable(var, "average_synced") for var in var_list]
      self._average_counts = [
          self.add_variable(shape=(), initializer="zeros", dtype="int32",
                            name=f"{_slot_prefix(var)}_average_count") for var in var_list
      ]

  def _add_row_variable(self, var, name, dtype="int32"):
    """A variable of one integer per row of `var` (a scalar for a scalar)."""
    return self.add_variable(shape=tuple(var.shape[:1]), initializer="zeros", dtype=dtype,
                             name=f"{_slot_prefix(var)}_{name}")

  @property
  def _lazy_average(self):
    return getattr(self, "_average_synced", None) is not None

  def _average_state(self, variable):
    """(tf.Variable, its average, sync steps, count) of model or tf.Variable `variable`."""
    index = self._get_variable_index(variable)
    return (_tf_variable(variable), _tf_variable(self._model_variables_moving_average[index]),
            _tf_variable(self._average_synced[index]), _tf_variable(self._average_counts[index]))

  def _update_model_variables_moving_average(self, trainable_variables):
    if not self._lazy_average:
      return super()._update_model_variables_moving_average(trainable_variables)
    # The averages of the rows the step changed moved in its update steps; the base class's
    # first step (momentum 0) sets every average to its variable.
    first = tf.equal(self.iterations, 0)
    for variable in trainable_variables:
      _core.moving_average_applied(*self._average_state(variable), first=first)

  def _sync_moving_averages(self):
    if self._lazy_average:
      for variable in self._trainable_variables:
        _core.sync_moving_average(*self._average_state(variable), self.ema_momentum)

  def _overwrite_model_variables_with_average_value(self, trainable_variables):
    self._sync_moving_averages()
    return super()._overwrite_model_variables_with_average_value(trainable_variables)

  def save_own_variables(self, store):
    # A .keras file holds the averages up to date.
    self._sync_moving_averages()
    return super().save_own_variables(store)

  def _backend_apply_gradients(self, grads, trainable_variables):
    # Keras 3 accumulates every gradient densely, and applies and clears whole accumulators.
    if (not self.gradient_accumulation_steps or not _core.has_sparse(grads) or
        tf.distribute.has_strategy() or (_tf_private.in_xla_context() and _core.dense_feature(
            "gradient_accumulation_steps",
            "inside XLA, whose shapes are static: the rows a window named are a data-dependent "
            "number"))):
      return super()._backend_apply_gradients(grads, trainable_variables)
    steps = self.gradient_accumulation_steps
    positions = [self._get_variable_index(v) for v in trainable_variables]
    accumulators = [self._accumulated_gradients[i].value for i in positions]
    # The window's rows so far: ids and their count.
    windows = [(self._window_row_ids[i].value, self._window_row_counts[i].value) for i in positions]
    sparse = [isinstance(g, tf.IndexedSlices) for g in grads]

    def accumulate():
      for grad, accumulator, (ids, count), is_sparse in zip(grads, accumulators, windows, sparse):
        if is_sparse:
          _core.accumulate_rows(accumulator, ids, count, grad)
        else:
          accumulator.assign(accumulator + tf.cast(tf.convert_to_tensor(grad), accumulator.dtype))

    def apply_window():
      window, window_variables, fused = [], [], []
      for grad, variable, accumulator, (ids, count), is_sparse in zip(grads, trainable_variables,
                                                                      accumulators, windows,
                                                                      sparse):
        if is_sparse and self._applies_window(variable, accumulator):
          # One op takes the window's average and updates the rows with it.
          fused.append((grad, variable, (accumulator, ids, count, steps)))
          continue
        window_variables.append(variable)
        if is_sparse:
          # Its rows of the accumulator are cleared as the average is taken.
          window.append(_core.take_window_gradient(accumulator, ids, count, grad, steps))
        else:
          window.append((tf.convert_to_tensor(grad) + accumulator) / steps)
          accumulator.assign(tf.zeros_like(accumulator))
      window = self._clip_gradients(window)
      self._apply_weight_decay(window_variables)
      if window_variables:
        self._backend_update_step(window, window_variables, self.learning_rate)
      for grad, variable, taken in fused:
        self.update_step(grad, _tf_variable(variable), self.learning_rate, window=taken)

    keras.ops.cond((self._iterations + 1) % steps == 0, apply_window, accumulate)
    self._moving_average_step()

  def _applies_window(self, variable, accumulator):
    """Whether `update_step` takes `variable`'s window (`window=`) from its last micro-step's
    sparse gradient, averaging and updating its rows in one op; else the window's average
    is taken first (`_core.take_window_gradient`)."""
    # Clipping needs the window's whole average first. The EMA's catch-up runs in the window
    # op only where the averages are kept lazily (`_lazy_average`: not under tf.distribute),
    # on the window's rows, which the last micro-step's gradient alone does not name.
    clips = (self.clipnorm, self.clipvalue, self.global_clipnorm)
    if any(clips) or (self.use_ema and not self._lazy_average):
      return False
    return (self._has_window_op(variable, averaged=self.use_ema) and
            _core.window_fuses(_tf_variable(variable), accumulator))

  def _has_window_op(self, variable, averaged=False):
    """Whether this optimizer has a window op for `variable`'s state (its default layout),
    keeping the moving average where `averaged`."""
    return False

  def _moving_average_step(self):
    """The base class's EMA after a step (`_backend_apply_gradients`' end)."""
    if not self.use_ema:
      return
    self._update_model_variables_moving_average(self._trainable_variables)
    if self.ema_overwrite_frequency:
      keras.ops.cond(
          (self.iterations + 1) % self.ema_overwrite_frequency == 0,
          lambda: self._overwrite_model_variables_with_average_value(self._trainable_variables),
          lambda: None)

  def _apply_weight_decay(self, variables):
    # Each variable is decayed in its update step, where its gradient says which rows (the
    # weight decay of the lazy Adam and Clippy ops, `_weight_decay_of`).
    return

  def _weight_decay_of(self, variable):
    """The base class's weight decay of `variable`, or None where it has none."""
    # A zero weight decay would rewrite rows without changing a value.
    if _core.is_zero(self.weight_decay):
      return None
    # The model variable (update_step gets the tf.Variable it wraps): exclusions name it.
    model_variable = self._trainable_variables[self._get_variable_index(variable)]
    return self.weight_decay if self._use_weight_decay(model_variable) else None

  @classmethod
  def from_config(cls, config, custom_objects=None):
    config = dict(config)
    # Keys that Keras 2 optimizers (TFA, Merlin, TFRS) write and Keras 3 rejects.
    for key in ("is_legacy_optimizer", "jit_compile"):
      config.pop(key, None)
    if not config.get("decay"):  # 0.0 from legacy configs: nothing to warn about
      config.pop("decay", None)
    return super().from_config(config, custom_objects=custom_objects)


class LazyAdam(_core.LazyAdamMixin, _Keras3Mixin, keras.optimizers.Adam):
  __doc__ = _core.LAZY_ADAM_DOC

  def build(self, var_list):
    self._check_restored_slots(var_list)
    with _restore_hints.name_the_slot_layout(self):
      self._build_state(var_list)
    self._build_row_state(var_list)

  def _build_state(self, var_list):
    if self.built or not self._light_slots.enabled:
      return super().build(var_list)
    # Adam's state, in the light slots' dtypes and shapes.
    super(keras.optimizers.Adam, self).build(var_list)
    momentums, velocities = [], []
    for var in var_list:
      dtype = self._light_slots.slot_dtype_for(var)
      momentums.append(_add_slot_variable(self, var, "momentum", dtype))
      velocities.append(
          _add_slot_variable(self, var, "velocity", dtype,
                             self._light_slots.v_shape_for(var).as_list()))
    # Assigned whole, as Adam.build does: so tracked, the lists are in checkpoints' object
    # graphs (where convert_checkpoint finds the slots).
    self._momentums, self._velocities = momentums, velocities

  def _has_window_op(self, variable, averaged=False):
    # ResourceSparseApplyLazyAdamWindow, and ...WindowAveraged for the moving average.
    return self._light_options(variable) is None

  def update_step(self, gradient, variable, learning_rate, window=None):
    index = self._get_variable_index(variable)
    light = self._light_options(variable)

    def update(moving_average=None):
      # The op decays the rows it updates (and with `moving_average` keeps their average, with
      # `window` takes the window's average), in the same pass.
      return _core.lazy_adam(_tf_variable(variable), self._momentums[index],
                             self._velocities[index], gradient, lr=learning_rate,
                             beta_1=self.beta_1, beta_2=self.beta_2, epsilon=self.epsilon,
                             step=self.iterations + 1, light=light,
                             weight_decay=self._weight_decay_of(variable),
                             moving_average=moving_average, window=window)

    self._with_moving_average(gradient, variable, update, update if light is None else None)


class ClippyAdagrad(_core.ClippyAdagradMixin, _Keras3Mixin, keras.optimizers.Optimizer):
  __doc__ = _core.CLIPPY_DOC

  def _init_base_optimizer(self, learning_rate, name, kwargs, init_options):
    super(_core.ClippyAdagradMixin, self).__init__(learning_rate=learning_rate, name=name, **kwargs)
    init_options()
    self.clipping_factors = []

  def build(self, var_list):
    if self.built:
      return
    self._check_restored_slots(var_list)
    super().build(var_list)
    accumulators, clipping_factors = [], []
    initializer = keras.initializers.Constant(self.initial_accumulator_value)
    for var in var_list:
      accumulators.append(
          _add_slot_variable(self, var, "accumulator", self._accumulator_dtype(var),
                             initializer=initializer))
      if self.export_clipping_factors:
        # The name add_variable_from_reference would give; the shape is scalar.
        ref_name = var.path if hasattr(var, "path") else str(var.name).replace(":", "_")
        name = f"{ref_name.replace('/', '_')}_clipping_factor"
        clipping_factors.append(
            self.add_variable(shape=(), initializer="zeros", dtype=var.dtype, name=name))
    # Assigned whole, so tracked: the lists are in checkpoints' object graphs (where
    # tf_opt_ops.convert_checkpoint finds the accumulators).
    self._accumulators, self.clipping_factors = accumulators, clipping_factors
    self._build_row_state(var_list)

  def _has_window_op(self, variable, averaged=False):
    # No Clippy window op keeps a moving average.
    return not averaged and self._light_accumulator.op_options(_tf_variable(variable)) is None

  def update_step(self, gradient, variable, learning_rate, window=None):
    index = self._get_variable_index(variable)
    factor = self.clipping_factors[index] if self.export_clipping_factors else None

    def update(moving_average=None):
      # The op decays the rows it updates (and with `moving_average` keeps their average, with
      # `window` takes the window's average), in the same passes.
      return self._clippy_apply(gradient, _tf_variable(variable), self._accumulators[index], factor,
                                learning_rate, step=self.iterations + 1,
                                weight_decay=self._weight_decay_of(variable),
                                moving_average=moving_average, window=window)

    # ResourceSparseApplyClippyAdagradAveraged keeps the average of the default accumulator's
    # table only.
    light = self._light_accumulator.op_options(_tf_variable(variable))
    self._with_moving_average(gradient, variable, update, update if light is None else None)

  def get_config(self):
    config = super().get_config()
    config.update(self._clippy_config())
    return config


class RowwiseAdagrad(_core.RowwiseAdagradMixin, _Keras3Mixin, keras.optimizers.Optimizer):
  __doc__ = _core.ROWWISE_ADAGRAD_DOC

  def _init_base_optimizer(self, learning_rate, name, kwargs, init_options):
    super(_core.RowwiseAdagradMixin, self).__init__(learning_rate=learning_rate, name=name,
                                                    **kwargs)
    init_options()

  def build(self, var_list):
    if self.built:
      return
    self._check_restored_slots(var_list)
    super().build(var_list)
    accumulators = []
    initializer = keras.initializers.Constant(self.initial_accumulator_value)
    for var in var_list:
      accumulators.append(
          _add_slot_variable(self, var, "accumulator", _core.rowwise_accumulator_dtype(var),
                             _core.rowwise_accumulator_shape(var).as_list(),
                             initializer=initializer))
    # Assigned whole, so tracked: the list is in checkpoints' object graphs.
    self._accumulators = accumulators
    self._build_row_state(var_list)

  def update_step(self, gradient, variable, learning_rate):
    index = self._get_variable_index(variable)

    def update():
      # The op applies weight_decay as weight_decay_mode says (no base class decay).
      return self._rowwise_apply(gradient, variable, self._accumulators[index], learning_rate)

    self._with_moving_average(gradient, variable, update)

  def get_config(self):
    config = super().get_config()
    config.update(self._rowwise_adagrad_config())
    return config


# Our names, and the names of the classes we replace. Why: see docs/design.md,
# "Keras flavors and checkpoints".
_registry.register("keras", LazyAdam, "tf_opt_ops",
                   aliases=("Addons>LazyAdam", "merlin.models>LazyAdam"))
_registry.register("keras", ClippyAdagrad, "tf_opt_ops", aliases=("Custom>ClippyAdagrad",))
_registry.register("keras", RowwiseAdagrad, "tf_opt_ops")
