"""Raw wrappers of the fused ops, for users who write their own training loops.

Every wrapper takes the variables (`tf.Variable`, a Keras variable, or a
resource handle tensor), the gradient, and the hyperparameters as Python
numbers or scalar tensors. Hyperparameters are float64 for float64 variables
and float32 for every other type (float16/bfloat16 variables compute in float32
inside the kernels). Duplicate indices are summed inside the kernels; rows not
named by `indices` are not read or written. Each update's formula is stated
once, in its op's doc (`tf_opt_ops/ops/lazy_adam_ops.cc`,
`tf_opt_ops/ops/clippy_adagrad_ops.cc`, `tf_opt_ops/ops/rowwise_adagrad_ops.cc`,
`tf_opt_ops/ops/moving_average_ops.cc`, `tf_opt_ops/ops/accumulate_ops.cc`).
"""

import tensorflow as tf

from tf_opt_ops._loader import load_library
from tf_opt_ops._op_inputs import clippy_scalars as _clippy_scalars
from tf_opt_ops._op_inputs import handle as _handle
from tf_opt_ops._op_inputs import scalar as _scalar
from tf_opt_ops._op_inputs import scalar_dtype  # public here: the kernels' scalar dtype
from tf_opt_ops._op_inputs import value_dtype as _value_dtype

# The op names carry the library prefix `TfOptOps>`, so a SavedModel that uses
# them names this library when it is loaded without it.
OP_NAMES = (
    "TfOptOps>ResourceSparseApplyLazyAdam",
    "TfOptOps>ResourceSparseApplyLazyAdamV2",
    "TfOptOps>ResourceSparseApplyLazyAdamW",
    "TfOptOps>ResourceSparseApplyLazyAdamWV2",
    "TfOptOps>ResourceSparseApplyLazyAdamAveraged",
    "TfOptOps>ResourceSparseApplyLazyAdamWAveraged",
    "TfOptOps>ResourceSparseApplyLazyAdamScaled",
    "TfOptOps>ResourceSparseApplyLazyAdamV2Scaled",
    "TfOptOps>ResourceSparseApplyLazyAdamWScaled",
    "TfOptOps>ResourceSparseApplyLazyAdamWV2Scaled",
    "TfOptOps>ResourceSparseApplyLazyAdamAveragedScaled",
    "TfOptOps>ResourceSparseApplyLazyAdamWAveragedScaled",
    "TfOptOps>ResourceSparseApplyLazyAdamWindow",
    "TfOptOps>ResourceSparseApplyLazyAdamWWindow",
    "TfOptOps>ResourceSparseApplyLazyAdamWindowAveraged",
    "TfOptOps>ResourceSparseApplyLazyAdamWWindowAveraged",
    "TfOptOps>ResourceApplyClippyAdagrad",
    "TfOptOps>ResourceSparseApplyClippyAdagrad",
    "TfOptOps>ResourceApplyClippyAdagradV2",
    "TfOptOps>ResourceSparseApplyClippyAdagradV2",
    "TfOptOps>ResourceSparseApplyClippyAdagradW",
    "TfOptOps>ResourceSparseApplyClippyAdagradWV2",
    "TfOptOps>ResourceSparseApplyClippyAdagradAveraged",
    "TfOptOps>ResourceSparseApplyClippyAdagradWAveraged",
    "TfOptOps>ResourceSparseApplyClippyAdagradScaled",
    "TfOptOps>ResourceSparseApplyClippyAdagradV2Scaled",
    "TfOptOps>ResourceSparseApplyClippyAdagradWScaled",
    "TfOptOps>ResourceSparseApplyClippyAdagradWV2Scaled",
    "TfOptOps>ResourceSparseApplyClippyAdagradAveragedScaled",
    "TfOptOps>ResourceSparseApplyClippyAdagradWAveragedScaled",
    "TfOptOps>ResourceSparseApplyClippyAdagradWindow",
    "TfOptOps>ResourceSparseApplyClippyAdagradWWindow",
    "TfOptOps>ResourceSparseApplyRowwiseAdagrad",
    "TfOptOps>ResourceSparseApplyLazyMovingAverage",
    "TfOptOps>ResourceSparseAccumulateRows",
    "TfOptOps>ResourceSparseTakeWindowGradient",
)
_LIGHT_TYPES = (tf.float16, tf.bfloat16, tf.float32)


def sparse_lazy_adam(var, m, v, grad, indices, *, beta_1_power, beta_2_power, lr=0.001, beta_1=0.9,
                     beta_2=0.999, epsilon=1e-7, use_locking=False, slot_dtype=None,
                     rowwise_second_moment=False, stochastic_rounding=False, seed=0, step=0,
                     weight_decay=None, moving_average=None, window=None, grad_scale=None,
                     grad_clip=None, name=None):
  """Lazy Adam on the rows of `var`, `m`, `v` named by `indices` (duplicates summed).

  The formula is the doc of op `TfOptOps>ResourceSparseApplyLazyAdam`
  (`tf_opt_ops/ops/lazy_adam_ops.cc`). `beta_1_power`/`beta_2_power` are beta^t for
  the 1-based step t, as in `tf.raw_ops.ResourceApplyAdam`. Returns the op (no
  outputs).

  Light slots (op `TfOptOps>ResourceSparseApplyLazyAdamV2`): `m`, `v` of
  another dtype than `var` (`slot_dtype`, read from `m` when it is a variable),
  `v` of shape `[var.shape[0]]` with `rowwise_second_moment`, 16-bit slots
  rounded stochastically with `stochastic_rounding`, the noise keyed by
  `seed` and the 1-based `step` (an int64 scalar).

  `weight_decay` (None: no decay): Keras' decoupled weight decay, `var -= var *
  weight_decay * lr` in `var`'s dtype, on each row `indices` names, once, before
  its update (op `TfOptOps>ResourceSparseApplyLazyAdamW`, or `...WV2` for light
  slots).

  `moving_average` (None: none): `(average, synced, count, ema_momentum)`, the
  arguments of `sparse_moving_average`, whose catch-up of each row's average then runs
  in the same pass, before the row's update (op
  `TfOptOps>ResourceSparseApplyLazyAdamAveraged`, `...WAveraged` with `weight_decay`):
  the numbers of `sparse_moving_average` followed by this update. CPU only, slots of
  `var`'s dtype only.

  `window` (None: none): `(accumulator, row_ids, row_count, steps)`, a gradient
  accumulation window (`sparse_accumulate_rows`' state) whose apply step this is, `grad`
  at `indices` its last micro-step: each row of the window is updated with the window's
  average, taken and cleared as `sparse_take_window_gradient` takes it, in the same pass
  (op `TfOptOps>ResourceSparseApplyLazyAdamWindow`, `...WWindow` with `weight_decay`):
  the numbers of `sparse_take_window_gradient` followed by this update. CPU only, slots
  of `var`'s dtype only, `accumulator` of `var`'s dtype and `row_ids` of `indices`'.

  Both `window` and `moving_average`: each row of the window is averaged as with `window`,
  its average caught up as with `moving_average`, then updated, in one pass (op
  `TfOptOps>ResourceSparseApplyLazyAdamWindowAveraged`, `...WWindowAveraged` with
  `weight_decay`): the numbers of `sparse_take_window_gradient` followed by this update with
  `moving_average` on the window's rows.

  `grad_scale` (None: none): `(factor,)` or `(factor, divisor)`, scalars of `grad`'s dtype:
  each gradient value is read as `grad * factor` (`/ divisor`), each operation rounded to that
  dtype, the bits of passing those values as `grad` (Keras' global_clipnorm and clipnorm)
  without a tensor of them (the `...Scaled` op of each op above but the window ops). CPU only.

  `grad_clip` (None: none): `(least, greatest)`, scalars of `grad`'s dtype: each value, scaled
  by `grad_scale` first where it is given, is clipped to them as `tf.clip_by_value` clips (a
  NaN stays NaN; Keras' clipvalue), in the same `...Scaled` op. CPU only.
  """
  grad = tf.convert_to_tensor(grad)
  s = scalar_dtype(grad.dtype)
  inputs = dict(var=_handle(var), m=_handle(m), v=_handle(v), beta1_power=_scalar(beta_1_power, s),
                beta2_power=_scalar(beta_2_power, s), lr=_scalar(lr, s), beta1=_scalar(beta_1, s),
                beta2=_scalar(beta_2, s), epsilon=_scalar(epsilon, s), grad=grad, indices=indices,
                use_locking=use_locking, name=name)
  if weight_decay is not None:
    inputs["weight_decay"] = _scalar(weight_decay, s)
  scaled = _grad_scale_inputs(grad_scale, grad_clip, grad.dtype, window, "sparse_lazy_adam", inputs)
  lib = load_library()
  slot_dtype = tf.as_dtype(slot_dtype or _value_dtype(m, grad))
  light_types = (tf.float16, tf.bfloat16, tf.float32)
  # V1 for slots of the table's dtype, and for dtypes V2 does not take (V1 names the mismatch).
  if not rowwise_second_moment and not stochastic_rounding and (slot_dtype == grad.dtype or
                                                                slot_dtype not in light_types or
                                                                grad.dtype not in light_types):
    # The op: ResourceSparseApplyLazyAdam, its W op with weight_decay, ...Window with window,
    # ...Averaged with moving_average (...WindowAveraged with both).
    name = "tf_opt_ops_resource_sparse_apply_lazy_adam" + ("" if weight_decay is None else "_w")
    if window is not None:
      accumulator, row_ids, row_count, steps = window
      name += "_window"
      inputs.update(accumulator=_handle(accumulator), row_ids=_handle(row_ids),
                    row_count=_handle(row_count), steps=tf.cast(steps, tf.int64))
    if moving_average is not None:
      average, synced, count, ema_momentum = moving_average
      name += "_averaged"
      inputs.update(average=_handle(average), synced=_handle(synced),
                    count=tf.cast(count, tf.int32),
                    ema_momentum=_table_momentum(ema_momentum, grad.dtype))
    return getattr(lib, name + scaled)(**inputs)
  if moving_average is not None:
    raise ValueError("sparse_lazy_adam: moving_average= needs slots of var's dtype (op "
                     "ResourceSparseApplyLazyAdamAveraged); with light slots, run "
                     "sparse_moving_average first, then this update.")
  if window is not None:
    raise ValueError("sparse_lazy_adam: window= needs slots of var's dtype (op "
                     "ResourceSparseApplyLazyAdamWindow); with light slots, run "
                     "sparse_take_window_gradient first, then this update.")
  op = getattr(
      lib, "tf_opt_ops_resource_sparse_apply_lazy_adam_" +
      ("v2" if weight_decay is None else "wv2") + scaled)
  return op(**inputs, step=tf.cast(step, tf.int64), Tslot=slot_dtype,
            rowwise_second_moment=rowwise_second_moment, stochastic_rounding=stochastic_rounding,
            seed=seed)


def clippy_adagrad(var, accum, grad, *, lr=0.001, epsilon=1e-7, variable_relative_threshold=0.1,
                   accumulator_relative_threshold=0.0, absolute_threshold=1e-7,
                   clip_accumulator_update=False, use_standard_accumulator_update=False,
                   use_locking=False, accumulator_dtype=None, stochastic_rounding=False, seed=0,
                   step=0, name=None):
  """Clippy Adagrad on every element of `var` with a dense `grad`.

  The formula is the doc of op `TfOptOps>ResourceApplyClippyAdagrad`
  (`tf_opt_ops/ops/clippy_adagrad_ops.cc`). Returns the clipping scale in [0, 1]
  (float64 for float64 variables, float32 otherwise), one per variable. `var`
  may be 0-D. An accumulator of another dtype than `var` (`accumulator_dtype`,
  read from `accum` when it is a variable), or `stochastic_rounding` of a 16-bit
  one keyed by `seed` and the 1-based `step`, runs op
  `TfOptOps>ResourceApplyClippyAdagradV2`.
  """
  return _apply_clippy(
      "resource_apply_clippy_adagrad", var, accum, grad,
      dict(lr=lr, epsilon=epsilon, variable_relative_threshold=variable_relative_threshold,
           accumulator_relative_threshold=accumulator_relative_threshold,
           absolute_threshold=absolute_threshold),
      dict(accumulator_dtype=accumulator_dtype, stochastic_rounding=stochastic_rounding, seed=seed,
           step=step), clip_accumulator_update=clip_accumulator_update,
      use_standard_accumulator_update=use_standard_accumulator_update, use_locking=use_locking,
      name=name)


def sparse_clippy_adagrad(var, accum, grad, indices, *, lr=0.001, epsilon=1e-7,
                          variable_relative_threshold=0.1, accumulator_relative_threshold=0.0,
                          absolute_threshold=1e-7, clip_accumulator_update=False,
                          use_standard_accumulator_update=False, use_locking=False,
                          accumulator_dtype=None, stochastic_rounding=False, seed=0, step=0,
                          weight_decay=None, moving_average=None, window=None, grad_scale=None,
                          grad_clip=None, name=None):
  """Clippy Adagrad on the rows named by `indices` (duplicates summed first).

  The math is that of `clippy_adagrad` over the touched rows only (op
  `TfOptOps>ResourceSparseApplyClippyAdagrad`, or its V2 for the accumulator
  options of `clippy_adagrad`); the scale is the minimum over those rows.
  Returns the scale.

  `weight_decay` (None: no decay): Keras' decoupled weight decay, `var -= var *
  weight_decay * lr` in `var`'s dtype, on each row `indices` names, once, before
  its update, whose scale then reads the decayed rows (op
  `TfOptOps>ResourceSparseApplyClippyAdagradW`, or `...WV2` for a light
  accumulator).

  `moving_average` (None: none): `(average, synced, count, ema_momentum)`, the
  arguments of `sparse_moving_average`, whose catch-up of each row's average then runs
  in the update's own pass, before the row's update (op
  `TfOptOps>ResourceSparseApplyClippyAdagradAveraged`, `...WAveraged` with
  `weight_decay`): the numbers of `sparse_moving_average` followed by this update. CPU
  only, `accum` of `var`'s dtype (no V2 options).

  `window` (None: none): `(accumulator, row_ids, row_count, steps)`, a gradient
  accumulation window (`sparse_accumulate_rows`' state) whose apply step this is, `grad`
  at `indices` its last micro-step: the rows of the window are updated with the window's
  average, taken and cleared as `sparse_take_window_gradient` takes it, in the same op
  (`TfOptOps>ResourceSparseApplyClippyAdagradWindow`, `...WWindow` with `weight_decay`):
  the numbers of `sparse_take_window_gradient` followed by this update. CPU only,
  `accum` and `accumulator` of `var`'s dtype (no V2 options), `row_ids` of `indices`'.

  `grad_scale`, `grad_clip` (None: none): as in `sparse_lazy_adam`, the gradient values read
  scaled and clipped in both passes (the `...Scaled` op of each op above but the window ops).
  CPU only.
  """
  grad = tf.convert_to_tensor(grad)
  extra_inputs = {}
  _grad_scale_inputs(grad_scale, grad_clip, grad.dtype, window, "sparse_clippy_adagrad",
                     extra_inputs)
  if weight_decay is not None:
    extra_inputs.update(weight_decay=_scalar(weight_decay, scalar_dtype(grad.dtype)))
  light = stochastic_rounding or tf.as_dtype(accumulator_dtype or
                                             _value_dtype(accum, grad)) != grad.dtype
  if moving_average is not None:
    if light:
      raise ValueError("sparse_clippy_adagrad: moving_average= needs an accumulator of var's "
                       "dtype (op ResourceSparseApplyClippyAdagradAveraged); with a light one, "
                       "run sparse_moving_average first, then this update.")
    if window is not None:
      raise ValueError("sparse_clippy_adagrad: no op takes both window= and moving_average=; "
                       "run sparse_take_window_gradient first, then this update.")
    average, synced, count, ema_momentum = moving_average
    extra_inputs.update(average=_handle(average), synced=_handle(synced),
                        count=tf.cast(count, tf.int32),
                        ema_momentum=_table_momentum(ema_momentum, grad.dtype))
  if window is not None:
    if light:
      raise ValueError("sparse_clippy_adagrad: window= needs an accumulator of var's dtype (op "
                       "ResourceSparseApplyClippyAdagradWindow); with a light one, run "
                       "sparse_take_window_gradient first, then this update.")
    accumulator, row_ids, row_count, steps = window
    extra_inputs.update(accumulator=_handle(accumulator), row_ids=_handle(row_ids),
                        row_count=_handle(row_count), steps=tf.cast(steps, tf.int64))
  return _apply_clippy(
      "resource_sparse_apply_clippy_adagrad", var, accum, grad,
      dict(lr=lr, epsilon=epsilon, variable_relative_threshold=variable_relative_threshold,
           accumulator_relative_threshold=accumulator_relative_threshold,
           absolute_threshold=absolute_threshold),
      dict(accumulator_dtype=accumulator_dtype, stochastic_rounding=stochastic_rounding, seed=seed,
           step=step), indices=indices, clip_accumulator_update=clip_accumulator_update,
      use_standard_accumulator_update=use_standard_accumulator_update, use_locking=use_locking,
      name=name, **extra_inputs)


def _apply_clippy(op_name, var, accum, grad, hyperparameters, light, **inputs_and_attrs):
  """Runs Clippy op `op_name` (or its V2, for a light accumulator; the W op of either with a
  `weight_decay` input; its window op with a window's `steps`, its averaged op with a moving
  average's `synced`) with the hyperparameters as scalars of the kernels' dtype."""
  grad = tf.convert_to_tensor(grad)
  decays = "weight_decay" in inputs_and_attrs
  fused = ("_window" if "steps" in inputs_and_attrs else
           "_averaged" if "synced" in inputs_and_attrs else "")
  scaled = "_scaled" if "grad_scale" in inputs_and_attrs else ""
  accumulator_dtype = tf.as_dtype(light["accumulator_dtype"] or _value_dtype(accum, grad))
  library = load_library()
  inputs = dict(var=_handle(var), accum=_handle(accum), grad=grad, **inputs_and_attrs,
                **_clippy_scalars(scalar_dtype(grad.dtype), **hyperparameters))
  # V1 for an accumulator of the table's dtype, and for dtypes V2 does not take (V1 names
  # the mismatch).
  if not light["stochastic_rounding"] and (accumulator_dtype == grad.dtype or accumulator_dtype
                                           not in _LIGHT_TYPES or grad.dtype not in _LIGHT_TYPES):
    return getattr(library,
                   f"tf_opt_ops_{op_name}{'_w' if decays else ''}{fused}{scaled}")(**inputs)
  return getattr(
      library, f"tf_opt_ops_{op_name}{'_wv2' if decays else '_v2'}{scaled}")(**inputs, step=tf.cast(
          light["step"], tf.int64), Taccum=accumulator_dtype, stochastic_rounding=bool(
              light["stochastic_rounding"]), seed=light["seed"])


def _grad_scale_inputs(grad_scale, grad_clip, dtype, window, caller, inputs):
  """Adds `grad_scale` and `grad_clip` (see `sparse_lazy_adam`) to `inputs`; returns the suffix
  of the op that takes them ("" for neither)."""
  if grad_scale is None and grad_clip is None:
    return ""
  if window is not None:
    raise ValueError(f"{caller}: no window op takes grad_scale= or grad_clip=; scale and clip "
                     "the gradient values first.")
  grad_scale = tuple(grad_scale or ())
  if len(grad_scale) > 2 or (not grad_scale and grad_clip is None):
    raise ValueError(f"{caller}: grad_scale= is (factor,) or (factor, divisor), got "
                     f"{len(grad_scale)} values.")
  if grad_clip is not None and len(grad_clip) != 2:
    raise ValueError(f"{caller}: grad_clip= is (least, greatest), got {len(grad_clip)} values.")
  # A Python number straight to `dtype`, as tf.clip_by_value converts its bounds.
  inputs["grad_scale"] = [
      tf.cast(tf.convert_to_tensor(x, dtype_hint=dtype), dtype)
      for x in grad_scale + tuple(grad_clip or ())
  ]
  if grad_clip is not None:
    inputs["clip_grad_values"] = True
  return "_scaled"


# The op's attr weight_decay_mode by name, and by FBGEMM's WeightDecayMode number.
WEIGHT_DECAY_MODES = ("none", "l2", "decoupled")


def weight_decay_mode_name(mode):
  """`mode` ("none", "l2", "decoupled", or FBGEMM's number 0, 1, 2) as the op's attr value."""
  if isinstance(mode, str) and mode in WEIGHT_DECAY_MODES:
    return mode
  if isinstance(mode, int) and not isinstance(mode, bool) and 0 <= mode < len(WEIGHT_DECAY_MODES):
    return WEIGHT_DECAY_MODES[mode]
  raise ValueError(f"weight_decay_mode must be one of {WEIGHT_DECAY_MODES} or FBGEMM's "
                   f"WeightDecayMode number 0, 1 or 2, got {mode!r}.")


def sparse_rowwise_adagrad(var, accum, grad, indices, *, lr=0.01, epsilon=1e-8, weight_decay=0.0,
                           weight_decay_mode="none", use_locking=False, stochastic_rounding=False,
                           seed=0, name=None):
  """Row-wise Adagrad (FBGEMM's EXACT_ROWWISE_ADAGRAD) on the rows named by `indices`.

  The formula is the doc of op `TfOptOps>ResourceSparseApplyRowwiseAdagrad`
  (`tf_opt_ops/ops/rowwise_adagrad_ops.cc`). `accum` holds one value per row of
  `var` (shape `[var.shape[0]]`), float32, or float64 for a float64 `var`.
  `weight_decay_mode` is "none", "l2" or "decoupled" (or FBGEMM's 0, 1, 2).
  `stochastic_rounding` rounds a float16 or bfloat16 `var` stochastically when
  stored, with noise keyed by `seed` (an int64). Returns the op (no outputs).
  """
  grad = tf.convert_to_tensor(grad)
  s = scalar_dtype(grad.dtype)
  return load_library().tf_opt_ops_resource_sparse_apply_rowwise_adagrad(
      var=_handle(var), accum=_handle(accum), lr=_scalar(lr, s), epsilon=_scalar(epsilon, s),
      weight_decay=_scalar(weight_decay, s), grad=grad, indices=indices,
      weight_decay_mode=weight_decay_mode_name(weight_decay_mode), use_locking=use_locking,
      stochastic_rounding=stochastic_rounding, seed=seed, name=name)


def sparse_moving_average(average, synced, var, indices, *, count, ema_momentum, dtype=None,
                          use_locking=False, name=None):
  """Brings the moving average of the rows of `var` named by `indices` up to date (each
  distinct row once).

  The formula is the doc of op `TfOptOps>ResourceSparseApplyLazyMovingAverage`
  (`tf_opt_ops/ops/moving_average_ops.cc`): run before a step's update of those rows;
  `average` has `var`'s dtype and shape, `synced` (int32, one per row) the count of EMA
  steps applied when each row's average was last brought up to date, `count` (int32)
  those applied so far. `dtype`, the table's, is read from `average` when it is a
  variable. Returns the op (no outputs).
  """
  if dtype is None:
    dtype = getattr(average, "dtype", None)
    if dtype is None or tf.as_dtype(dtype) == tf.resource:
      raise ValueError("sparse_moving_average: pass dtype= (the table's) with a bare resource "
                       "handle as average.")
  dtype = tf.as_dtype(dtype)
  return load_library().tf_opt_ops_resource_sparse_apply_lazy_moving_average(
      average=_handle(average), synced=_handle(synced), var=_handle(var), indices=indices,
      count=tf.cast(count, tf.int32), ema_momentum=_table_momentum(ema_momentum, dtype), T=dtype,
      use_locking=use_locking, name=name)


def _table_momentum(ema_momentum, dtype):
  """The EMA momentum as the ops take it for a table of `dtype`: rounded to `dtype`, in the
  scalar dtype (the kernels round it to the table's dtype too: exact both ways)."""
  s = scalar_dtype(dtype)
  return tf.cast(tf.cast(_scalar(ema_momentum, s), dtype), s)


def sparse_accumulate_rows(accumulator, row_ids, row_count, indices, values, name=None):
  """Adds a micro-step's gradient rows `values` at `indices` into `accumulator` and appends
  the indices to the window's row ids (`row_ids[:row_count]`).

  The formula is the doc of op `TfOptOps>ResourceSparseAccumulateRows`
  (`tf_opt_ops/ops/accumulate_ops.cc`). `values` has the accumulator's dtype; `indices`,
  `row_ids` and `row_count` one integer dtype. CPU only. Returns the op (no outputs).
  """
  return load_library().tf_opt_ops_resource_sparse_accumulate_rows(accumulator=_handle(accumulator),
                                                                   row_ids=_handle(row_ids),
                                                                   row_count=_handle(row_count),
                                                                   indices=indices, values=values,
                                                                   name=name)


def sparse_take_window_gradient(accumulator, row_ids, row_count, indices, values, steps, name=None):
  """The window's distinct rows and average gradient, `(rows, average)`, with `values` at
  `indices` its last micro-step; the window's rows of `accumulator` are then zeroed and
  `row_count` set to 0.

  The formula is the doc of op `TfOptOps>ResourceSparseTakeWindowGradient`
  (`tf_opt_ops/ops/accumulate_ops.cc`); the inputs are `sparse_accumulate_rows`', and
  `steps` the window's number of micro-steps. CPU only.
  """
  return load_library().tf_opt_ops_resource_sparse_take_window_gradient(
      accumulator=_handle(accumulator), row_ids=_handle(row_ids), row_count=_handle(row_count),
      indices=indices, values=values, steps=tf.cast(steps, tf.int64), name=name)
