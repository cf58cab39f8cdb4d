"""NumPy references of the update rules, one function per op, in pure NumPy.

The formulas are stated once, in the op registration docs of
`tf_opt_ops/ops/lazy_adam_ops.cc` and `tf_opt_ops/ops/clippy_adagrad_ops.cc`; see also
docs/design.md, "The math"; `sparse_rowwise_adagrad` states FBGEMM's exact
row-wise Adagrad (docs/rowwise_adagrad.md), which its op is to be held to. Each
function here mirrors the per-element code of `tf_opt_ops/core/optimizer_math.h`
operation for operation, in the compute type
(float32 for every storage type but float64), rounding only when storing, and
sums duplicate gradient rows in input order, as the CPU and GPU kernels do. So
for float32 and float64 the kernels are expected to match these bit for bit (the
CUDA build uses --fmad=false), and for float16/bfloat16 to the storage type's
rounding.

bfloat16 values are returned as their uint16 bit pattern (NumPy has no
bfloat16 type); the functions also take `ml_dtypes.bfloat16` arrays, by their
bits. `store` rounds to nearest even, like Eigen::bfloat16 and
__float2bfloat16_rn.

This module imports neither TensorFlow nor the rest of `tf_opt_ops`: the GPU
check (gpu_check/gpu_check.py) loads it by file path on machines without
TensorFlow, and the tests import it as `tf_opt_ops.reference`.
"""

import math

import numpy as np

DTYPES = ("float16", "bfloat16", "float32", "float64")


def compute_type(dtype):
  return np.float64 if dtype == "float64" else np.float32


def storage_type(dtype):
  return {
      "float16": np.float16, "bfloat16": np.uint16, "float32": np.float32, "float64": np.float64
  }[dtype]


def bf16_to_f32(bits):
  bits = np.asarray(bits)
  if bits.dtype.name == "bfloat16":  # an ml_dtypes.bfloat16 array: its bits, not its values
    bits = bits.view(np.uint16)
  # Typed shift counts: NumPy 1.x (TensorFlow <= 2.17) turns a 0-d unsigned array and a
  # Python int into a signed or float type, which shifts refuse.
  return (bits.astype(np.uint16).astype(np.uint32) << np.uint32(16)).view(np.float32)


def f32_to_bf16(x):
  x = np.asarray(x, np.float32)
  b = x.view(np.uint32).astype(np.uint64)
  sixteen, one = np.uint64(16), np.uint64(1)
  rounded = ((b + np.uint64(0x7FFF) + ((b >> sixteen) & one)) >> sixteen).astype(np.uint16)
  return np.where(np.isnan(x), np.uint16(0x7FC0), rounded).astype(np.uint16)


def load(x, dtype):
  """Stored values -> compute type."""
  if dtype == "bfloat16":
    return bf16_to_f32(x)
  return np.asarray(x).astype(compute_type(dtype))


def store(x, dtype):
  """Compute type -> stored values (round to nearest even)."""
  if dtype == "bfloat16":
    return f32_to_bf16(x)
  return np.asarray(x).astype(storage_type(dtype))


def _stored_copy(x):
  """A copy of stored values in this module's representation (bfloat16 as uint16 bits)."""
  x = np.array(x)
  return x.view(np.uint16) if x.dtype.name == "bfloat16" else x


def random_values(rng, shape, dtype, low=-1.0, high=1.0):
  return store(rng.uniform(low, high, size=shape), dtype)


def summed_rows(grad, indices, dtype):
  """(rows, g): distinct rows in first-appearance order and their gradient rows
  summed in input order, in the compute type."""
  C = compute_type(dtype)
  g_all = load(grad, dtype).reshape(len(indices), -1)
  rows, first = np.unique(np.asarray(indices, np.int64), return_index=True)
  order = np.argsort(first, kind="stable")
  rows = rows[order]
  position = {int(r): u for u, r in enumerate(rows)}
  g = np.zeros((len(rows), g_all.shape[1]), C)
  seen = np.zeros(len(rows), bool)
  for p, r in enumerate(np.asarray(indices, np.int64)):
    u = position[int(r)]
    if seen[u]:
      g[u] = g[u] + g_all[p]
    else:
      g[u] = g_all[p]
      seen[u] = True
  return rows, g


def adam_step(dtype, lr, beta1, beta2, epsilon, beta1_power, beta2_power):
  """MakeAdamStep in the compute type: lr_t = lr * sqrt(1 - beta2^t) / (1 - beta1^t)."""
  C = compute_type(dtype)
  one = C(1)
  lr_t = C(lr) * np.sqrt(one - C(beta2_power)) / (one - C(beta1_power))
  return dict(lr_t=C(lr_t), beta1=C(beta1), one_minus_beta1=one - C(beta1), beta2=C(beta2),
              one_minus_beta2=one - C(beta2), epsilon=C(epsilon))


# ------------------------------------------------------------- light slot state
# Mirrors of optimizer_math.h's rounding noise and stochastic rounding, in
# wrapping unsigned NumPy arithmetic.
_U64 = np.uint64
_U32 = np.uint32


def _mix64(z):
  with np.errstate(over="ignore"):
    z = np.asarray(z, _U64) + _U64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> _U64(30))) * _U64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> _U64(27))) * _U64(0x94D049BB133111EB)
    return z ^ (z >> _U64(31))


def _mix32(x):
  with np.errstate(over="ignore"):
    x = np.asarray(x, _U32)
    x = x ^ (x >> _U32(16))
    x = x * _U32(0x7FEB352D)
    x = x ^ (x >> _U32(15))
    x = x * _U32(0x846CA68B)
    return x ^ (x >> _U32(16))


def slot_row_keys(rows, *, seed, step, slot):
  """SlotRowKey: the uint32 noise key of each row of `rows` for slot 0 (m) or 1 (v)."""
  with np.errstate(over="ignore"):
    seed_key = _mix64(np.array([seed], _U64) + _U64(slot))
    step_key = _mix64(seed_key ^ np.array([step], np.int64).view(_U64))
    keys = _mix64(step_key ^ np.asarray(rows, np.int64).view(_U64))
  return (keys >> _U64(32)).astype(_U32)


def element_noise(row_keys, columns):
  """Mix32(key + j): the noise of columns `columns` of rows keyed `row_keys` ([rows, cols])."""
  with np.errstate(over="ignore"):
    return _mix32(np.asarray(row_keys, _U32)[:, None] + np.asarray(columns, _U32)[None, :])


def store_stochastic(x, noise, dtype):
  """StoreStochastic: float32 `x` rounded stochastically to 16-bit `dtype` with uint32 `noise`."""
  x = np.asarray(x, np.float32)
  if dtype not in ("float16", "bfloat16"):
    return store(x, dtype)
  noise = np.asarray(noise, _U32)
  a = np.abs(x)
  bits = a.view(_U32)
  with np.errstate(over="ignore", invalid="ignore"):
    if dtype == "bfloat16":
      finite = a < np.float32(3.38953139e38)
      r = ((bits + (noise >> _U32(16))) & _U32(0xFFFF0000)).view(np.float32)
    else:
      finite = a < np.float32(65504.0)
      normal = ((bits + (noise >> _U32(19))) & _U32(0xFFFFE000)).view(np.float32)
      q = a * np.float32(16777216.0)
      whole = np.floor(q)
      fraction = ((q - whole) * np.float32(16777216.0)).astype(_U32)
      up = np.where((noise >> _U32(8)) < fraction, np.float32(1), np.float32(0))
      subnormal = (whole + up) * np.float32(5.9604644775390625e-08)
      r = np.where(a >= np.float32(6.103515625e-05), normal, subnormal).astype(np.float32)
    signed = (r.view(_U32) | (x.view(_U32) & _U32(0x80000000))).view(np.float32)
  return np.where(finite, store(signed, dtype), store(x, dtype))


def _store_slot(x, dtype, stochastic, row_keys, columns):
  if stochastic and dtype in ("float16", "bfloat16"):
    return store_stochastic(x, element_noise(row_keys, columns), dtype)
  return store(x, dtype)


MEAN_LANES = 32


def row_mean_square(g):
  """RowMeanSquare of each row of `g` [rows, n] in its compute type (float32 or float64): 32
  lanes, then their butterfly."""
  rows, n = g.shape
  lanes = np.zeros((rows, MEAN_LANES), g.dtype)
  for j in range(n):
    lanes[:, j % MEAN_LANES] = lanes[:, j % MEAN_LANES] + g[:, j] * g[:, j]
  offset = MEAN_LANES // 2
  while offset > 0:
    lanes = lanes + lanes[:, np.arange(MEAN_LANES) ^ offset]
    offset //= 2
  return lanes[:, 0] / g.dtype.type(n)


def decayed_weight(w, weight_decay, lr, dtype):
  """DecayedWeight: w (compute type) - w * weight_decay * lr, every value and operation
  rounded to `dtype` (stock Keras' decoupled decay in the variable's dtype)."""
  C = compute_type(dtype)
  wd, decay_lr = _round_to(C(weight_decay), dtype), _round_to(C(lr), dtype)
  return _round_to(w - _round_to(_round_to(w * wd, dtype) * decay_lr, dtype), dtype)


def sparse_lazy_adam(var, m, v, grad, indices, dtype, *, lr, beta1, beta2, epsilon, beta1_power,
                     beta2_power, slot_dtype=None, rowwise_second_moment=False,
                     stochastic_rounding=False, seed=0, step=0, weight_decay=None):
  """New (var, m, v): lazy Adam on the distinct rows of `indices` only.

  The light slot options are op ResourceSparseApplyLazyAdamV2's: slots of
  `slot_dtype` (default: `dtype`), v one value per row when
  `rowwise_second_moment`, 16-bit slots rounded stochastically with noise
  keyed by (`seed`, `step`, row, column) when `stochastic_rounding`. A
  `weight_decay` (a number; None: none) first decays each distinct row once,
  DecayedWeight: w - w * weight_decay * lr, every value and operation
  rounded to `dtype`.
  """
  slot_dtype = slot_dtype or dtype
  var, m, v = _stored_copy(var), _stored_copy(m), _stored_copy(v)
  dim = var.size // var.shape[0] if var.shape[0] else 0
  var2, m2 = var.reshape(-1, dim), m.reshape(-1, dim)
  v2 = v.reshape(-1) if rowwise_second_moment else v.reshape(-1, dim)
  s = adam_step(dtype, lr, beta1, beta2, epsilon, beta1_power, beta2_power)
  rows, g = summed_rows(grad, indices, dtype)
  if weight_decay is not None:
    var2[rows] = store(decayed_weight(load(var2[rows], dtype), weight_decay, lr, dtype), dtype)
  keys = dict(seed=seed, step=step)
  m_keys, v_keys = (slot_row_keys(rows, slot=k, **keys) for k in (0, 1))
  columns = np.arange(dim)
  m_t = s["beta1"] * load(m2[rows], slot_dtype) + s["one_minus_beta1"] * g
  if rowwise_second_moment:
    v_t = s["beta2"] * load(v2[rows], slot_dtype) + s["one_minus_beta2"] * row_mean_square(g)
    v2[rows] = _store_slot(v_t[:, None], slot_dtype, stochastic_rounding, v_keys, [0])[:, 0]
    denominator = (np.sqrt(v_t) + s["epsilon"])[:, None]
  else:
    v_t = s["beta2"] * load(v2[rows], slot_dtype) + s["one_minus_beta2"] * g * g
    v2[rows] = _store_slot(v_t, slot_dtype, stochastic_rounding, v_keys, columns)
    denominator = np.sqrt(v_t) + s["epsilon"]
  m2[rows] = _store_slot(m_t, slot_dtype, stochastic_rounding, m_keys, columns)
  var2[rows] = store(load(var2[rows], dtype) - s["lr_t"] * m_t / denominator, dtype)
  return var, m, v


def _nan_min(values, start):
  """NanMin fold: NaN as soon as one value is NaN, else min(start, values)."""
  values = np.asarray(values)
  if np.isnan(start) or np.isnan(values).any():
    return type(start)(np.nan)
  return type(start)(min(start, values.min())) if values.size else start


def clippy_noise(elements, *, seed, step):
  """ClippyNoise: the uint32 noise of the accumulator's flat elements `elements`."""
  with np.errstate(over="ignore"):
    key = (_mix64(_mix64(np.array([seed], _U64) + _U64(2)) ^ np.array([step], np.int64).view(_U64))
           >> _U64(32)).astype(_U32)
    e = np.asarray(elements, np.int64).view(_U64)
    low, high = (e & _U64(0xFFFFFFFF)).astype(_U32), (e >> _U64(32)).astype(_U32)
    return _mix32(_mix32(key ^ low) + high)


def _clippy(var_c, accum_s, g, dtype, *, elements, lr=0.001, epsilon=1e-7,
            variable_relative_threshold=0.1, accumulator_relative_threshold=0.0,
            absolute_threshold=1e-7, clip_accumulator_update=False,
            use_standard_accumulator_update=False, accumulator_dtype=None,
            stochastic_rounding=False, seed=0, step=0):
  """Clippy's two passes on gathered elements. Returns (new var, new accum stored, scale).

  The defaults are the ops' (`tf_opt_ops.ops.clippy_adagrad`). `elements`: the
  flat indices of the elements in the accumulator, which key the rounding
  noise of a stochastically rounded accumulator (the V2 ops' options:
  `accumulator_dtype`, default `dtype`; `stochastic_rounding`, `seed`, `step`).
  """
  accumulator_dtype = accumulator_dtype or dtype
  noise = clippy_noise(elements, seed=seed, step=step) if stochastic_rounding else None

  def store_accum(x):
    if noise is not None and accumulator_dtype in ("float16", "bfloat16"):
      return store_stochastic(x, noise, accumulator_dtype)
    return store(x, accumulator_dtype)

  C = compute_type(dtype)
  lr, epsilon = C(lr), C(epsilon)
  vrt, art, at = (C(variable_relative_threshold), C(accumulator_relative_threshold),
                  C(absolute_threshold))
  one = C(1)
  with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
    a = load(accum_s, accumulator_dtype)
    if use_standard_accumulator_update:
      accum_s = store_accum(a + g * g)
      a = load(accum_s, accumulator_dtype)
    p = one / np.sqrt(a + epsilon)
    delta = lr * g * p
    max_delta = vrt * np.abs(var_c) + art * p + at
    ratio = np.where(delta == 0, one, max_delta / np.abs(delta)).astype(C)
    scale = _nan_min([_nan_min(ratio, one)], one)  # ClippyScale(min ratio)
    a = load(accum_s, accumulator_dtype)
    p = one / np.sqrt(a + epsilon)
    delta = lr * g * p
    if not use_standard_accumulator_update:
      g_acc = g * scale if clip_accumulator_update else g
      accum_s = store_accum(a + g_acc * g_acc)
    new_var = var_c - delta * scale
  return new_var, accum_s, scale


def clippy_adagrad(var, accum, grad, dtype, **hyper):
  """Dense Clippy Adagrad: (new var, new accum, scale)."""
  accum = _stored_copy(accum)
  new_var, new_accum, scale = _clippy(
      load(var, dtype).ravel(), accum.ravel(),
      load(grad, dtype).ravel(), dtype, elements=np.arange(accum.size), **hyper)
  return (store(new_var, dtype).reshape(var.shape), new_accum.reshape(accum.shape), scale)


def sparse_clippy_adagrad(var, accum, grad, indices, dtype, weight_decay=None, **hyper):
  """Sparse Clippy Adagrad on the distinct rows of `indices`: (var, accum, scale).

  A `weight_decay` (a number; None: none) first decays each distinct row
  once (`decayed_weight`, with the op's lr); both passes, the scale's
  included, then read the decayed rows.
  """
  var, accum = _stored_copy(var), _stored_copy(accum)
  dim = var.size // var.shape[0] if var.shape[0] else 0
  var2, accum2 = var.reshape(-1, dim), accum.reshape(-1, dim)
  rows, g = summed_rows(grad, indices, dtype)
  elements = rows[:, None] * dim + np.arange(dim)[None, :]
  w = load(var2[rows], dtype)
  if weight_decay is not None:
    w = decayed_weight(w, weight_decay, hyper.get("lr", 0.001), dtype)
  new_var, new_accum, scale = _clippy(w, accum2[rows], g, dtype, elements=elements, **hyper)
  var2[rows] = store(new_var, dtype)
  accum2[rows] = new_accum
  return var, accum, scale


# ------------------------------------------------------ lazy moving average
def _round_to(x, dtype):
  """x (compute type) rounded to `dtype` and back: RoundTo."""
  return load(store(x, dtype), dtype)


def sparse_moving_average(average, synced, var, indices, dtype, *, count, ema_momentum):
  """The lazy moving average of the distinct rows of `indices` brought up to date (op
  ResourceSparseApplyLazyMovingAverage), before the step's update of `var`: (average,
  synced). Every operation is rounded to `dtype`, ema_momentum first; ema_momentum^k is
  taken in float64."""
  C = compute_type(dtype)
  average, synced = _stored_copy(average), np.array(synced, np.int32)
  dim = average.size // average.shape[0] if average.shape[0] else 0
  average2 = average.reshape(-1, dim)
  var2 = load(_stored_copy(var), dtype).reshape(-1, dim)
  rows = np.unique(np.asarray(indices, np.int64))
  with np.errstate(over="ignore"):
    missed = (np.int32(count) - synced[rows]).astype(np.int32)
  steps = _round_to(missed.astype(C), dtype)
  ema_m = _round_to(C(ema_momentum), dtype)
  # The C library's pow, as the op calls it: NumPy's own float64 power (its SIMD code on
  # AVX-512 machines) can differ from it in the last bit.
  libm_pow = np.frompyfunc(math.pow, 2, 1)
  decay = libm_pow(float(ema_m), steps.astype(np.float64)).astype(np.float64)
  decay = _round_to(decay.astype(C), dtype)
  w = var2[rows]
  gap = _round_to(load(average2[rows], dtype) - w, dtype)
  average2[rows] = store(w + _round_to(decay[:, None] * gap, dtype), dtype)
  synced[rows] = np.int32(count)
  return average, synced


# ------------------------------------------------------------ row-wise Adagrad
WEIGHT_DECAY_MODES = ("none", "l2", "decoupled")


def rowwise_adagrad_noise(rows, accum, values, *, seed):
  """RowwiseAdagradNoise: the uint32 noise of each element of `values` (float32 [rows, n], the
  unrounded new rows `rows`), keyed by seed, each row's new float32 accumulator `accum` and the
  row (RowwiseAdagradNoiseKey: slot 3 of slot_row_keys' scheme, the accumulator's bits in the
  step's place), then by column and the value's own bits."""
  values = np.asarray(values, np.float32)
  with np.errstate(over="ignore"):
    seed_key = _mix64(np.array([seed], np.int64).view(_U64) + _U64(3))
    accum_key = _mix64(seed_key ^ np.asarray(accum, np.float32).view(_U32).astype(_U64))
    keys = (_mix64(accum_key ^ np.asarray(rows, np.int64).view(_U64)) >> _U64(32)).astype(_U32)
    columns = np.arange(values.shape[1], dtype=_U32)
    return _mix32((keys[:, None] + columns[None, :]) ^ values.view(_U32))


def sparse_rowwise_adagrad(var, accum, grad, indices, dtype, *, lr, epsilon=1e-8, weight_decay=0.0,
                           weight_decay_mode="none", accumulator_dtype=None,
                           stochastic_rounding=False, seed=0):
  """New (var, accum): FBGEMM's exact row-wise Adagrad on the distinct rows of `indices` only.

  `accum` holds one value per row of `var` ([rows]), stored as `accumulator_dtype` (default:
  the compute type, float32, or float64 for a float64 table). Per touched row r, with g_r its
  gradient rows summed in input order (docs/rowwise_adagrad.md has FBGEMM's order):

    h = g_r + weight_decay * w_r      ("l2"; g_r otherwise)
    a_r = a_r + mean_j(h_j^2)         (row_mean_square's 32 lanes)
    multiplier = lr / (sqrt(a_r) + epsilon)
    correction = 1 - multiplier * weight_decay   ("l2")
               = 1 - lr * weight_decay           ("decoupled")
               = 1                               ("none")
    w_r = correction * w_r - g_r * multiplier

  `weight_decay_mode` "none", "l2" and "decoupled" are FBGEMM's WeightDecayMode NONE (0), L2
  (1) and DECOUPLE (2). The accumulator's first value (Keras' initial_accumulator_value) is
  whatever `accum` holds. With `stochastic_rounding` a float16 or bfloat16 table's new rows are
  rounded stochastically (store_stochastic) with rowwise_adagrad_noise's bits, keyed by `seed`.
  """
  if weight_decay_mode not in WEIGHT_DECAY_MODES:
    raise ValueError(f"weight_decay_mode must be one of {WEIGHT_DECAY_MODES}, got "
                     f"{weight_decay_mode!r}")
  C = compute_type(dtype)
  accumulator_dtype = accumulator_dtype or np.dtype(C).name
  var, accum = _stored_copy(var), _stored_copy(accum)
  dim = var.size // var.shape[0] if var.shape[0] else 0
  var2, accum1 = var.reshape(-1, dim), accum.reshape(-1)
  if accum1.shape[0] != var2.shape[0]:
    raise ValueError(f"accum must hold one value per row of var ({var2.shape[0]}), got shape "
                     f"{accum.shape}")
  rows, g = summed_rows(grad, indices, dtype)
  lr, epsilon, weight_decay, one = C(lr), C(epsilon), C(weight_decay), C(1)
  w = load(var2[rows], dtype)
  h = g + weight_decay * w if weight_decay_mode == "l2" else g
  a = load(accum1[rows], accumulator_dtype) + row_mean_square(h)
  accum1[rows] = store(a, accumulator_dtype)
  multiplier = (lr / (np.sqrt(a) + epsilon))[:, None]
  if weight_decay_mode == "l2":
    correction = one - multiplier * weight_decay
  elif weight_decay_mode == "decoupled":
    correction = one - lr * weight_decay
  else:
    correction = one
  new_rows = correction * w - g * multiplier
  if stochastic_rounding and dtype in ("float16", "bfloat16"):
    noise = rowwise_adagrad_noise(rows, a, new_rows, seed=seed)
    var2[rows] = store_stochastic(new_rows, noise, dtype)
  else:
    var2[rows] = store(new_rows, dtype)
  return var, accum


def rowwise_adagrad(var, accum, grad, dtype, **hyper):
  """Dense row-wise Adagrad: every row touched, `grad` shaped like `var`: (new var, new accum)."""
  return sparse_rowwise_adagrad(var, accum, grad, np.arange(np.shape(var)[0]), dtype, **hyper)
