"""Lazy Adam, Adam and Clippy Adagrad written in standard TensorFlow ops.

The same math as the fused kernels (stated once, in the op docs of
`tf_opt_ops/ops/lazy_adam_ops.cc` and `tf_opt_ops/ops/clippy_adagrad_ops.cc`), for
where those kernels do not run:

- inside an XLA-compiled function where the ops have no XLA kernels (TensorFlow
  2.15 and 2.16, a GPU variable with a library built without CUDA: docs/design.md,
  "XLA"); a bad index there writes nothing, where the fused ops fail the step (XLA
  has no data-dependent errors);
- the dense Adam of the Keras 3 and tf_keras flavors, which must equal each
  flavor's own `Adam` bit for bit;
- the benchmark's composite baseline: what Python optimizers run today.

Variables may be `tf.Variable`s, Keras 3 variables or resource handles;
hyperparameters numbers, tensors, variables or callables. Half-precision
variables compute in float32; only the stored values are rounded.
"""

import tensorflow as tf

from tf_opt_ops import _tf_private
from tf_opt_ops._op_inputs import adam_scalars
from tf_opt_ops._op_inputs import clippy_scalars
from tf_opt_ops._op_inputs import handle
from tf_opt_ops._op_inputs import scalar_dtype
from tf_opt_ops._op_inputs import value_dtype


def _none_unless_all_in_range(var, rows):
  """Inside XLA: `rows`, or, when one is outside [0, rows of `var`), all of them out of range.

  XLA cannot fail a step on a value (no data-dependent errors), and it clamps an
  out-of-range gather and skips an out-of-range scatter: one bad index would
  update the other rows and drop its own. With every index out of range the
  update writes nothing, as the fused ops, which fail the step instead.
  """
  num_rows = tf.raw_ops.VariableShape(input=handle(var), out_type=rows.dtype)[0]
  in_range = tf.reduce_all((rows >= 0) & (rows < num_rows))
  return tf.where(in_range, rows, tf.fill(tf.shape(rows), num_rows))


def deduplicate(values, indices):
  """Sums the rows of `values` that share an index; returns (values, unique indices)."""
  unique, positions = tf.unique(indices)
  summed = tf.math.unsorted_segment_sum(values, positions, tf.shape(unique)[0])
  return summed, unique


class _Touched:
  """The rows a sparse gradient names, as a boolean mask over every row.

  The formulation a DTensor mesh can lay out (it has no layout propagation
  for gathers, scatters or custom ops): read every row, compute every row,
  and write back `where(touched, new, old)`, so that untouched rows keep
  their bits as with the sparse update. Why: see docs/design.md, "Choices".
  """

  def __init__(self, indices, rows, rank):
    touched = tf.math.unsorted_segment_sum(tf.ones_like(indices, tf.int32), indices, rows) > 0
    self.mask = tf.reshape(touched, [-1] + [1] * (rank - 1))


def _read(variable, stored, rows, dtype):
  """The `rows` of `variable` (all for None or `_Touched`), stored as `stored`, cast to `dtype`."""
  h = handle(variable)
  if rows is None or isinstance(rows, _Touched):
    value = tf.raw_ops.ReadVariableOp(resource=h, dtype=stored)
  else:
    value = tf.raw_ops.ResourceGather(resource=h, indices=rows, dtype=stored)
  return tf.cast(value, dtype)


def _write(variable, stored, rows, value):
  """Stores `value`, rounded to `stored`, into the `rows` of `variable` (all when None)."""
  h = handle(variable)
  value = tf.cast(value, stored)
  if isinstance(rows, _Touched):
    old = tf.raw_ops.ReadVariableOp(resource=h, dtype=stored)
    value = tf.where(rows.mask, value, old)
  if rows is None or isinstance(rows, _Touched):
    return tf.raw_ops.AssignVariableOp(resource=h, value=value)
  return tf.raw_ops.ResourceScatterUpdate(resource=h, indices=rows, updates=value)


def _gradient(var, grad, indices, masked=False):
  """(the dtype `var` stores, the gradient in the compute dtype, the rows it names or None).

  The gradient is first rounded to the stored dtype, as the fused ops take it;
  with `indices`, the rows that share an index are summed. With `masked`, the
  gradient is dense (zero on rows not named) and the rows are a `_Touched`.
  """
  grad = tf.convert_to_tensor(grad)
  stored = value_dtype(var, grad)
  g = tf.cast(tf.cast(grad, stored), scalar_dtype(stored))
  if indices is None:
    return stored, g, None
  if masked:
    rows = var.shape[0]
    return stored, tf.math.unsorted_segment_sum(g, indices,
                                                rows), _Touched(indices, rows, var.shape.rank)
  g, rows = deduplicate(g, indices)
  if _tf_private.in_xla_context():
    rows = _none_unless_all_in_range(var, rows)
  return stored, g, rows


# ----------------------------------------------------------------------------- Adam


def _adam(var, m, v, grad, indices, *, lr, beta_1, beta_2, epsilon, step, masked=False):
  stored, g, rows = _gradient(var, grad, indices, masked)
  s = scalar_dtype(stored)
  scalars, one_minus = adam_scalars(s, lr=lr, beta_1=beta_1, beta_2=beta_2, epsilon=epsilon,
                                    step=step)
  alpha = scalars["lr"]
  if step is not None:
    alpha = alpha * tf.sqrt(1 - scalars["beta_2_power"]) / (1 - scalars["beta_1_power"])
  w, m_t, v_t = (_read(x, stored, rows, s) for x in (var, m, v))
  # Keras' Adam arithmetic, operation for operation: the dense path must equal it bit for bit.
  m_t = m_t + (g - m_t) * one_minus[0]
  v_t = v_t + (tf.square(g) - v_t) * one_minus[1]
  w = w - (m_t * alpha) / (tf.sqrt(v_t) + scalars["epsilon"])
  return tf.group(*[_write(x, stored, rows, new) for x, new in zip((var, m, v), (w, m_t, v_t))])


def sparse_lazy_adam(var, m, v, grad, indices, *, lr, beta_1, beta_2, epsilon, step, masked=False):
  """Lazy Adam on the rows of `var`, `m`, `v` named by `indices` (duplicates summed).

  `step` is the 1-based step t of Adam's bias correction; with `step=None`,
  `lr` is taken as the step's already corrected rate (as TF Addons' `LazyAdam`
  computes it before its row update). With `masked`, every row is computed
  and only the named ones written (`_Touched`). Returns the update op.
  """
  return _adam(var, m, v, grad, indices, lr=lr, beta_1=beta_1, beta_2=beta_2, epsilon=epsilon,
               step=step, masked=masked)


def dense_adam(var, m, v, grad, *, lr, beta_1, beta_2, epsilon, step):
  """Adam on every element of `var`, `m`, `v`. Returns the update op."""
  return _adam(var, m, v, grad, None, lr=lr, beta_1=beta_1, beta_2=beta_2, epsilon=epsilon,
               step=step)


# ----------------------------------------------------------------------------- Clippy Adagrad


def _clippy_terms(var, accum, grad, indices, hypers, use_standard_accumulator_update, masked=False):
  """What both passes of Clippy Adagrad read: (stored dtype, rows, g, w, a, p, delta, hypers).

  `a` is the accumulator the step divides by (already incremented by g^2 with
  the standard accumulator update); nothing is written.
  """
  stored, g, rows = _gradient(var, grad, indices, masked)
  s = scalar_dtype(stored)
  hypers = clippy_scalars(s, **hypers)
  # The accumulator in its own dtype (a light one's may differ from the variable's).
  w, a = _read(var, stored, rows, s), _read(accum, value_dtype(accum, grad), rows, s)
  if use_standard_accumulator_update:
    a = a + g * g
  p = tf.math.rsqrt(a + hypers["epsilon"])
  delta = hypers["lr"] * g * p
  return stored, rows, g, w, a, p, delta, hypers


def _clippy_scale(w, p, delta, hypers):
  max_delta = (hypers["variable_relative_threshold"] * tf.abs(w) +
               hypers["accumulator_relative_threshold"] * p + hypers["absolute_threshold"])
  per_element = tf.where(tf.equal(delta, 0), tf.ones_like(delta),
                         tf.math.divide_no_nan(max_delta, tf.abs(delta)))
  return tf.minimum(tf.ones([], delta.dtype), tf.reduce_min(per_element))


def clippy_scale(var, accum, grad, indices=None, *, lr, epsilon, variable_relative_threshold,
                 accumulator_relative_threshold, absolute_threshold,
                 use_standard_accumulator_update, **unused_flags):
  """The clipping scale Clippy Adagrad would apply to `var` now; reads, writes nothing.

  The first pass alone: for a shard of a sharded variable, whose scale is the
  minimum of its shards' scales (Why: see docs/design.md, "Invariants").
  """
  hypers = dict(lr=lr, epsilon=epsilon, variable_relative_threshold=variable_relative_threshold,
                accumulator_relative_threshold=accumulator_relative_threshold,
                absolute_threshold=absolute_threshold)
  _, _, _, w, _, p, delta, hypers = _clippy_terms(var, accum, grad, indices, hypers,
                                                  use_standard_accumulator_update)
  return _clippy_scale(w, p, delta, hypers)


def clippy_adagrad(var, accum, grad, indices=None, *, lr, epsilon, variable_relative_threshold,
                   accumulator_relative_threshold, absolute_threshold, clip_accumulator_update,
                   use_standard_accumulator_update, scale=None, masked=False):
  """Clippy Adagrad on `var` with accumulator `accum`; returns the clipping scale.

  With `indices`, only the rows they name (duplicates summed) are read and
  written, and the scale is the minimum over those rows (with `masked`, every
  row is computed, only the named ones written: a row with no gradient has
  delta 0, whose ratio 1 leaves the minimum alone). A given `scale` is applied
  instead of the one `var`'s own values give.
  """
  hypers = dict(lr=lr, epsilon=epsilon, variable_relative_threshold=variable_relative_threshold,
                accumulator_relative_threshold=accumulator_relative_threshold,
                absolute_threshold=absolute_threshold)
  stored, rows, g, w, a, p, delta, hypers = _clippy_terms(var, accum, grad, indices, hypers,
                                                          use_standard_accumulator_update, masked)
  if scale is None:
    scale = _clippy_scale(w, p, delta, hypers)
  else:
    scale = tf.cast(scale, delta.dtype)
  if not use_standard_accumulator_update:
    update = g * scale if clip_accumulator_update else g
    a = a + update * update
  with tf.control_dependencies(
      [_write(accum, stored, rows, a),
       _write(var, stored, rows, w - delta * scale)]):
    return tf.identity(scale)


# ----------------------------------------------------------------------------- Row-wise Adagrad


def sparse_rowwise_adagrad(var, accum, grad, indices, *, lr, epsilon, weight_decay,
                           weight_decay_mode):
  """Row-wise Adagrad on the rows of `var` named by `indices` (duplicates summed), `accum`
  holding one compute-type value per row (the rule: op ResourceSparseApplyRowwiseAdagrad's doc,
  `tf_opt_ops/ops/rowwise_adagrad_ops.cc`). The row mean is tf.reduce_mean's, whose order of
  additions is not the kernels' 32 lanes: results agree with theirs to float rounding, not bit
  for bit. Returns the update op."""
  stored, g, rows = _gradient(var, grad, indices)
  s = scalar_dtype(stored)
  lr, epsilon, weight_decay = (tf.cast(tf.convert_to_tensor(x), s) if isinstance(
      x, (tf.Tensor, tf.Variable)) else tf.constant(x, s) for x in (lr, epsilon, weight_decay))
  w = _read(var, stored, rows, s)
  a = _read(accum, s, rows, s)
  h = g + weight_decay * w if weight_decay_mode == "l2" else g
  flat = tf.reshape(h, [tf.shape(h)[0], -1])
  a = a + tf.reduce_mean(flat * flat, axis=1)
  multiplier = lr / (tf.sqrt(a) + epsilon)
  multiplier = tf.reshape(multiplier,
                          tf.concat([tf.shape(a), tf.ones([tf.rank(w) - 1], tf.int32)], 0))
  if weight_decay_mode == "l2":
    correction = 1 - multiplier * weight_decay
  elif weight_decay_mode == "decoupled":
    correction = 1 - lr * weight_decay
  else:
    correction = tf.ones([], s)
  new = correction * w - g * multiplier
  return tf.group(_write(accum, s, rows, a), _write(var, stored, rows, new))
