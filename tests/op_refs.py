"""NumPy references of SPEC §2 for the raw ops, step by step.

They compute in the kernels' compute type (float64 for float64 variables,
float32 otherwise) and round stored values to the variable's dtype after each
step, as the kernels do, so tolerances can stay tight for half types too.
"""

import ml_dtypes
import numpy as np
import tensorflow as tf

NUMPY_DTYPES = {
    tf.float16: np.float16,
    tf.bfloat16: ml_dtypes.bfloat16,
    tf.float32: np.float32,
    tf.float64: np.float64,
}


def compute_dtype(dtype):
  return np.float64 if dtype == tf.float64 else np.float32


def summed_rows(grad, indices, compute):
  """Unique rows in first-appearance order and their summed gradients."""
  rows, first = np.unique(indices, return_index=True)
  rows = rows[np.argsort(first)]
  position = {int(r): k for k, r in enumerate(rows)}
  summed = np.zeros((len(rows),) + grad.shape[1:], compute)
  for i, r in enumerate(indices):
    summed[position[int(r)]] += grad[i].astype(compute)
  return rows, summed


def lazy_adam(var, m, v, grad, indices, t, lr, beta_1, beta_2, epsilon):
  """One step; returns new (var, m, v) in the variables' dtype."""
  store = var.dtype
  c = compute_dtype(tf.float64 if store == np.float64 else tf.float32)
  var, m, v = (x.astype(c) for x in (var, m, v))
  rows, g = summed_rows(grad, indices, c)
  lr, beta_1, beta_2, epsilon = (c(x) for x in (lr, beta_1, beta_2, epsilon))
  lr_t = lr * np.sqrt(c(1) - beta_2**c(t)) / (c(1) - beta_1**c(t))
  m_t = beta_1 * m[rows] + (c(1) - beta_1) * g
  v_t = beta_2 * v[rows] + (c(1) - beta_2) * g * g
  m[rows] = m_t.astype(store).astype(c)
  v[rows] = v_t.astype(store).astype(c)
  var[rows] = var[rows] - lr_t * m_t / (np.sqrt(v_t) + epsilon)
  return var.astype(store), m.astype(store), v.astype(store)


def clippy_adagrad(var, accum, grad, indices=None, *, lr=0.001, epsilon=1e-7,
                   variable_relative_threshold=0.1, accumulator_relative_threshold=0.0,
                   absolute_threshold=1e-7, clip_accumulator_update=False,
                   use_standard_accumulator_update=False):
  """One step, dense when `indices` is None; returns (var, accum, scale)."""
  store = var.dtype
  c = np.float64 if store == np.float64 else np.float32
  var, accum = var.astype(c), accum.astype(c)
  if indices is None:
    rows, g = slice(None), grad.astype(c)
  else:
    rows, g = summed_rows(grad, indices, c)
  a = accum[rows]
  if use_standard_accumulator_update:
    a = (a + g * g).astype(store).astype(c)
  p = c(1) / np.sqrt(a + c(epsilon))
  delta = c(lr) * g * p
  max_d = (c(variable_relative_threshold) * np.abs(var[rows]) +
           c(accumulator_relative_threshold) * p + c(absolute_threshold))
  with np.errstate(divide="ignore", invalid="ignore"):
    ratio = np.where(delta == 0, c(1), max_d / np.abs(delta))
  scale = c(1) if ratio.size == 0 else np.minimum(c(1), np.min(ratio))
  if use_standard_accumulator_update:
    new_a = a
  elif clip_accumulator_update:
    new_a = a + (g * scale)**2
  else:
    new_a = a + g * g
  accum[rows] = new_a
  var[rows] = var[rows] - delta * scale
  return var.astype(store), accum.astype(store), scale


def tolerance(dtype):
  """(rtol, atol) for comparing one step's result with the reference."""
  return {
      tf.float16: (2e-3, 2e-3),
      tf.bfloat16: (1.6e-2, 1.6e-2),
      tf.float32: (2e-6, 2e-6),
      tf.float64: (1e-12, 1e-12),
  }[dtype]
