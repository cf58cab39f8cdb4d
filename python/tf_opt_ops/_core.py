"""The shared optimizer core: math dispatch and op calls for every Keras flavor.

Each flavor module (`keras`, `tf_keras`, `legacy`) is a thin adapter that
finds the slot variables and resolves the hyperparameters the way its base
class does, then calls `lazy_adam` or `clippy_adagrad` here. This module
decides how the update runs:

- a sparse gradient (`tf.IndexedSlices`, or values + indices) goes to the fused
  sparse kernel, which sums duplicate indices itself;
- a dense gradient gets standard Adam (`ResourceApplyAdam`, the op tf_keras'
  legacy Adam uses) or the dense Clippy Adagrad kernel;
- inside an XLA context, where custom ops have no kernels, the same math runs
  in standard TensorFlow ops (unique + unsorted_segment_sum, gather, scatter),
  and a warning is logged once.

Variables may be `tf.Variable`s, Keras 3 variables (anything with `.handle`)
or resource handle tensors. Half-precision variables compute in float32; only
the stored values are rounded (SPEC section 2, "Types").
"""

import numbers
import threading

import tensorflow as tf
from tensorflow.python.ops import control_flow_util

from tf_opt_ops import ops

_logged = set()
_log_lock = threading.Lock()


def in_xla_context():
  """True while tracing inside an XLA-compiled function (`jit_compile=True`)."""
  if tf.executing_eagerly():
    return False
  return control_flow_util.GraphOrParentsInXlaContext(tf.compat.v1.get_default_graph())


def _log_fallback_once(what):
  with _log_lock:
    if what in _logged:
      return
    _logged.add(what)
  tf.get_logger().warning(
      "tf_opt_ops: %s runs inside an XLA-compiled function, where the fused ops have no "
      "XLA kernels; falling back to the same math in standard TensorFlow ops. Compile "
      "the training step without jit_compile to use the fused ops.", what)


def resolve(value):
  """A hyperparameter's current value: calls callables, leaves the rest."""
  if callable(value) and not isinstance(value, (tf.Variable, tf.Tensor)):
    return value()
  return value


def is_zero(value):
  """True for None or a Python number equal to 0 (weight decay that does nothing)."""
  if value is None:
    return True
  return isinstance(value, numbers.Number) and not isinstance(value, bool) and value == 0


def check_non_negative(**values):
  for name, value in values.items():
    if isinstance(value, numbers.Number) and value < 0:
      raise ValueError(f"`{name}` must be non-negative, got {value}.")


def _var_dtype(var, grad):
  dtype = getattr(var, "dtype", None)
  if dtype is None or (isinstance(var, tf.Tensor) and var.dtype == tf.resource):
    return tf.as_dtype(grad.dtype)
  return tf.as_dtype(dtype)


def _handle(variable):
  if isinstance(variable, tf.Tensor) and variable.dtype == tf.resource:
    return variable
  return variable.handle


def _cast(value, dtype):
  value = resolve(value)
  if isinstance(value, (tf.Tensor, tf.Variable)) or hasattr(value, "value"):
    return tf.cast(tf.convert_to_tensor(value), dtype)
  return tf.constant(value, dtype)


def deduplicate(values, indices):
  """Sums the rows of `values` that share an index; returns (values, unique indices)."""
  unique, positions = tf.unique(indices)
  summed = tf.math.unsorted_segment_sum(values, positions, tf.shape(unique)[0])
  return summed, unique


def _split(grad):
  if isinstance(grad, tf.IndexedSlices):
    return grad.values, grad.indices
  return grad, None


# ----------------------------------------------------------------------------- Lazy Adam


def lazy_adam(var, m, v, grad, *, lr, beta_1, beta_2, epsilon, step, use_locking=False,
              indices=None, fused_dense=False):
  """Lazy Adam on `var` with slots `m`, `v`.

  `grad` is a `tf.IndexedSlices` (or its values with `indices` given): only the
  named rows are updated, duplicates summed. A dense `grad` gets standard Adam
  on every element: `tf.raw_ops.ResourceApplyAdam` when `fused_dense` (what
  tf_keras' legacy Adam runs), else the arithmetic of Keras 3's and tf_keras'
  `Adam.update_step` (`1 - beta` taken in Python double precision, as they do),
  so dense results equal the flavor's own Adam. `step` is the 1-based step t;
  the hyperparameters may be numbers, tensors, variables or callables.
  """
  if indices is None:
    grad, indices = _split(grad)
  grad = tf.convert_to_tensor(grad)
  var_dtype = _var_dtype(var, grad)
  grad = tf.cast(grad, var_dtype)
  s = ops.scalar_dtype(var_dtype)
  beta_1, beta_2 = resolve(beta_1), resolve(beta_2)
  one_minus = [
      _cast(1 - b if isinstance(b, numbers.Number) else 1 - _cast(b, s), s)
      for b in (beta_1, beta_2)
  ]
  lr = _cast(lr, s)
  beta_1 = _cast(beta_1, s)
  beta_2 = _cast(beta_2, s)
  epsilon = _cast(epsilon, s)
  step = _cast(step, s)
  beta_1_power = tf.pow(beta_1, step)
  beta_2_power = tf.pow(beta_2, step)
  hypers = dict(beta_1_power=beta_1_power, beta_2_power=beta_2_power, lr=lr, beta_1=beta_1,
                beta_2=beta_2, epsilon=epsilon)
  if indices is not None:
    if in_xla_context():
      _log_fallback_once("LazyAdam")
      return _lazy_adam_sparse_composite(var, m, v, grad, indices, var_dtype, s,
                                         one_minus=one_minus, **hypers)
    return ops.sparse_lazy_adam(var, m, v, grad, indices, use_locking=use_locking, **hypers)
  # Standard ops only (ResourceApplyAdam has an XLA kernel): no fallback needed.
  if fused_dense and var_dtype in (tf.float32, tf.float64):
    return tf.raw_ops.ResourceApplyAdam(var=_handle(var), m=_handle(m), v=_handle(v), grad=grad,
                                        use_locking=use_locking, beta1_power=beta_1_power,
                                        beta2_power=beta_2_power, lr=lr, beta1=beta_1, beta2=beta_2,
                                        epsilon=epsilon)
  # Half types compute in float32 (in the variable's type 0.999 rounds to 1.0
  # in bfloat16 and would freeze v); only the stored values are rounded.
  return _adam_dense_composite(var, m, v, grad, var_dtype, s, one_minus=one_minus, **hypers)


def _adam_math(var, m, v, g, *, one_minus, beta_1_power, beta_2_power, lr, beta_1, beta_2, epsilon):
  del beta_1, beta_2  # used as one_minus = (1 - beta_1, 1 - beta_2)
  alpha = lr * tf.sqrt(1 - beta_2_power) / (1 - beta_1_power)
  m = m + (g - m) * one_minus[0]
  v = v + (tf.square(g) - v) * one_minus[1]
  var = var - (m * alpha) / (tf.sqrt(v) + epsilon)
  return var, m, v


def _lazy_adam_sparse_composite(var, m, v, grad, indices, var_dtype, s, **hypers):
  g, rows = deduplicate(tf.cast(grad, s), indices)
  handles = [_handle(x) for x in (var, m, v)]
  old = [
      tf.cast(tf.raw_ops.ResourceGather(resource=h, indices=rows, dtype=var_dtype), s)
      for h in handles
  ]
  new = _adam_math(*old, g, **hypers)
  return tf.group(*[
      tf.raw_ops.ResourceScatterUpdate(resource=h, indices=rows, updates=tf.cast(x, var_dtype))
      for h, x in zip(handles, new)
  ])


def _adam_dense_composite(var, m, v, grad, var_dtype, s, **hypers):
  handles = [_handle(x) for x in (var, m, v)]
  old = [tf.cast(tf.raw_ops.ReadVariableOp(resource=h, dtype=var_dtype), s) for h in handles]
  new = _adam_math(*old, tf.cast(grad, s), **hypers)
  return tf.group(*[
      tf.raw_ops.AssignVariableOp(resource=h, value=tf.cast(x, var_dtype))
      for h, x in zip(handles, new)
  ])


# ----------------------------------------------------------------------------- Clippy Adagrad


def clippy_adagrad(var, accum, grad, *, lr, epsilon, variable_relative_threshold,
                   accumulator_relative_threshold, absolute_threshold, clip_accumulator_update,
                   use_standard_accumulator_update, clipping_factor=None, use_locking=False,
                   indices=None):
  """Clippy Adagrad on `var` with accumulator `accum`; returns the scale.

  A sparse `grad` (`tf.IndexedSlices`, or values with `indices`) updates the
  named rows only. When `clipping_factor` (a scalar variable) is given, the
  scale is assigned to it.
  """
  if clip_accumulator_update and use_standard_accumulator_update:
    raise ValueError("clip_accumulator_update and use_standard_accumulator_update cannot "
                     "both be set to True.")
  if indices is None:
    grad, indices = _split(grad)
  grad = tf.convert_to_tensor(grad)
  var_dtype = _var_dtype(var, grad)
  grad = tf.cast(grad, var_dtype)
  s = ops.scalar_dtype(var_dtype)
  hypers = dict(lr=_cast(lr, s), epsilon=_cast(epsilon, s),
                variable_relative_threshold=_cast(variable_relative_threshold, s),
                accumulator_relative_threshold=_cast(accumulator_relative_threshold, s),
                absolute_threshold=_cast(absolute_threshold, s))
  flags = dict(clip_accumulator_update=bool(clip_accumulator_update),
               use_standard_accumulator_update=bool(use_standard_accumulator_update))
  if in_xla_context():
    _log_fallback_once("ClippyAdagrad")
    scale = _clippy_composite(var, accum, grad, indices, var_dtype, s, **hypers, **flags)
  elif indices is not None:
    scale = ops.sparse_clippy_adagrad(var, accum, grad, indices, use_locking=use_locking, **hypers,
                                      **flags)
  else:
    scale = ops.clippy_adagrad(var, accum, grad, use_locking=use_locking, **hypers, **flags)
  if clipping_factor is not None:
    cf_dtype = tf.as_dtype(clipping_factor.dtype)
    tf.raw_ops.AssignVariableOp(resource=_handle(clipping_factor), value=tf.cast(scale, cf_dtype))
  return scale


def clippy_math(w, a, g, *, lr, epsilon, variable_relative_threshold,
                accumulator_relative_threshold, absolute_threshold, clip_accumulator_update,
                use_standard_accumulator_update):
  """SPEC section 2 Clippy Adagrad on tensors; returns (new var, new accum, scale)."""
  if use_standard_accumulator_update:
    a = a + g * g
  p = tf.math.rsqrt(a + epsilon)
  delta = lr * g * p
  max_delta = (variable_relative_threshold * tf.abs(w) + accumulator_relative_threshold * p +
               absolute_threshold)
  per_element = tf.where(tf.equal(delta, 0), tf.ones_like(delta),
                         tf.math.divide_no_nan(max_delta, tf.abs(delta)))
  scale = tf.minimum(tf.ones([], delta.dtype), tf.reduce_min(per_element))
  if not use_standard_accumulator_update:
    update = g * scale if clip_accumulator_update else g
    a = a + update * update
  return w - delta * scale, a, scale


def _clippy_composite(var, accum, grad, indices, var_dtype, s, **kwargs):
  hv, ha = _handle(var), _handle(accum)
  if indices is not None:
    g, rows = deduplicate(tf.cast(grad, s), indices)
    w = tf.cast(tf.raw_ops.ResourceGather(resource=hv, indices=rows, dtype=var_dtype), s)
    a = tf.cast(tf.raw_ops.ResourceGather(resource=ha, indices=rows, dtype=var_dtype), s)
    w, a, scale = clippy_math(w, a, g, **kwargs)
    with tf.control_dependencies([
        tf.raw_ops.ResourceScatterUpdate(resource=ha, indices=rows, updates=tf.cast(a, var_dtype)),
        tf.raw_ops.ResourceScatterUpdate(resource=hv, indices=rows, updates=tf.cast(w, var_dtype)),
    ]):
      return tf.identity(scale)
  w = tf.cast(tf.raw_ops.ReadVariableOp(resource=hv, dtype=var_dtype), s)
  a = tf.cast(tf.raw_ops.ReadVariableOp(resource=ha, dtype=var_dtype), s)
  w, a, scale = clippy_math(w, a, tf.cast(grad, s), **kwargs)
  with tf.control_dependencies([
      tf.raw_ops.AssignVariableOp(resource=ha, value=tf.cast(a, var_dtype)),
      tf.raw_ops.AssignVariableOp(resource=hv, value=tf.cast(w, var_dtype)),
  ]):
    return tf.identity(scale)


# ----------------------------------------------------------------------------- shared adapter parts

CLIPPY_DEFAULTS = dict(
    initial_accumulator_value=0.1,
    variable_relative_threshold=0.1,
    accumulator_relative_threshold=0.0,
    absolute_threshold=1e-7,
    epsilon=1e-7,
    export_clipping_factors=False,
    clip_accumulator_update=False,
    use_standard_accumulator_update=False,
)
CLIPPY_ARGS = tuple(CLIPPY_DEFAULTS)


class ClippyAdagradMixin:
  """Constructor checks, config and the update call shared by every ClippyAdagrad flavor."""

  def _init_clippy(self, constructor_args):
    """Checks and keeps the Clippy arguments; `constructor_args` is the
    flavor constructor's `locals()`, so each signature stays explicit (the
    replaced class's) while the handling lives here once."""
    args = {key: constructor_args[key] for key in CLIPPY_ARGS}
    if args["clip_accumulator_update"] and args["use_standard_accumulator_update"]:
      raise ValueError("clip_accumulator_update and use_standard_accumulator_update cannot "
                       "both be set to True.")
    check_non_negative(initial_accumulator_value=args["initial_accumulator_value"],
                       variable_relative_threshold=args["variable_relative_threshold"],
                       accumulator_relative_threshold=args["accumulator_relative_threshold"],
                       absolute_threshold=args["absolute_threshold"])
    for key in CLIPPY_ARGS:
      setattr(self, key, args[key])

  def _clippy_config(self):
    return {key: getattr(self, key) for key in CLIPPY_ARGS}

  def _clippy_apply(self, grad, var, accum, clipping_factor, lr, use_locking=False, indices=None):
    return clippy_adagrad(var, accum, grad, lr=lr, epsilon=self.epsilon,
                          variable_relative_threshold=self.variable_relative_threshold,
                          accumulator_relative_threshold=self.accumulator_relative_threshold,
                          absolute_threshold=self.absolute_threshold,
                          clip_accumulator_update=self.clip_accumulator_update,
                          use_standard_accumulator_update=self.use_standard_accumulator_update,
                          clipping_factor=clipping_factor, use_locking=use_locking, indices=indices)


def check_amsgrad(amsgrad):
  if amsgrad:
    raise ValueError("LazyAdam does not support `amsgrad=True` (the lazy sparse update has no "
                     "AMSGrad variant); use amsgrad=False.")


LAZY_ADAM_DOC = """Lazy Adam: sparse gradients update only the rows they name.

  A drop-in replacement for TensorFlow Addons' and Merlin's `LazyAdam`: for a
  `tf.IndexedSlices` gradient (an embedding lookup's), duplicate indices are
  summed and, for each distinct row i, with t the 1-based step,

      lr_t  = lr * sqrt(1 - beta_2^t) / (1 - beta_1^t)
      m[i]  = beta_1 * m[i] + (1 - beta_1) * g[i]
      v[i]  = beta_2 * v[i] + (1 - beta_2) * g[i]^2
      var[i] -= lr_t * m[i] / (sqrt(v[i]) + epsilon)

  in one fused kernel; no other row is read or written. A dense gradient gets
  this flavor's standard Adam update. State (slots `m`/`v`, momentums and
  velocities) is that of this flavor's `Adam`, so checkpoints move both ways.
  `amsgrad=True` raises `ValueError`.
  """

CLIPPY_DOC = """Adagrad with adaptive clipping of the update (Clippy, arXiv:2302.09178).

  A drop-in replacement for TensorFlow Recommenders' `ClippyAdagrad`, computed
  by fused kernels (dense, and sparse on the rows a `tf.IndexedSlices` gradient
  names, duplicates summed):

      if use_standard_accumulator_update: accum += g^2
      p = 1 / sqrt(accum + epsilon); delta = lr * g * p
      max_d = variable_relative_threshold * |var|
              + accumulator_relative_threshold * p + absolute_threshold
      scale = min(1, min over delta != 0 of max_d / |delta|)
      if not use_standard_accumulator_update:
          accum += (g * scale)^2 if clip_accumulator_update else g^2
      var -= delta * scale

  `export_clipping_factors=True` keeps `clipping_factors`, one scalar variable
  per model variable holding the last scale. `clip_accumulator_update` and
  `use_standard_accumulator_update` cannot both be True.
  """
