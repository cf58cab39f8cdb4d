"""The shared optimizer core: which implementation runs an update, for every Keras flavor.

Each flavor module (`keras`, `tf_keras`, `legacy`) is a thin adapter that
finds the slot variables and resolves the hyperparameters the way its base
class does, then calls `lazy_adam` or `clippy_adagrad` here, which pick:

- a sparse gradient (`tf.IndexedSlices`, or values + indices): the fused sparse
  kernel, which sums duplicate indices itself;
- a dense gradient: standard Adam, or the dense Clippy Adagrad kernel;
- inside an XLA-compiled function the same ops, lowered by their XLA kernels
  (_tf_opt_ops_xla.so) to custom calls into the same code; only where those
  kernels are missing (`_loader.xla_unavailable()` says why) the same math in
  standard TensorFlow ops (`_standard_ops`), with a warning logged once.

Why: see docs/design.md, "One training step" and "XLA".
"""

import numbers
import threading
import zlib

import numpy as np
import tensorflow as tf

from tf_opt_ops import _loader
from tf_opt_ops import _standard_ops
from tf_opt_ops import _tf_private
from tf_opt_ops import ops
from tf_opt_ops._op_inputs import adam_scalars
from tf_opt_ops._op_inputs import handle
from tf_opt_ops._op_inputs import scalar
from tf_opt_ops._op_inputs import scalar_dtype
from tf_opt_ops._op_inputs import value_dtype

_logged = set()
_log_lock = threading.Lock()


def _log_fallback_once(what, reason):
  with _log_lock:
    if what in _logged:
      return
    _logged.add(what)
  tf.get_logger().warning(
      "tf_opt_ops: %s runs inside an XLA-compiled function, where the fused ops have no "
      "XLA kernels here (%s); falling back to the same math in standard TensorFlow ops, "
      "several times slower. Install the tf_opt_ops release wheel (or `make build`) to get "
      "them, or compile the training step without jit_compile to use the fused ops.", what, reason)


def xla_fallback(what, var):
  """True (with the fallback logged once) when `what` on `var` must run in standard ops.

  Inside an XLA-compiled function the fused ops run through their XLA
  kernels, which exist for the CPU, and for GPUs in a CUDA build of the
  library; where they are missing (no XLA library for this TensorFlow, or a
  variable on a GPU without GPU kernels) the standard-ops fallback runs. Why: see docs/design.md,
  "XLA".
  """
  if not _tf_private.in_xla_context():
    return False
  reason = _loader.xla_unavailable(gpu=_on_gpu(var))
  if reason is None:
    return False
  _log_fallback_once(what, reason)
  return True


def _on_gpu(var):
  """Whether `var` lives on a GPU (where XLA compiles for the GPU)."""
  # A Keras 3 variable keeps its placement on the tf.Variable it wraps.
  for candidate in (var, getattr(var, "value", None)):
    device = getattr(candidate, "device", None)
    if isinstance(device, str) and device:
      return ":GPU:" in device.upper()
  return bool(tf.config.list_logical_devices("GPU"))  # where TensorFlow places it by default


def default_jit_compile(kwargs):
  """tf_keras' `jit_compile` default for our classes, set in `kwargs` unless given.

  The base class's own default (on where there is a GPU) where the fused ops
  have XLA kernels on GPUs; off where they have none, as XLA would then run
  the standard-ops fallback.
  """
  if _loader.xla_unavailable(gpu=True) is not None:
    kwargs.setdefault("jit_compile", False)


def is_zero(value):
  """True for None or a Python number equal to 0 (weight decay that does nothing)."""
  if value is None:
    return True
  return isinstance(value, numbers.Number) and not isinstance(value, bool) and value == 0


def check_non_negative(**values):
  for name, value in values.items():
    if isinstance(value, numbers.Number) and value < 0:
      raise ValueError(f"`{name}` must be non-negative, got {value}.")


def check_amsgrad(amsgrad):
  if amsgrad:
    raise ValueError("LazyAdam does not support `amsgrad=True` (the lazy sparse update has no "
                     "AMSGrad variant); use amsgrad=False.")


def _check_clippy_flags(clip_accumulator_update, use_standard_accumulator_update):
  if clip_accumulator_update and use_standard_accumulator_update:
    raise ValueError("clip_accumulator_update and use_standard_accumulator_update cannot "
                     "both be set to True.")


def _split_gradient(var, grad, indices, scale_in_op=False):
  """(gradient values cast to `var`'s dtype, indices or None, that dtype, the sparse op's
  arguments `grad_scale=` and `grad_clip=` for them, a dict, empty for none).

  With `scale_in_op` (the caller's sparse op runs where it applies a `grad_scale` itself: the
  CPU kernel, outside XLA), a `ScaledSlices` of `var`'s dtype gives its unscaled values and
  their scale and clip, so that the scaled values are never written; else its values are the
  scaled ones, and the dict empty.
  """
  if (indices is None and scale_in_op and isinstance(grad, tf.IndexedSlices) and
      not isinstance(grad, ScaledSlices)):
    # Slices whose values the graph made a product or quotient by one value (Keras 3's
    # LossScaleOptimizer divides them by its scale before the update): that scale too.
    grad = scaled_slices_of(grad.values, grad.indices) or grad
  if (indices is None and scale_in_op and isinstance(grad, ScaledSlices) and
      grad.dtype == value_dtype(var, grad)):
    return grad.unscaled_values, grad.indices, grad.dtype, grad.op_scaling()
  if indices is None and isinstance(grad, tf.IndexedSlices):
    grad, indices = grad.values, grad.indices
  grad = tf.convert_to_tensor(grad)
  dtype = value_dtype(var, grad)
  return tf.cast(grad, dtype), indices, dtype, {}


def _scales_in_op(var, on_mesh):
  """Whether a sparse update of `var` runs the CPU kernel, which applies a `ScaledSlices`'
  scale where it reads each value (`_split_gradient`'s `scale_in_op`)."""
  return not on_mesh and not _on_gpu(var) and not _tf_private.in_xla_context()


# ----------------------------------------------------------------------------- Keras features
# The base classes' features (clipping, accumulation, weight decay, EMA) with sparse gradients
# kept sparse: the numbers of the base class's own code, on the rows a gradient names only.
# Why: see docs/optimizers.md, "Keras features at sparse cost".


def has_sparse(grads):
  return any(isinstance(g, tf.IndexedSlices) for g in grads)


def dense_feature(what, reason):
  """True (with a warning logged once, naming the cost) where feature `what` cannot keep sparse
  gradients sparse: the base class's dense code runs."""
  with _log_lock:
    if what in _logged:
      return True
    _logged.add(what)
  tf.get_logger().warning(
      "tf_opt_ops: %s runs densely here (%s): every step reads and writes every row of each "
      "table, as the stock optimizer does.", what, reason)
  return True


def _common_dtype(tensors):
  """The dtype Keras 3's `ops.stack` gives `tensors`: theirs if one, else the widest float."""
  dtypes = {tf.as_dtype(t.dtype) for t in tensors}
  if len(dtypes) == 1:
    return dtypes.pop()
  return tf.float64 if tf.float64 in dtypes else tf.float32


class ScaledSlices(tf.IndexedSlices):
  """A clipped sparse gradient: `tf.IndexedSlices` whose values are its unscaled values times
  `grad_scale`, `(factor,)` (`values * factor`, Keras' global_clipnorm) or `(factor, divisor)`
  (`values * factor / divisor`, Keras' clipnorm), scalars of the values' dtype, each
  operation rounded to it as Keras computes it; then, with `grad_clip` `(least, greatest)`,
  clipped to those as `tf.clip_by_value` clips (Keras' clipvalue; `grad_scale` may then be
  empty).

  Scaling the values is a pass that reads and writes every gradient row before the update
  reads them again. The fused sparse ops apply the scale themselves where they read each
  value (their `grad_scale`, the same bits), so the update steps hand them the unscaled
  values and the scale (`_split_gradient`). Everything else reads `values`, the scaled
  values, made at first use in each graph (in a `tf.function` nothing builds them when only
  the op reads the gradient), so no consumer can get the unscaled ones: densifying,
  `tf.convert_to_tensor`, composite decomposition, distribution, XLA and GPUs. Why: see
  docs/design.md, "Clipping in the update".
  """

  def __init__(self, values, indices, dense_shape, grad_scale, grad_clip=None):
    super().__init__(values, indices, dense_shape)
    self._grad_scale = tuple(grad_scale)
    self._grad_clip = None if grad_clip is None else tuple(grad_clip)
    self._scaled = None  # (graph, or None in eager mode; the scaled values made there)

  @property
  def unscaled_values(self):
    return self._values

  @property
  def grad_scale(self):
    return self._grad_scale

  @property
  def grad_clip(self):
    return self._grad_clip

  def op_scaling(self):
    """The sparse ops' `grad_scale=` and `grad_clip=` arguments that give these values."""
    out = {"grad_scale": self._grad_scale} if self._grad_scale else {}
    if self._grad_clip is not None:
      out["grad_clip"] = self._grad_clip
    return out

  @property
  def dtype(self):
    return self._values.dtype

  @property
  def values(self):
    graph = None if tf.executing_eagerly() else tf.compat.v1.get_default_graph()
    if self._scaled is None or self._scaled[0] is not graph:
      scaled = self._values
      if self._grad_scale:
        scaled = scaled * self._grad_scale[0]
      if len(self._grad_scale) == 2:
        scaled = scaled / self._grad_scale[1]
      if self._grad_clip is not None:
        scaled = tf.clip_by_value(scaled, *self._grad_clip)
      self._scaled = (graph, scaled)
    return self._scaled[1]


def scaled_slices_of(values, indices):
  """`IndexedSlices(values, indices)` as a `ScaledSlices` where `values` is, in a graph, the
  product `x * factor`, the quotient `x * factor / divisor` or `x / divisor` (through
  identities) of `x` by tensors of one value each: what `tf.clip_by_norm` and
  `tf.clip_by_global_norm` make of a slice's values, which tf_keras' legacy OptimizerV2 hands the
  update split from their indices, and Keras 3's LossScaleOptimizer's unscaled slices; or such
  a product, or `x` itself, clipped by `tf.clip_by_value` to one-value bounds (Keras' clipvalue
  in each API: `maximum(minimum(., greatest), least)`). The Scaled ops compute `x * factor /
  divisor` as those ops do, each operation rounded to the values' dtype (a factor of 1 for `x /
  divisor`: exact), then the minimum and the maximum as TensorFlow's ops do, so the same bits,
  and the graph's multiply, divide and clip, unused, are pruned. None for other values, and in
  eager mode (the product is computed already)."""
  if tf.executing_eagerly() or not hasattr(values, "op") or values.shape.rank is None:
    return None
  rank, dtype = values.shape.rank, values.dtype

  def one_value(t):
    return t.shape.is_fully_defined() and t.shape.num_elements() == 1 and t.shape.rank <= rank

  def same_shape(t):
    return t.shape.rank == rank and t.dtype == dtype

  def through_identities(t):
    while t.op.type == "Identity":
      t = t.op.inputs[0]
    return t

  values = through_identities(values)
  grad_clip = None
  # tf.clip_by_value's ops, each bound the second input (on a tie TensorFlow's minimum and
  # maximum keep their first input, as the Scaled ops keep the value).
  if (values.op.type == "Maximum" and one_value(values.op.inputs[1]) and
      values.op.inputs[0].op.type == "Minimum" and one_value(values.op.inputs[0].op.inputs[1])):
    least, lowered = values.op.inputs[1], values.op.inputs[0]
    grad_clip = (tf.reshape(least, []), tf.reshape(lowered.op.inputs[1], []))
    values = through_identities(lowered.op.inputs[0])
  divisor = None
  product = values
  if values.op.type == "RealDiv" and one_value(values.op.inputs[1]):
    product, divisor = values.op.inputs
  x, factor = product, None
  if product.op.type == "Mul":
    x, factor = product.op.inputs
    if not one_value(factor):
      factor, x = x, factor
    if not (one_value(factor) and same_shape(x)):
      x, factor = product, None
  if factor is None and divisor is not None:
    factor = tf.ones([], x.dtype)
  if (factor is None and grad_clip is None) or not same_shape(x):
    return None
  grad_scale = [tf.reshape(t, []) for t in (factor, divisor) if t is not None]
  return ScaledSlices(x, indices, None, grad_scale, grad_clip)


def clip_by_global_norm(grads, clip_norm):
  """Keras 3's `clip_by_global_norm`, an `IndexedSlices` kept one with its rows scaled.

  The norm is Keras 3's: the sum of each gradient's squared values (a slice's
  values with duplicate rows not summed, as Keras 3 squares them before it
  densifies), and so is the scale (NaN for a non-finite norm). Keras 3 then
  densifies the slices, a pass over every row of every table.
  """
  present = [g for g in grads if g is not None]
  squared = [_sum_of_squares(g.values if isinstance(g, tf.IndexedSlices) else g) for g in present]
  dtype = _common_dtype(squared)
  norm = tf.sqrt(tf.reduce_sum(tf.stack([tf.cast(s, dtype) for s in squared])))
  scale = clip_norm * tf.minimum(1.0 / norm, 1.0 / clip_norm)
  scale = scale + (norm - norm)  # NaN where the norm is inf or NaN
  return [None if g is None else scaled(g, scale) for g in grads]


def tf_clip_by_global_norm(grads, clip_norm):
  """`tf.clip_by_global_norm(grads, clip_norm)[0]` (tf_keras' global_clipnorm), its
  `IndexedSlices` `ScaledSlices`: the same norm and scale, the same products."""
  norm = tf.linalg.global_norm(grads)
  scale = clip_norm * tf.minimum(1.0 / norm, tf.constant(1.0, dtype=norm.dtype) / clip_norm)
  scale = scale + (norm - norm)  # NaN where the norm is inf or NaN
  return [
      None if g is None else
      scaled(g, scale) if isinstance(g, tf.IndexedSlices) else tf.identity(g *
                                                                           tf.cast(scale, g.dtype))
      for g in grads
  ]


def clip_by_norm(grad, clip_norm):
  """Keras 3's `_clip_by_norm` and `tf.clip_by_norm` (the same formula) of `grad` on all its
  axes, an `IndexedSlices` kept one: its values times `clip_norm` over the larger of their
  norm and `clip_norm` (the norm's square root is not taken of 0: no NaN in its gradient)."""
  values = grad.values if isinstance(grad, tf.IndexedSlices) else grad
  squares = _sum_of_squares(values)
  positive = squares > 0
  norm = tf.where(positive, tf.sqrt(tf.where(positive, squares, tf.ones_like(squares))), squares)
  # A Python number goes to the values' dtype directly, as Keras and TensorFlow convert it (not
  # through float32, whose rounding of 0.3 a float64 table would then see).
  if isinstance(clip_norm, numbers.Real):
    clip_norm = tf.constant(clip_norm, values.dtype)
  else:
    clip_norm = tf.cast(clip_norm, values.dtype)
  divisor = tf.maximum(norm, clip_norm)
  if isinstance(grad, tf.IndexedSlices):
    return ScaledSlices(values, grad.indices, grad.dense_shape, (clip_norm, divisor))
  return values * clip_norm / divisor


def _sum_of_squares(values):
  """`sum(square(values))`, the bits Keras 3's `ops.sum(ops.square(values))` gives.

  For float32 and float64, `2 * l2_loss` sums the squares without a tensor of
  them (a copy of the gradient's rows); on CPU its bits are the square and
  sum's (one Eigen full reduction either way). Half types keep the square and
  sum: TensorFlow sums them in float32 there, `l2_loss` in their dtype.
  """
  if tf.as_dtype(values.dtype) in (tf.float32, tf.float64):
    return 2 * tf.nn.l2_loss(values)
  return tf.reduce_sum(tf.square(values))


def scaled(grad, scale):
  """`grad * scale`, an `IndexedSlices` kept one (a `ScaledSlices`)."""
  if isinstance(grad, tf.IndexedSlices):
    return ScaledSlices(grad.values, grad.indices, grad.dense_shape, (tf.cast(scale, grad.dtype),))
  return grad * tf.cast(scale, grad.dtype)


def decay_weights(var, grad, lr, weight_decay):
  """Stock Keras' decoupled weight decay, `var -= var * weight_decay * lr`, on the rows a
  sparse `grad` names (each written once per index, with the same value), else on `var`.

  Decaying every row each step would rewrite every table (the sparse step's
  whole point is not to); rows a step does not update keep their values, as
  with TF Addons' decoupled weight decay. Why: see docs/optimizers.md, "Keras
  features at sparse cost".
  """
  lr = tf.cast(lr, var.dtype)
  weight_decay = tf.cast(weight_decay, var.dtype)
  if isinstance(grad, tf.IndexedSlices):
    rows = grad.indices
    current = tf.gather(var, rows)
    return var.scatter_update(tf.IndexedSlices(current - current * weight_decay * lr, rows))
  return var.assign_sub(var * weight_decay * lr)


def row_id_dtype(var):
  """The integer dtype that holds every row id of `var`."""
  shape = tuple(var.shape)
  return "int32" if not shape or (shape[0] is not None and shape[0] < 2**31) else "int64"


def accumulate_rows(accumulator, row_ids, row_count, grad):
  """Adds sparse `grad` into `accumulator` on its rows and appends them to the window's row
  ids (`row_ids[:row_count]`, a row possibly more than once).

  The ids are the window's rows without a pass over every row of the table:
  appending costs the micro-step's rows only. Where they would not fit (the
  window named more ids than the table has rows), the ids are deduplicated
  first, which fits: a table's distinct rows are its row count. On the CPU one
  fused op (`TfOptOps>ResourceSparseAccumulateRows`) does it all; on a GPU,
  where it has no kernel, TensorFlow ops give the same numbers.
  """
  values = tf.cast(grad.values, accumulator.dtype)
  indices = tf.cast(grad.indices, row_ids.dtype)
  if not _on_gpu(accumulator):
    return ops.sparse_accumulate_rows(accumulator, row_ids, row_count, indices, values)
  count = row_count.read_value()
  end = count + tf.size(indices, out_type=row_ids.dtype)

  def append():
    return _write_ids(row_ids, row_count, count, indices)

  def deduplicated():
    kept = tf.unique(tf.concat([_window_ids(row_ids, count), indices], 0)).y
    return _write_ids(row_ids, row_count, tf.zeros_like(count), kept)

  return tf.group(_add_rows(accumulator, indices, values, tf.equal(count, 0)),
                  tf.cond(end <= row_ids.shape[0], append, deduplicated))


def _add_rows(accumulator, indices, values, empty):
  """`accumulator[indices[i]] += values[i]` for each i in order, as a scatter-add adds them;
  `empty`: the accumulator is 0 on every row (the window's first micro-step), so not read.

  Each row's first value is added by a gather and a write of the distinct
  rows, the rows' later values (duplicates) by a scatter-add: TensorFlow's
  scatter-add adds row by row, at about twice the cost of the gather and write.
  """
  rows, position = tf.unique(indices)
  first, later = _first_and_later(position, tf.size(rows))
  # Distinct indices are their rows' first values, in order.
  firsts = tf.cond(tf.equal(tf.size(rows), tf.size(indices)), lambda: values,
                   lambda: tf.gather(values, first))
  sums = tf.cond(empty, lambda: firsts, lambda: tf.gather(accumulator, rows) + firsts)
  with tf.control_dependencies(
      [_scatter(tf.raw_ops.ResourceScatterUpdate, accumulator, rows, sums)]):
    return _scatter(tf.raw_ops.ResourceScatterAdd, accumulator, tf.gather(indices, later),
                    tf.gather(values, later))


def _first_and_later(position, size):
  """For entries naming slots `position` of `size` slots: each slot's first entry (the
  largest int32 for a slot none names), and the other entries in order."""
  entries = tf.range(tf.size(position))
  first = tf.math.unsorted_segment_min(entries, position, size)
  later = tf.where(tf.not_equal(tf.gather(first, position), entries))[:, 0]
  return first, later


def _write_ids(row_ids, row_count, start, ids):
  """Writes `ids` into `row_ids` from position `start` on, and the count they end at; returns
  that count."""
  end = start + tf.size(ids, out_type=row_ids.dtype)
  with tf.control_dependencies(
      [_scatter(tf.raw_ops.ResourceScatterUpdate, row_ids, tf.range(start, end), ids)]):
    with tf.control_dependencies(
        [tf.raw_ops.AssignVariableOp(resource=handle(row_count), value=end)]):
      return tf.identity(end)


def _scatter(op, var, indices, updates):
  """Scatter `op` into `var`, returning the op: a control dependency on the variable that
  `var.scatter_*` returns reads it whole (a copy of every row, once sparse ops touched it)."""
  return op(resource=handle(var), indices=indices, updates=updates)


def _window_ids(row_ids, count):
  """The window's row ids so far, `row_ids[:count]` (a gather: a read of the variable would
  copy all of it)."""
  return tf.gather(row_ids, tf.range(count))


def take_window_gradient(accumulator, row_ids, row_count, grad, steps):
  """The window's average gradient, an `IndexedSlices` of the distinct rows it named; the
  window's rows of the accumulator are then zeroed and its row ids emptied.

  `grad` is the window's last micro-step: its rows are added to the earlier
  micro-steps' sums (as `accumulate_rows` would add them, in order) outside the
  accumulator, which is read on the window's rows; rows the earlier micro-steps
  did not name hold 0 there. The average is the sums over `steps`, as Keras 3's
  `(g + acc) / steps` on those rows (the others are 0 there). On the CPU one
  fused op (`TfOptOps>ResourceSparseTakeWindowGradient`) does it all; on a GPU,
  where it has no kernel, TensorFlow ops give the same numbers.
  """
  values = tf.cast(grad.values, accumulator.dtype)
  indices = tf.cast(grad.indices, row_ids.dtype)
  if not _on_gpu(accumulator):
    rows, average = ops.sparse_take_window_gradient(accumulator, row_ids, row_count, indices,
                                                    values, steps)
    return tf.IndexedSlices(average, rows, grad.dense_shape)
  count = row_count.read_value()
  # The earlier micro-steps' distinct rows first (tf.unique keeps the order of first sight).
  rows, position = tf.unique(tf.concat([_window_ids(row_ids, count), indices], 0))
  size = tf.size(rows)
  held = tf.reduce_max(tf.concat([position[:count] + 1, [0]], 0))
  # As `_add_rows` adds them: each row's first value of this micro-step by a gather (a zero
  # row for rows it does not name), its later ones by a scatter-add.
  last = position[count:]
  first, later = _first_and_later(last, size)
  row_shape = tf.shape(values)[1:]
  zero_row = tf.zeros(tf.concat([[1], row_shape], 0), values.dtype)
  firsts = tf.gather(tf.concat([values, zero_row], 0), tf.minimum(first, tf.size(last)))
  # Rows the earlier micro-steps did not name hold 0 in the accumulator: not read.
  sums = tf.concat([tf.gather(accumulator, rows[:held]) + firsts[:held], firsts[held:]], 0)
  # A tensor scatter-add copies `sums` whole even with nothing to add: skipped then (the
  # micro-step named each row once).
  sums = tf.cond(
      tf.size(later) > 0, lambda: tf.tensor_scatter_nd_add(sums,
                                                           tf.gather(last, later)[:, tf.newaxis],
                                                           tf.gather(values, later)), lambda: sums)
  average = sums / tf.cast(steps, accumulator.dtype)
  # Ordered after the reads of the accumulator and the count above (automatic control
  # dependencies, on the same variables).
  _clear_rows(accumulator, row_count, rows[:held])
  return tf.IndexedSlices(average, tf.cast(rows, tf.int64), grad.dense_shape)


def window_fuses(var, accumulator):
  """Whether lazy Adam and Clippy can take the window's average of `var` in their own op
  (`lazy_adam`'s and `clippy_adagrad`'s `window`): the ops have a CPU kernel only, outside
  XLA, with the accumulator of var's dtype."""
  return (not _on_gpu(var) and not _tf_private.in_xla_context() and
          tf.as_dtype(accumulator.dtype) == tf.as_dtype(var.dtype))


def _clear_rows(accumulator, row_count, rows):
  """Zeroes `rows` of `accumulator` and empties the window's row ids: the window is applied."""
  # The static row shape: tf.shape of a variable reads all of it.
  row_shape = tf.constant(accumulator.shape[1:].as_list(), tf.int64)
  zeros = tf.zeros(tf.concat([tf.shape(rows, out_type=tf.int64), row_shape], 0), accumulator.dtype)
  return tf.group(
      _scatter(tf.raw_ops.ResourceScatterUpdate, accumulator, rows, zeros),
      tf.raw_ops.AssignVariableOp(resource=handle(row_count), value=tf.zeros([], row_count.dtype)))


def _per_row(values, like):
  """[rows] `values` shaped to broadcast over rows of `like`."""
  return tf.reshape(values, tf.concat(
      [tf.shape(values), tf.ones([tf.rank(like) - 1], tf.int32)], 0))


def caught_up_average(values, average, synced, count, ema_momentum):
  """The moving average of rows whose values have not changed since their sync.

  A row synced when `synced` EMA steps had been applied, and unchanged since,
  has taken `count - synced` more steps `a <- m a + (1 - m) x` toward its
  constant value x: its average is x + m^k (a - x), k that count.
  """
  steps = tf.cast(count - synced, values.dtype)
  decay = tf.pow(tf.cast(ema_momentum, values.dtype), steps)
  if values.shape.rank != 0:
    decay = _per_row(decay, values)
  return values + decay * (average - values)


def moving_average_update(var, average, synced, count, grad, ema_momentum, update,
                          fused_update=None):
  """Brings the average of the rows `grad` is about to change up to date, then runs `update()`
  (the update of `var` by `grad`), returning what it returns.

  The base class moves every row's average each step; here a row's average is
  kept as of its last change (`synced`: the number of EMA steps applied then,
  `count`: those applied so far) and brought up to date just before the row
  changes (`caught_up_average`) or is read (`sync_moving_average`), so a step
  touches the rows of a sparse `grad` only. This step's own EMA move toward the
  updated row is one more step the row then missed, which the next catch-up
  takes. A sparse `grad` outside XLA runs one fused op (XLA has no kernel for
  it): `fused_update(moving_average)`, where given, on the CPU (the update with the
  catch-up in its own pass, `ops.sparse_lazy_adam`'s or `ops.sparse_clippy_adagrad`'s
  `moving_average`), else the moving-average op before `update()`; the other cases,
  these TensorFlow ops.
  """
  rows = grad.indices if isinstance(grad, tf.IndexedSlices) else None
  applied = count.read_value()
  in_op = rows is not None and not _tf_private.in_xla_context()
  # ema_momentum as the ops below take it: tf.cast to the table's dtype.
  if in_op and fused_update is not None and not _on_gpu(var):
    return fused_update((average, synced, applied, tf.cast(ema_momentum, var.dtype)))
  if in_op:
    caught_up = ops.sparse_moving_average(average, synced, var, rows, count=applied,
                                          ema_momentum=tf.cast(ema_momentum, var.dtype),
                                          dtype=var.dtype)
  else:

    def read(x):
      return x.read_value() if rows is None else tf.gather(x, rows)

    caught = caught_up_average(read(var), read(average), read(synced), applied, ema_momentum)
    stamp = tf.fill(tf.shape(synced) if rows is None else tf.shape(rows), applied)
    if rows is None:
      caught_up = tf.group(average.assign(caught), synced.assign(stamp))
    else:
      caught_up = tf.group(_scatter(tf.raw_ops.ResourceScatterUpdate, average, rows, caught),
                           _scatter(tf.raw_ops.ResourceScatterUpdate, synced, rows, stamp))
  with tf.control_dependencies([caught_up]):
    return update()


class LazyMovingAverageMixin:
  """The step of a flavor whose base class has EMA (Keras 3, tf_keras): `_lazy_average`
  (whether the averages are kept lazily), `_average_state(variable)` (`moving_average_update`'s
  first four arguments) and `ema_momentum` come from the flavor."""

  def _with_moving_average(self, gradient, variable, update, fused_update=None):
    """Runs `update()`, the update step of `variable` (its weight decay included), with its EMA
    on the rows it changes (`fused_update`: `moving_average_update`'s)."""
    if not self._lazy_average:
      return update()
    return moving_average_update(*self._average_state(variable), gradient, self.ema_momentum,
                                 update, fused_update)


def moving_average_applied(var, average, synced, count, first=None):
  """Counts an EMA step of `var` (after its update, if any); where `first` (Keras 3's first
  step, which sets every average to its variable), every row's average is `var`."""
  if first is not None:

    def set_all():
      average.assign(var.read_value())
      synced.assign(tf.fill(tf.shape(synced), count.read_value() + 1))

    tf.cond(first, set_all, lambda: None)
  return count.assign_add(1)


def sync_moving_average(var, average, synced, count, ema_momentum):
  """Brings every row of `average` up to date (before it is read)."""
  applied = count.read_value()
  average.assign(
      caught_up_average(var.read_value(), average.read_value(), synced.read_value(), applied,
                        ema_momentum))
  return synced.assign(tf.fill(tf.shape(synced), applied))


# ----------------------------------------------------------------------------- Lazy Adam

_SLOT_DTYPES = ("bfloat16", "float16", "float32")
_LIGHT_TABLE_DTYPES = (tf.float16, tf.bfloat16, tf.float32)


def check_bool_option(name, value, none_means=None):
  """`value` as a bool; ValueError naming option `name` unless it is a bool (or None where
  `none_means` says what None does). A string such as "no" would otherwise count as True."""
  if value is None and none_means is not None:
    return None
  if isinstance(value, (bool, np.bool_)):
    return bool(value)
  accepted = "True or False" + (f", or None ({none_means})" if none_means else "")
  raise ValueError(f"{name} must be {accepted}, got {value!r} of type {type(value).__name__}.")


def check_dtype_option(name, value):
  """The dtype name `value` gives option `name` (None stays None); ValueError naming the option
  and the accepted values unless it is one of _SLOT_DTYPES, by name or as a tf.DType."""
  if value is None:
    return None
  if isinstance(value, tf.dtypes.DType) and value.name in _SLOT_DTYPES:
    return value.name
  if isinstance(value, str) and value in _SLOT_DTYPES:
    return value
  raise ValueError(f"{name} must be None (the variable's dtype) or one of "
                   f"{', '.join(map(repr, _SLOT_DTYPES))} (a name or a tf.DType), got {value!r}.")


def check_seed(seed):
  """`seed` as an int; ValueError unless it is an integer in [0, 2**31)."""
  if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or not 0 <= seed < 2**31:
    raise ValueError(f"seed must be an integer in [0, 2**31), got {seed!r}.")
  return int(seed)


def variable_noise_seed(seed, var):
  """The rounding noise seed of `var` (op attr `seed`): the optimizer's `seed` and the
  variable's name, so that tables of one shape do not round alike, and a rerun of the same
  program rounds the same."""
  name = getattr(var, "path", None) or _tf_private.shared_name(var) or var.name
  name = str(name).split(":")[0]
  return (seed << 32) | zlib.crc32(name.encode())


class LightState:
  """How an optimizer keeps its state: LazyAdam's slots or ClippyAdagrad's accumulator (their
  dtype, v per row or per element, their rounding).

  The options every flavor's `LazyAdam` takes (`slot_dtype`,
  `rowwise_second_moment`, `stochastic_rounding`, `seed`), and `ClippyAdagrad`
  for its accumulator (`accumulator_dtype`, given as `option`); with the
  defaults the slots are Adam's (Clippy's) and so are the checkpoints. Light
  options apply to the variables the V2 ops take: float16, bfloat16 and
  float32 variables of rank >= `min_rank`; float64 variables (and, for
  LazyAdam, scalars) keep slots of their own dtype and shape. Why: see
  docs/design.md, "Light state".
  """

  def __init__(self, slot_dtype=None, rowwise_second_moment=False, stochastic_rounding=None, seed=0,
               min_rank=1, option="slot_dtype"):
    self.slot_dtype = check_dtype_option(option, slot_dtype)
    self.rowwise_second_moment = check_bool_option("rowwise_second_moment", rowwise_second_moment)
    self.stochastic_rounding = check_bool_option("stochastic_rounding", stochastic_rounding,
                                                 none_means="on for 16-bit slots")
    self.seed = check_seed(seed)
    self.min_rank = min_rank  # 0 for Clippy's accumulator: its dense op takes scalars too

  @property
  def enabled(self):
    return self.slot_dtype is not None or self.rowwise_second_moment or bool(
        self.stochastic_rounding)

  def applies_to(self, var):
    """True when `var`'s slots are kept as these options say (not as Adam's)."""
    shape = tf.TensorShape(var.shape)
    return (self.enabled and tf.as_dtype(var.dtype) in _LIGHT_TABLE_DTYPES and
            shape.rank is not None and shape.rank >= self.min_rank)

  def slot_dtype_for(self, var):
    if self.applies_to(var) and self.slot_dtype is not None:
      return tf.as_dtype(self.slot_dtype)
    return tf.as_dtype(var.dtype)

  def v_shape_for(self, var):
    """[rows] for a row-wise v, else `var`'s shape."""
    shape = tf.TensorShape(var.shape)
    if self.applies_to(var) and self.rowwise_second_moment:
      return shape[:1]
    return shape

  def op_options(self, var):
    """The light options of op ResourceSparseApplyLazyAdamV2 for `var`, or None."""
    if not self.applies_to(var):
      return None
    slot_dtype = self.slot_dtype_for(var)
    stochastic = self.stochastic_rounding
    if stochastic is None:  # on for 16-bit slots the user asked for
      stochastic = self.slot_dtype is not None and slot_dtype in (tf.float16, tf.bfloat16)
    return dict(slot_dtype=slot_dtype, rowwise_second_moment=self.rowwise_second_moment,
                stochastic_rounding=bool(stochastic), seed=self.variable_seed(var))

  def variable_seed(self, var):
    return variable_noise_seed(self.seed, var)

  def config(self):
    return dict(slot_dtype=self.slot_dtype, rowwise_second_moment=self.rowwise_second_moment,
                stochastic_rounding=self.stochastic_rounding, seed=self.seed)


LAYOUT_ADVICE = (
    "A checkpoint keeps the slots in the layout of the optimizer that wrote it: construct the "
    "optimizer with that one's slot_dtype and rowwise_second_moment (LazyAdam) or "
    "accumulator_dtype (ClippyAdagrad) (its get_config() has them; absent means the defaults), "
    "or convert the checkpoint to this optimizer's layout with "
    "tf_opt_ops.convert_checkpoint(path, new_path, slot_dtype=..., rowwise_second_moment=..., "
    "accumulator_dtype=...); between a full Adagrad accumulator and RowwiseAdagrad's one value "
    "per row, convert_checkpoint(path, new_path, rowwise_accumulator=True or False).")


def check_slot_layout(var, slots, want_dtype, want_shapes=None):
  """Raises ValueError when `slots` ({name: slot}) of `var` are not of `want_dtype` and shapes
  (var's, or `want_shapes[name]`): slots a checkpoint of another layout created (OptimizerV2
  takes a restored slot's dtype and shape from the checkpoint)."""
  want_dtype = tf.as_dtype(want_dtype)
  for name, slot in slots.items():
    shape = tf.TensorShape((want_shapes or {}).get(name, var.shape))
    if tf.as_dtype(slot.dtype) != want_dtype or tf.TensorShape(slot.shape) != shape:
      raise ValueError(
          f"Slot {name} of {getattr(var, 'name', var)} is {tf.as_dtype(slot.dtype).name}"
          f"{tf.TensorShape(slot.shape)}, but this optimizer keeps it as {want_dtype.name}{shape}: "
          f"it was restored from a checkpoint of another slot layout. {LAYOUT_ADVICE}")


class LazyAdamMixin:
  """The constructor, light-state options (`LightState`) and config of every LazyAdam flavor.

  First among each flavor's bases, so that its `__init__`, the signature of the Adam it
  replaces (as every Keras' Adam spells it) and then the light-state options, is the class's
  own, positional arguments included; a flavor adjusts what its base class gets in
  `_check_base_kwargs`.
  """

  def __init__(self, learning_rate=0.001, beta_1=0.9, beta_2=0.999, epsilon=1e-7, amsgrad=False,
               name="LazyAdam", slot_dtype=None, rowwise_second_moment=False,
               stochastic_rounding=None, seed=0, **kwargs):
    check_amsgrad(amsgrad)
    light_slots = LightState(slot_dtype, rowwise_second_moment, stochastic_rounding, seed)
    self._check_base_kwargs(kwargs)
    super().__init__(learning_rate=learning_rate, beta_1=beta_1, beta_2=beta_2, epsilon=epsilon,
                     amsgrad=False, name=name, **kwargs)
    self._init_light_slots(light_slots)

  def get_config(self):
    config = super().get_config()
    config.update(self._light_config())
    return config

  def _init_light_slots(self, light_slots):
    self._light_slots = light_slots

  def _light_options(self, var):
    return self._light_slots.op_options(var)

  def _light_config(self):
    return self._light_slots.config() if self._light_slots.enabled else {}

  def _slot_layouts(self, var):
    """{slot: (dtype name, shape)} of the slots this optimizer keeps for `var`."""
    dtype = self._light_slots.slot_dtype_for(var).name
    return {
        "m": (dtype, tuple(tf.TensorShape(var.shape).as_list())),
        "v": (dtype, tuple(self._light_slots.v_shape_for(var).as_list())),
    }


def lazy_adam(var, m, v, grad, *, lr, beta_1, beta_2, epsilon, step, use_locking=False,
              indices=None, fused_dense=False, on_mesh=False, light=None, weight_decay=None,
              moving_average=None, window=None):
  """Lazy Adam on `var` with slots `m`, `v`; the math is the op's (`ops.sparse_lazy_adam`).

  `grad` is a `tf.IndexedSlices` (or its values with `indices` given): only the
  named rows are updated, duplicates summed. A dense `grad` gets standard Adam
  on every element: `tf.raw_ops.ResourceApplyAdam` when `fused_dense` (what
  tf_keras' legacy Adam runs), else the arithmetic of Keras 3's and tf_keras'
  `Adam.update_step`, so dense results equal the flavor's own Adam. `step` is
  the 1-based step t; the hyperparameters may be numbers, tensors, variables or
  callables. `on_mesh`: the variables are DTensors, updated in standard ops in
  the formulation DTensor can lay out (every row computed, the touched ones
  written; see `_standard_ops`). `light`: `LightState.op_options(var)` when the
  slots are light; every update, dense ones too (as all rows), then runs the
  V2 op, which alone knows the light layout. `weight_decay` (None: none):
  stock Keras' decoupled decay before the update (`decay_weights`), fused into
  the op's pass where the op runs, of the rows a sparse `grad` names (all rows
  of a dense one). `moving_average`: the EMA state `moving_average_update` hands its
  `fused_update`, for the op that keeps the average in its own pass (sparse `grad`, the
  default slots, outside XLA). `window`: `(accumulator, row_ids, row_count, steps)` where
  `window_fuses` says so: `grad` is the window's last micro-step, and the op takes the
  window's average (`take_window_gradient`'s) and updates the window's rows with it in one
  pass; with `moving_average` too, the same pass keeps the average of the window's rows.
  """
  grad, indices, dtype, grad_scaling = _split_gradient(
      var, grad, indices, scale_in_op=window is None and _scales_in_op(var, on_mesh))
  if moving_average is not None and (light is not None or on_mesh or indices is None):
    raise ValueError("lazy_adam: moving_average= runs only in the sparse op with the default "
                     "slots; bring the average up to date first (moving_average_update).")
  if window is not None:
    if light is not None or on_mesh or indices is None or not window_fuses(var, window[0]):
      raise ValueError("lazy_adam: window= runs only in the sparse op on the CPU with the "
                       "default slots (window_fuses); take the window's average first "
                       "(take_window_gradient).")
    indices = tf.cast(indices, window[1].dtype)
  hypers = dict(lr=lr, beta_1=beta_1, beta_2=beta_2, epsilon=epsilon, step=step)
  if hasattr(m, "shape") and hasattr(var, "shape"):  # not bare handles
    want_dtype = light["slot_dtype"] if light else dtype
    v_shape = tf.TensorShape(var.shape)
    if light and light["rowwise_second_moment"]:
      v_shape = v_shape[:1]
    check_slot_layout(var, {"m": m, "v": v}, want_dtype, {"v": v_shape})
  if weight_decay is not None:
    fused = light is not None or (indices is not None and not on_mesh and
                                  not xla_fallback("LazyAdam", var))
    if not fused:
      decay_weights(var, grad if indices is None else tf.IndexedSlices(grad, indices), lr,
                    weight_decay)
      weight_decay = None
    else:
      # Rounded to the variable's dtype as decay_weights rounds it, so the op's decay is its.
      weight_decay = tf.cast(tf.cast(weight_decay, dtype), scalar_dtype(dtype))
  if light is not None:
    return _light_lazy_adam(var, m, v, grad, indices, dtype, hypers, light, use_locking, on_mesh,
                            weight_decay, grad_scaling)
  if on_mesh:
    if indices is None:
      return _standard_ops.dense_adam(var, m, v, grad, **hypers)
    return _standard_ops.sparse_lazy_adam(var, m, v, grad, indices, masked=True, **hypers)
  if indices is not None and xla_fallback("LazyAdam", var):
    return _standard_ops.sparse_lazy_adam(var, m, v, grad, indices, **hypers)
  scalars, _ = adam_scalars(scalar_dtype(dtype), **hypers)
  if indices is not None:
    return ops.sparse_lazy_adam(var, m, v, grad, indices, use_locking=use_locking,
                                weight_decay=weight_decay, moving_average=moving_average,
                                window=window, **grad_scaling, **scalars)
  # Standard ops only (ResourceApplyAdam has an XLA kernel): no fallback needed.
  if fused_dense and dtype in (tf.float32, tf.float64):
    return tf.raw_ops.ResourceApplyAdam(var=handle(var), m=handle(m), v=handle(v), grad=grad,
                                        use_locking=use_locking,
                                        beta1_power=scalars["beta_1_power"],
                                        beta2_power=scalars["beta_2_power"], lr=scalars["lr"],
                                        beta1=scalars["beta_1"], beta2=scalars["beta_2"],
                                        epsilon=scalars["epsilon"])
  # Half types compute in float32 (in the variable's type 0.999 rounds to 1.0
  # in bfloat16 and would freeze v); only the stored values are rounded.
  return _standard_ops.dense_adam(var, m, v, grad, **hypers)


def _refuse_light_state_in_standard_ops(what, var, on_mesh):
  """Raises where only the standard-ops formulation can run (DTensor, XLA without kernels):
  light state exists only in the V2 ops."""
  reason = None if on_mesh else (_loader.xla_unavailable(
      gpu=_on_gpu(var)) if _tf_private.in_xla_context() else None)
  if on_mesh or reason is not None:
    where = "under DTensor" if on_mesh else f"inside XLA here ({reason})"
    raise ValueError(f"{what} (light optimizer state) runs only in its fused op, which cannot "
                     f"run {where}; use the default state there, or run the step without "
                     f"jit_compile.")


def _light_lazy_adam(var, m, v, grad, indices, dtype, hypers, light, use_locking, on_mesh,
                     weight_decay, grad_scaling):
  """Lazy Adam with light slots: op ResourceSparseApplyLazyAdamV2, a dense gradient as all rows."""
  _refuse_light_state_in_standard_ops("LazyAdam with slot_dtype / rowwise_second_moment", var,
                                      on_mesh)
  if indices is None:
    indices = tf.range(tf.shape(grad, out_type=tf.int64)[0])
  scalars, _ = adam_scalars(scalar_dtype(dtype), **hypers)
  return ops.sparse_lazy_adam(var, m, v, grad, indices, use_locking=use_locking,
                              step=hypers["step"], weight_decay=weight_decay, **grad_scaling,
                              **scalars, **light)


# ----------------------------------------------------------------------------- Clippy Adagrad


def clippy_adagrad(var, accum, grad, *, lr, epsilon, variable_relative_threshold,
                   accumulator_relative_threshold, absolute_threshold, clip_accumulator_update,
                   use_standard_accumulator_update, clipping_factor=None, use_locking=False,
                   indices=None, scale=None, on_mesh=False, light=None, weight_decay=None,
                   moving_average=None, window=None):
  """Clippy Adagrad on `var` with accumulator `accum`; returns the scale.

  The math is the op's (`ops.clippy_adagrad`). A sparse `grad`
  (`tf.IndexedSlices`, or values with `indices`) updates the named rows only.
  A given `scale` (a scalar tensor) is applied instead of the one `var`'s own
  values give: the scale of the sharded variable `var` is a shard of (see
  `sharded_clippy_scales`). When `clipping_factor` (a scalar variable) is
  given, the scale is assigned to it. `on_mesh`: as for `lazy_adam` (the
  scale's minimum is then a reduction over the mesh). `light`: the accumulator
  options of op ResourceApplyClippyAdagradV2 (`accumulator_dtype`,
  `stochastic_rounding`, `seed`, `step`) when the accumulator is light.
  `weight_decay` (None: none): stock Keras' decoupled decay before the update
  (`decay_weights`), of the rows a sparse `grad` names (all rows of a dense
  one); the scale is that of the decayed values. Fused into the sparse op's
  passes where that op runs with its own scale; decayed first otherwise.
  `moving_average`: as for `lazy_adam` (the sparse op with the default accumulator, outside
  XLA, which keeps the average in its update pass). `window`: as for `lazy_adam` (the sparse
  op with its own scale and the default accumulator, where `window_fuses` says so).
  """
  _check_clippy_flags(clip_accumulator_update, use_standard_accumulator_update)
  # A given scale goes into the gradient itself (`_with_given_scale`): no grad_scale then.
  grad, indices, dtype, grad_scaling = _split_gradient(
      var, grad, indices, scale_in_op=(window is None and scale is None and
                                       _scales_in_op(var, on_mesh)))
  if moving_average is not None and (light is not None or on_mesh or indices is None or
                                     window is not None):
    raise ValueError("clippy_adagrad: moving_average= runs only in the sparse op with the "
                     "default accumulator, without window=; bring the average up to date "
                     "first (moving_average_update).")
  if window is not None:
    if (light is not None or on_mesh or indices is None or scale is not None or
        not window_fuses(var, window[0])):
      raise ValueError("clippy_adagrad: window= runs only in the sparse op on the CPU with its "
                       "own scale and the default accumulator (window_fuses); take the "
                       "window's average first (take_window_gradient).")
    indices = tf.cast(indices, window[1].dtype)
  if hasattr(accum, "shape") and hasattr(var, "shape"):  # not bare handles
    check_slot_layout(var, {"accumulator": accum}, light["accumulator_dtype"] if light else dtype)
  if light is not None:
    _refuse_light_state_in_standard_ops("ClippyAdagrad with accumulator_dtype", var, on_mesh)
  hypers = dict(lr=lr, epsilon=epsilon, variable_relative_threshold=variable_relative_threshold,
                accumulator_relative_threshold=accumulator_relative_threshold,
                absolute_threshold=absolute_threshold)
  flags = dict(clip_accumulator_update=bool(clip_accumulator_update),
               use_standard_accumulator_update=bool(use_standard_accumulator_update))
  fallback = on_mesh or xla_fallback("ClippyAdagrad", var)
  if weight_decay is not None:
    # A given scale was computed from the decayed values before the op: decay first.
    if indices is None or scale is not None or fallback:
      decay_weights(var, grad if indices is None else tf.IndexedSlices(grad, indices), lr,
                    weight_decay)
      weight_decay = None
    else:
      # Rounded to the variable's dtype as decay_weights rounds it, so the op's decay is its.
      weight_decay = tf.cast(tf.cast(weight_decay, dtype), scalar_dtype(dtype))
  if fallback:
    return _assign_factor(
        clipping_factor,
        _standard_ops.clippy_adagrad(var, accum, grad, indices, **hypers, **flags, scale=scale,
                                     masked=on_mesh))
  if scale is not None:
    scale = tf.cast(scale, scalar_dtype(dtype))
    grad, hypers, flags = _with_given_scale(grad, scale, hypers, flags)
  if indices is not None:
    op_scale = ops.sparse_clippy_adagrad(var, accum, grad, indices, use_locking=use_locking,
                                         weight_decay=weight_decay, moving_average=moving_average,
                                         window=window, **grad_scaling, **hypers, **flags,
                                         **(light or {}))
  else:
    op_scale = ops.clippy_adagrad(var, accum, grad, use_locking=use_locking, **hypers, **flags,
                                  **(light or {}))
  if scale is not None:
    # The op's own scale is 1 here; the factor and the caller get the given one,
    # once the update has run.
    with tf.control_dependencies([op_scale]):
      return _assign_factor(clipping_factor, tf.identity(scale))
  return _assign_factor(clipping_factor, op_scale)


def _with_given_scale(grad, scale, hypers, flags):
  """The op's inputs that make it apply `scale` instead of its own: (grad, hypers, flags).

  An infinite absolute threshold makes every element's max_delta / |delta|
  infinite, so the op's own scale is 1; the given scale then goes into the
  rate (delta * scale = (lr * scale) * g * p), or, when the accumulator takes
  the clipped gradient, into the gradient itself (then the accumulator adds
  (g * scale)^2 with the flag off). Equal to applying the scale after the
  step to float32 rounding.
  """
  hypers = dict(hypers, absolute_threshold=float("inf"))
  if flags["clip_accumulator_update"]:
    grad = tf.cast(tf.cast(grad, scale.dtype) * scale, grad.dtype)
    flags = dict(flags, clip_accumulator_update=False)
  else:
    hypers["lr"] = scalar(hypers["lr"], scale.dtype) * scale
  return grad, hypers, flags


def _assign_factor(clipping_factor, scale):
  if clipping_factor is None:
    return scale
  value = tf.cast(scale, tf.as_dtype(clipping_factor.dtype))
  with tf.control_dependencies(
      [tf.raw_ops.AssignVariableOp(resource=handle(clipping_factor), value=value)]):
    return tf.identity(scale)


def sharded_clippy_scales(grads_and_vars, key, accumulator, lr, **options):
  """{key(shard): the clipping scale of the whole variable} for the shards in `grads_and_vars`.

  A sharded variable is one variable: its scale is the minimum of its shards'
  scales (NaN if any is NaN), the number one device computes for the whole
  table. Each shard's scale is computed where the shard lives, reading only
  the rows its gradient names, so only scalars move. `accumulator(shard)` and
  `lr(shard)` are the shard's accumulator and rate; `options` are
  `clippy_adagrad`'s other hyperparameters and flags. Empty when nothing is
  sharded. Why: see docs/design.md, "Invariants".
  """
  shards_of = {}
  for grad, var in grads_and_vars:
    container = _tf_private.sharded_container(var)
    if grad is not None and container is not None:
      shards_of.setdefault(id(container), []).append((grad, var))
  scales = {}
  for pairs in shards_of.values():
    shard_scales = []
    for grad, var in pairs:
      grad, indices, _, _ = _split_gradient(var, grad, None)
      with tf.device(var.device):
        shard_scales.append(
            _standard_ops.clippy_scale(var, accumulator(var), grad, indices, lr=lr(var), **options))
    shard_scales = tf.stack(shard_scales)
    nan = tf.constant(float("nan"), shard_scales.dtype)
    scale = tf.where(tf.reduce_any(tf.math.is_nan(shard_scales)), nan, tf.reduce_min(shard_scales))
    for _, var in pairs:
      scales[key(var)] = scale
  return scales


class _StepScales:
  """The scales of the sharded variables in the step being built (not optimizer state)."""

  def __init__(self):
    self.scales = {}


class ClippyAdagradMixin:
  """The constructor, its checks, the config and the update call of every ClippyAdagrad flavor.

  First among each flavor's bases, so that its `__init__`, TensorFlow Recommenders'
  ClippyAdagrad signature, is the class's own; each flavor hands the learning rate and the
  rest to its base class in `_init_base_optimizer`, which also calls `init_options` (the checks
  and storage of the other options) where its base class allows.
  """

  def __init__(self, learning_rate=0.001, initial_accumulator_value=0.1,
               variable_relative_threshold=0.1, accumulator_relative_threshold=0.0,
               absolute_threshold=1e-7, epsilon=1e-7, export_clipping_factors=False,
               clip_accumulator_update=False, use_standard_accumulator_update=False,
               name="ClippyAdagrad", accumulator_dtype=None, stochastic_rounding=None, seed=0,
               **kwargs):
    options = dict(initial_accumulator_value=initial_accumulator_value,
                   variable_relative_threshold=variable_relative_threshold,
                   accumulator_relative_threshold=accumulator_relative_threshold,
                   absolute_threshold=absolute_threshold, epsilon=epsilon,
                   export_clipping_factors=export_clipping_factors,
                   clip_accumulator_update=clip_accumulator_update,
                   use_standard_accumulator_update=use_standard_accumulator_update,
                   accumulator_dtype=accumulator_dtype, stochastic_rounding=stochastic_rounding,
                   seed=seed)
    # Keras 3's base class must be initialized first, Keras 2's after the options are kept.
    self._init_base_optimizer(learning_rate, name, kwargs, lambda: self._init_clippy(**options))

  def _init_clippy(self, *, initial_accumulator_value, variable_relative_threshold,
                   accumulator_relative_threshold, absolute_threshold, epsilon,
                   export_clipping_factors, clip_accumulator_update,
                   use_standard_accumulator_update, accumulator_dtype=None,
                   stochastic_rounding=None, seed=0):
    """Checks and keeps every option but the learning rate (each base class keeps that)."""
    export_clipping_factors = check_bool_option("export_clipping_factors", export_clipping_factors)
    clip_accumulator_update = check_bool_option("clip_accumulator_update", clip_accumulator_update)
    use_standard_accumulator_update = check_bool_option("use_standard_accumulator_update",
                                                        use_standard_accumulator_update)
    _check_clippy_flags(clip_accumulator_update, use_standard_accumulator_update)
    self._light_accumulator = LightState(accumulator_dtype, False, stochastic_rounding, seed,
                                         min_rank=0, option="accumulator_dtype")
    check_non_negative(initial_accumulator_value=initial_accumulator_value,
                       variable_relative_threshold=variable_relative_threshold,
                       accumulator_relative_threshold=accumulator_relative_threshold,
                       absolute_threshold=absolute_threshold)
    self.initial_accumulator_value = initial_accumulator_value
    self.variable_relative_threshold = variable_relative_threshold
    self.accumulator_relative_threshold = accumulator_relative_threshold
    self.absolute_threshold = absolute_threshold
    self.epsilon = epsilon
    self.export_clipping_factors = export_clipping_factors
    self.clip_accumulator_update = clip_accumulator_update
    self.use_standard_accumulator_update = use_standard_accumulator_update
    self._step_scales = _StepScales()

  def _clippy_config(self):
    return {
        "initial_accumulator_value": self.initial_accumulator_value,
        "variable_relative_threshold": self.variable_relative_threshold,
        "accumulator_relative_threshold": self.accumulator_relative_threshold,
        "absolute_threshold": self.absolute_threshold,
        "epsilon": self.epsilon,
        "export_clipping_factors": self.export_clipping_factors,
        "clip_accumulator_update": self.clip_accumulator_update,
        "use_standard_accumulator_update": self.use_standard_accumulator_update,
        **self._light_accumulator_config(),
    }

  def _light_accumulator_config(self):
    if not self._light_accumulator.enabled:
      return {}  # TFRS' config
    config = self._light_accumulator.config()
    return dict(accumulator_dtype=config["slot_dtype"],
                stochastic_rounding=config["stochastic_rounding"], seed=config["seed"])

  def _accumulator_dtype(self, var):
    """The dtype of `var`'s accumulator (the variable's unless `accumulator_dtype` says)."""
    return self._light_accumulator.slot_dtype_for(var)

  def _slot_layouts(self, var):
    """{slot: (dtype name, shape)} of the slots this optimizer keeps for `var`."""
    return {
        "accumulator":
            (self._accumulator_dtype(var).name, tuple(tf.TensorShape(var.shape).as_list()))
    }

  def _light_accumulator_options(self, var, step):
    options = self._light_accumulator.op_options(var)
    if options is None:
      return None
    return dict(accumulator_dtype=options["slot_dtype"],
                stochastic_rounding=options["stochastic_rounding"], seed=options["seed"], step=step)

  def _clippy_options(self):
    return dict(epsilon=self.epsilon, variable_relative_threshold=self.variable_relative_threshold,
                accumulator_relative_threshold=self.accumulator_relative_threshold,
                absolute_threshold=self.absolute_threshold,
                clip_accumulator_update=self.clip_accumulator_update,
                use_standard_accumulator_update=self.use_standard_accumulator_update)

  def _compute_sharded_scales(self, grads_and_vars, key, accumulator, lr):
    """Before the per-variable updates of a step: the scales of the sharded variables.

    Kept for `_clippy_apply` until the next step; `lr(var)` is the rate as the
    update of `var` resolves it.
    """
    grads_and_vars = list(grads_and_vars)
    self._step_scales.scales = sharded_clippy_scales(grads_and_vars, key, accumulator, lr,
                                                     **self._clippy_options())
    return grads_and_vars

  def _clippy_apply(self, grad, var, accum, clipping_factor, lr, step, use_locking=False,
                    indices=None, key=None, on_mesh=False, weight_decay=None, moving_average=None,
                    window=None):
    """`step`: the 1-based step, which keys a light accumulator's rounding noise;
    `weight_decay`: the base class's decay of `var`, `moving_average` the EMA state the op
    keeps, `window` a window whose apply step this is (`clippy_adagrad`'s)."""
    scale = self._step_scales.scales.get(key) if key is not None else None
    return clippy_adagrad(var, accum, grad, lr=lr, clipping_factor=clipping_factor,
                          use_locking=use_locking, indices=indices, scale=scale, on_mesh=on_mesh,
                          light=self._light_accumulator_options(var, step),
                          weight_decay=weight_decay, moving_average=moving_average, window=window,
                          **self._clippy_options())


# The class docstrings every flavor shares; each formula is stated once, in its op's doc.
LAZY_ADAM_DOC = """Lazy Adam: sparse gradients update only the rows they name.

  Replaces TensorFlow Addons' and Merlin's `LazyAdam`. A `tf.IndexedSlices`
  gradient (an embedding lookup's) updates only the rows it names, duplicates
  summed, in one fused kernel (the math: op `TfOptOps>ResourceSparseApplyLazyAdam`,
  `tf_opt_ops/ops/lazy_adam_ops.cc`); a dense gradient gets this flavor's standard
  Adam update. State (slots `m`/`v`, or momentums and velocities) is that of
  this flavor's `Adam`, so checkpoints move both ways. Options are `Adam`'s;
  `amsgrad=True` raises `ValueError`.

  Light state, for tables that do not fit with two float32 slots (op
  `TfOptOps>ResourceSparseApplyLazyAdamV2`; float16/bfloat16/float32 variables
  of rank >= 1, others keep Adam's slots):

  - `slot_dtype`: None (the variable's dtype), "bfloat16", "float16" or
    "float32". "bfloat16" halves a float32 table's state (4 instead of 8
    bytes per element); the math stays float32 and only stored slots round.
    "float32" for a float16/bfloat16 table keeps v from underflowing.
    float16 slots overflow past 65504 (v of gradients above ~8000).
  - `rowwise_second_moment`: v holds one value per row, fed by the mean of
    the row's squared gradient (FBGEMM's partial row-wise Adam): 1 + 1/d
    slots per element instead of 2, and every element of a row takes the
    same step size. It changes the optimizer, not only its storage.
  - `stochastic_rounding`: None (on for 16-bit `slot_dtype`), True, False.
    Round-to-nearest 16-bit slots lose updates smaller than half a unit in
    the last place; stochastic rounding keeps them on average. The noise is
    a hash of (seed, step, row, column), so reruns are bit-identical.
  - `seed`: the noise seed, mixed with each variable's name.

  The slot layout is part of the checkpoint (each slot's dtype and shape): a
  checkpoint restores into a LazyAdam of the same options, one of another
  layout fails naming the slot, and `tf_opt_ops.convert_checkpoint` converts
  one to another layout.
  """

CLIPPY_DOC = """Adagrad with adaptive clipping of the update (Clippy, arXiv:2302.09178).

  Replaces TensorFlow Recommenders' `ClippyAdagrad`, with its options and state
  (an `accumulator` per variable), computed by fused kernels: dense, and sparse
  on the rows a `tf.IndexedSlices` gradient names, duplicates summed (the math:
  op `TfOptOps>ResourceApplyClippyAdagrad`, `tf_opt_ops/ops/clippy_adagrad_ops.cc`).
  `export_clipping_factors=True` keeps `clipping_factors`, one scalar variable
  per model variable holding the last scale. `clip_accumulator_update` and
  `use_standard_accumulator_update` cannot both be True.

  Light state (op `TfOptOps>ResourceApplyClippyAdagradV2`; float16, bfloat16
  and float32 variables): `accumulator_dtype` None (the variable's dtype),
  "bfloat16", "float16" or "float32" keeps the accumulator in that dtype; the
  math stays float32 and reads the stored accumulator, so the clipping bound
  (which depends on it) sees what is stored. A bfloat16 accumulator halves a
  float32 table's state but holds 8 significant bits: an accumulator that has
  grown large stops taking small g^2 under rounding to nearest, which
  `stochastic_rounding` (None: on for a 16-bit `accumulator_dtype`) keeps on
  average, with noise hashed from (`seed`, step, element). float16 overflows
  past 65504. A checkpoint keeps the accumulator's dtype.
  """

# ----------------------------------------------------------------------------- Row-wise Adagrad


def rowwise_accumulator_dtype(var):
  """The dtype of `var`'s row-wise accumulator: the kernels' compute dtype (float32, float64 for
  a float64 variable)."""
  return scalar_dtype(tf.as_dtype(var.dtype))


def rowwise_accumulator_shape(var):
  """[rows]: one accumulator value per row of `var`; ValueError for a scalar variable."""
  shape = tf.TensorShape(var.shape)
  if shape.rank is None or shape.rank < 1:
    raise ValueError(f"RowwiseAdagrad keeps one accumulator value per row, so {var.name} must be "
                     f"at least 1-D, got shape {shape}: train scalars with another optimizer "
                     "(a router's rules can send them to one).")
  return shape[:1]


def rowwise_adagrad(var, accum, grad, *, lr, epsilon, weight_decay, weight_decay_mode,
                    use_locking=False, indices=None, stochastic_rounding=None, seed=0):
  """Row-wise Adagrad on `var` with its row-wise accumulator `accum`; the math is the op's
  (`ops.sparse_rowwise_adagrad`).

  A sparse `grad` (a `tf.IndexedSlices`, or values with `indices`) updates the rows it names,
  duplicates summed. A dense `grad` updates every row by the same row-wise rule: the op over
  all rows in order, so a dense step equals a sparse one that names every row once.
  `stochastic_rounding` (None: on for a float16 or bfloat16 `var`, FBGEMM's default for its
  16-bit tables) rounds a 16-bit `var` stochastically, with noise keyed by the optimizer's
  `seed` and the variable's name; a float32 or float64 `var` holds its values exactly.
  """
  grad, indices, dtype, _ = _split_gradient(var, grad, indices)
  asked = stochastic_rounding
  stochastic = (tf.as_dtype(var.dtype).base_dtype in (tf.float16, tf.bfloat16) and
                (asked is None or bool(asked)))
  if hasattr(accum, "shape") and hasattr(var, "shape"):  # not bare handles
    check_slot_layout(var, {"accumulator": accum}, rowwise_accumulator_dtype(var),
                      {"accumulator": rowwise_accumulator_shape(var)})
  if indices is None:
    indices = tf.range(tf.shape(grad, out_type=tf.int64)[0])
  if xla_fallback("RowwiseAdagrad", var):
    # Standard ops round to nearest only: refuse the stochastic rounding asked for.
    if stochastic and asked:
      raise ValueError(
          f"RowwiseAdagrad was asked to round the 16-bit table {var.name} stochastically, which "
          "its fused op does, but this XLA-compiled step has no XLA kernels for it (see the "
          "logged reason): run the step without jit_compile, or pass stochastic_rounding=False "
          "(or None) to round to nearest there.")
    return _standard_ops.sparse_rowwise_adagrad(
        var, accum, grad, indices, lr=scalar(lr, scalar_dtype(dtype)), epsilon=epsilon,
        weight_decay=weight_decay, weight_decay_mode=ops.weight_decay_mode_name(weight_decay_mode))
  return ops.sparse_rowwise_adagrad(var, accum, grad, indices, lr=lr, epsilon=epsilon,
                                    weight_decay=weight_decay, weight_decay_mode=weight_decay_mode,
                                    use_locking=use_locking, stochastic_rounding=stochastic,
                                    seed=variable_noise_seed(seed, var) if stochastic else 0)


class RowwiseAdagradMixin:
  """The constructor, its checks, the config, the state's layout and the update call of every
  RowwiseAdagrad flavor.

  First among each flavor's bases, so that its `__init__` is the class's own; each flavor hands
  the learning rate and the rest to its base class in `_init_base_optimizer`, which calls
  `init_options` (the checks and storage of the other options) where its base class allows.
  `weight_decay` is FBGEMM's, applied by the op as `weight_decay_mode` says (not the base class's
  decoupled decay, which the flavors leave off).
  """

  def __init__(self, learning_rate=0.01, initial_accumulator_value=0.0, epsilon=1e-8,
               weight_decay=0.0, weight_decay_mode="none", stochastic_rounding=None, seed=0,
               name="RowwiseAdagrad", **kwargs):
    options = dict(initial_accumulator_value=initial_accumulator_value, epsilon=epsilon,
                   weight_decay=weight_decay, weight_decay_mode=weight_decay_mode,
                   stochastic_rounding=stochastic_rounding, seed=seed)
    self._init_base_optimizer(learning_rate, name, kwargs,
                              lambda: self._init_rowwise_adagrad(**options))

  def _init_rowwise_adagrad(self, *, initial_accumulator_value, epsilon, weight_decay,
                            weight_decay_mode, stochastic_rounding, seed):
    """Checks and keeps every option but the learning rate (each base class keeps that)."""
    check_non_negative(initial_accumulator_value=initial_accumulator_value, epsilon=epsilon,
                       weight_decay=0.0 if weight_decay is None else weight_decay)
    self.initial_accumulator_value = initial_accumulator_value
    self.epsilon = epsilon
    self.weight_decay = 0.0 if weight_decay is None else weight_decay
    self.weight_decay_mode = ops.weight_decay_mode_name(weight_decay_mode)
    self.stochastic_rounding = check_bool_option("stochastic_rounding", stochastic_rounding,
                                                 none_means="on for 16-bit tables")
    self.seed = check_seed(seed)

  def _rowwise_adagrad_config(self):
    return {
        "initial_accumulator_value": self.initial_accumulator_value,
        "epsilon": self.epsilon,
        "weight_decay": self.weight_decay,
        "weight_decay_mode": self.weight_decay_mode,
        "stochastic_rounding": self.stochastic_rounding,
        "seed": self.seed,
    }

  def _slot_layouts(self, var):
    """{slot: (dtype name, shape)} of the slots this optimizer keeps for `var`."""
    return {
        "accumulator":
            (rowwise_accumulator_dtype(var).name, tuple(rowwise_accumulator_shape(var).as_list()))
    }

  def _initial_accumulator(self, var):
    """The accumulator's first value for `var`: [rows] of `initial_accumulator_value`."""
    return tf.fill(
        rowwise_accumulator_shape(var).as_list(),
        tf.constant(self.initial_accumulator_value, rowwise_accumulator_dtype(var)))

  def _rowwise_apply(self, grad, var, accum, lr, use_locking=False, indices=None):
    return rowwise_adagrad(var, accum, grad, lr=lr, epsilon=self.epsilon,
                           weight_decay=self.weight_decay, weight_decay_mode=self.weight_decay_mode,
                           use_locking=use_locking, indices=indices,
                           stochastic_rounding=self.stochastic_rounding, seed=self.seed)


ROWWISE_ADAGRAD_DOC = """Row-wise Adagrad: FBGEMM's EXACT_ROWWISE_ADAGRAD, TorchRec's default.

  One accumulator value per row of each variable (slot `accumulator`, shape
  `[rows]`, float32, or float64 for a float64 variable): the state of a
  64-wide table is 1/64 of Adagrad's. Per row r a step touches, with g its
  gradient row (duplicates summed): `accum[r] += mean_j(g_j^2)`, then
  `w -= lr * g / (sqrt(accum[r]) + epsilon)` (the math, weight decay
  included: op `TfOptOps>ResourceSparseApplyRowwiseAdagrad`,
  `tf_opt_ops/ops/rowwise_adagrad_ops.cc`). A `tf.IndexedSlices` gradient
  updates only the rows it names; a dense one updates every row by the same
  rule. Variables must be at least 1-D.

  Defaults are FBGEMM's: `learning_rate` 0.01, `initial_accumulator_value`
  0, `epsilon` 1e-8 (outside the square root). `weight_decay` and
  `weight_decay_mode` are FBGEMM's: "none", "l2" (the decay added to the
  gradient, through the mean and the adaptive step) or "decoupled"
  (`w *= 1 - lr * weight_decay` before the step), or FBGEMM's numbers 0, 1,
  2; the decay applies to the rows a step touches only. Inside XLA
  (`jit_compile`) the op runs through its XLA kernel, a custom call into the
  same CPU update and CUDA kernel.

  `stochastic_rounding` (None: on for a float16 or bfloat16 table, as FBGEMM
  runs its 16-bit tables; True; False: round to nearest even) rounds a
  16-bit table's new rows stochastically, so that updates below half its
  last place still move it on average. The noise is a hash of (`seed` mixed
  with the variable's name, the row's accumulator, row, column), so reruns
  are bit-identical, with XLA or without; float32 and float64 tables are
  unaffected. Where XLA has no kernels for the op (the standard-ops
  fallback, logged) the default rounds to nearest and True is refused.
  """
