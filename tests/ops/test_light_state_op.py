"""Light slot state (op ResourceSparseApplyLazyAdamV2) against the NumPy reference, bit for bit.

Slots of their own dtype, row-wise v and stochastic rounding: the kernels must
match `reference.sparse_lazy_adam` exactly, and the rounding must be unbiased
and keyed by (seed, step, row, column). Why: see docs/design.md, "Light state".
"""

import itertools

import numpy as np
import pytest
import tensorflow as tf

from tf_opt_ops import ops
from tf_opt_ops import reference

from common import stored_tensor
from common import stored_values

LIGHT_DTYPES = ("float16", "bfloat16", "float32")
ROWS, DIM = 12, 37  # a row wider than the 32 lanes of the row-wise mean
STEP_INDICES = [[3, 0, 3, 7, 3], [11, 5, 0], [7, 7], [2, 9, 4, 9, 1, 10]]
UNTOUCHED_ROWS = [6, 8]
HYPER = dict(lr=0.01, beta_1=0.9, beta_2=0.999, epsilon=1e-7)


def _assert_same_bits(got, want, what):
  np.testing.assert_array_equal(
      np.asarray(got).view(np.uint8),
      np.asarray(want).view(np.uint8), err_msg=what)


def _light_step(var, m, v, grad, indices, t, mode="eager", **light):

  def apply(g, i):
    ops.sparse_lazy_adam(var, m, v, g, i, beta_1_power=0.9**t, beta_2_power=0.999**t, step=t,
                         **HYPER, **light)

  if mode == "eager":
    apply(grad, indices)
  else:
    tf.function(apply)(grad, indices)


CASES = [(t, s, rowwise, stochastic)
         for t, s in itertools.product(LIGHT_DTYPES, LIGHT_DTYPES)
         for rowwise, stochastic in itertools.product((False, True), (False, True))
         if t != s or rowwise or stochastic]


@pytest.mark.parametrize("mode", ["eager", "tf.function"])
@pytest.mark.parametrize("index_dtype", [tf.int32, tf.int64])
@pytest.mark.parametrize("dtype,slot_dtype,rowwise,stochastic", CASES)
def test_light_lazy_adam_matches_reference_bit_for_bit(dtype, slot_dtype, rowwise, stochastic,
                                                       index_dtype, mode):
  rng = np.random.default_rng(0)
  v_shape = (ROWS,) if rowwise else (ROWS, DIM)
  state = [
      reference.random_values(rng, (ROWS, DIM), dtype),
      reference.random_values(rng, (ROWS, DIM), slot_dtype, -0.01, 0.01),
      reference.random_values(rng, v_shape, slot_dtype, 0, 1e-4),
  ]
  dtypes = (dtype, slot_dtype, slot_dtype)
  var, m, v = (tf.Variable(stored_tensor(x, d)) for x, d in zip(state, dtypes))
  light = dict(slot_dtype=slot_dtype, rowwise_second_moment=rowwise, stochastic_rounding=stochastic,
               seed=1234)
  untouched = state[0][UNTOUCHED_ROWS].copy()
  for t, indices in enumerate(STEP_INDICES, start=1):
    grad = reference.random_values(rng, (len(indices), DIM), dtype, -1e-2, 1e-2)
    state = reference.sparse_lazy_adam(*state, grad, indices, dtype, lr=HYPER["lr"], beta1=0.9,
                                       beta2=0.999, epsilon=HYPER["epsilon"], beta1_power=0.9**t,
                                       beta2_power=0.999**t, step=t,
                                       **{k: light[k] for k in light if k != "slot_dtype"},
                                       slot_dtype=slot_dtype)
    _light_step(var, m, v, stored_tensor(grad, dtype), tf.constant(indices, index_dtype), t, mode,
                **light)
    for name, variable, want, d in zip(("var", "m", "v"), (var, m, v), state, dtypes):
      _assert_same_bits(stored_values(variable, d), want, f"{name} after step {t}")
  _assert_same_bits(stored_values(var, dtype)[UNTOUCHED_ROWS], untouched, "untouched rows")


# Values StoreStochastic does not round by its bit formula alone: NaN, infinities, values
# beyond the slot type's largest, and float16's subnormals (and zeros). With beta_1 = 0
# and beta_2 = 0.5 the gradient g gives m_t = g and v_t = 0.5 v + 0.5 g^2 exactly, so each
# of these lands in m (and some in v, as in g = 2.6037e19: v beyond bfloat16's largest).
# (No float32 subnormals: TensorFlow's threads may flush them.)
LANE_SPECIALS = {
    "bfloat16": [np.nan, -np.nan, np.inf, -np.inf, 3.39e38, -3.3999e38, 2.6037e19, 0.0],
    "float16":
        [np.nan, -np.nan, np.inf, -np.inf, 65520.0, -7e4, 400.0, 1e-5, -3e-7, 2e-8, 0.0, -0.0],
}


def _nan_of(stored, dtype):
  stored = np.asarray(stored)
  if dtype == "bfloat16":
    return (stored & 0x7FFF) > 0x7F80
  return np.isnan(stored)


def _assert_same_bits_nan_as_nan(got, want, dtype, what):
  """Bit for bit, except that a NaN only has to be a NaN: the reference stores bfloat16 NaNs
  without their sign, and a NaN's sign after a sum of NaNs (row-wise v) is the order's."""
  nan = _nan_of(want, dtype)
  np.testing.assert_array_equal(_nan_of(got, dtype), nan, err_msg=f"{what}: NaN positions")
  _assert_same_bits(np.asarray(got)[~nan], np.asarray(want)[~nan], what)


@pytest.mark.parametrize("rowwise", [False, True])
@pytest.mark.parametrize("slot_dtype", ["bfloat16", "float16"])
def test_stochastic_rounding_of_special_values_among_plain_ones(slot_dtype, rowwise):
  # StoreStochastic takes its bit formula for plain values and other branches for special
  # ones; the row loops vectorize it, so a vector that holds one special value must round
  # every value, the special one and its plain neighbours, as the reference does. Rows of
  # 16 x 3 + 5 elements: row 0 all plain, the others with 1-3 specials at random places (in
  # vectors of 8 or 16 and in the 5 after them), so that every kind of vector is met.
  rng = np.random.default_rng(11)
  rows, dim = 24, 53
  g = (rng.uniform(0.01, 1.0, (rows, dim)) * rng.choice([-1.0, 1.0], (rows, dim)))
  specials = LANE_SPECIALS[slot_dtype]
  for r in range(1, rows):
    places = rng.choice(dim, int(rng.integers(1, 4)), replace=False)
    g[r, places] = rng.choice(specials, len(places))
  g = g.astype(np.float32)
  v_shape = (rows,) if rowwise else (rows, dim)
  state = [
      reference.random_values(rng, (rows, dim), "float32"),
      reference.random_values(rng, (rows, dim), slot_dtype, -0.01, 0.01),
      reference.random_values(rng, v_shape, slot_dtype, 0, 1e-4),
  ]
  dtypes = ("float32", slot_dtype, slot_dtype)
  var, m, v = (tf.Variable(stored_tensor(x, d)) for x, d in zip(state, dtypes))
  light = dict(rowwise_second_moment=rowwise, stochastic_rounding=True, seed=99, step=3)
  indices = rng.permutation(rows)
  with np.errstate(over="ignore", invalid="ignore"):
    want = reference.sparse_lazy_adam(*state, g[indices], indices, "float32", lr=0.01, beta1=0.0,
                                      beta2=0.5, epsilon=1e-7, beta1_power=0.9**3,
                                      beta2_power=0.5**3, slot_dtype=slot_dtype, **light)
  ops.sparse_lazy_adam(var, m, v, tf.constant(g[indices]), tf.constant(indices), lr=0.01,
                       beta_1=0.0, beta_2=0.5, epsilon=1e-7, beta_1_power=0.9**3,
                       beta_2_power=0.5**3, slot_dtype=slot_dtype, **light)
  assert _nan_of(want[1], slot_dtype).any() and not _nan_of(want[1][0], slot_dtype).any()
  for name, variable, expected, d in zip(("var", "m", "v"), (var, m, v), want, dtypes):
    _assert_same_bits_nan_as_nan(stored_values(variable, d), expected, d, name)


def _first_moment_of(g, stochastic, seed=7, step=1, slot_dtype="bfloat16"):
  """m after one step with beta1 = 0 from m = 0: the gradient `g` stored in the slot type."""
  rows, dim = g.shape
  var = tf.Variable(tf.zeros((rows, dim)))
  m = tf.Variable(tf.zeros((rows, dim), slot_dtype))
  v = tf.Variable(tf.zeros((rows, dim), slot_dtype))
  ops.sparse_lazy_adam(var, m, v, tf.constant(g), tf.range(rows), beta_1_power=0.0,
                       beta_2_power=0.999, beta_1=0.0, step=step, seed=seed,
                       stochastic_rounding=stochastic)
  return m.numpy().astype(np.float64)


@pytest.mark.parametrize("slot_dtype,ulp", [("bfloat16", 2.0**-7), ("float16", 2.0**-10)])
def test_stochastic_rounding_is_unbiased_and_round_to_nearest_is_not(slot_dtype, ulp):
  # 1 + ulp/3 lies a third of the way from 1 to the next 16-bit value: rounding to
  # nearest always gives 1, stochastic rounding gives the upper one a third of the time.
  g = np.full((200, 64), 1 + ulp / 3, np.float32)
  nearest = _first_moment_of(g, stochastic=False, slot_dtype=slot_dtype)
  assert (nearest == 1.0).all()
  rounded = _first_moment_of(g, stochastic=True, slot_dtype=slot_dtype)
  assert set(np.unique(rounded)) == {1.0, 1.0 + ulp}
  up = (rounded > 1).mean()
  assert abs(up - 1 / 3) < 0.01, up  # 12,800 draws: 4 standard deviations
  assert abs(rounded.mean() - (1 + ulp / 3)) < 0.01 * ulp


def test_stochastic_rounding_of_float16_subnormals_is_unbiased():
  tiny = 2.0**-24  # the smallest float16 subnormal
  g = np.full((100, 128), 0.25 * tiny, np.float32)
  rounded = _first_moment_of(g, stochastic=True, slot_dtype="float16")
  assert set(np.unique(rounded)) == {0.0, tiny}
  assert abs((rounded > 0).mean() - 0.25) < 0.015


def test_rounding_noise_is_keyed_by_seed_and_step():
  g = np.random.default_rng(3).uniform(-1, 1, (64, 32)).astype(np.float32)
  first = _first_moment_of(g, True, seed=7, step=1)
  np.testing.assert_array_equal(first, _first_moment_of(g, True, seed=7, step=1))
  assert (first != _first_moment_of(g, True, seed=8, step=1)).mean() > 0.2
  assert (first != _first_moment_of(g, True, seed=7, step=2)).mean() > 0.2


def test_float32_slots_keep_the_second_moment_of_a_float16_table():
  # (1 - beta2) * g^2 = 1e-11 is below float16's smallest subnormal (6e-8): float16
  # slots hold 0 there, float32 slots hold it.
  g = tf.constant(np.full((4, 8), 1e-4, np.float16))
  result = {}
  for slot_dtype in ("float16", "float32"):
    var = tf.Variable(tf.zeros((4, 8), tf.float16))
    m, v = (tf.Variable(tf.zeros((4, 8), slot_dtype)) for _ in range(2))
    ops.sparse_lazy_adam(var, m, v, g, tf.range(4), beta_1_power=0.9, beta_2_power=0.999, step=1)
    result[slot_dtype] = v.numpy().astype(np.float64)
  assert (result["float16"] == 0).all()
  np.testing.assert_allclose(result["float32"], 1e-3 * np.float64(np.float16(1e-4))**2, rtol=1e-4)


def test_wrong_slot_dtype_and_row_shape_are_refused_before_any_write():
  var = tf.Variable(tf.ones((4, 3)))
  m = tf.Variable(tf.zeros((4, 3), tf.bfloat16))
  v = tf.Variable(tf.zeros((4, 3), tf.float16))
  kwargs = dict(beta_1_power=0.9, beta_2_power=0.999, step=1)
  with pytest.raises(
      tf.errors.InvalidArgumentError, match=r"v has dtype half but the op's dtype for "
      r"it \(Tslot or Taccum\) is bfloat16"):
    ops.sparse_lazy_adam(var, m, v, tf.ones((1, 3)), [0], slot_dtype=tf.bfloat16, **kwargs)
  v = tf.Variable(tf.zeros((3,), tf.bfloat16))
  with pytest.raises((tf.errors.InvalidArgumentError, ValueError),
                     match=r"one value per row of var .*\[4\]"):
    ops.sparse_lazy_adam(var, m, v, tf.ones((1, 3)), [0], rowwise_second_moment=True, **kwargs)
  np.testing.assert_array_equal(var.numpy(), np.ones((4, 3)))
  with pytest.raises(tf.errors.InvalidArgumentError, match=r"indices\[1\] = 9 is not in \[0, 4\)"):
    ops.sparse_lazy_adam(var, m, tf.Variable(tf.zeros((4,), tf.bfloat16)), tf.ones((2, 3)), [0, 9],
                         rowwise_second_moment=True, **kwargs)
  np.testing.assert_array_equal(var.numpy(), np.ones((4, 3)))


# ----------------------------------------------------------------------------- Clippy

CLIPPY_HYPER = dict(lr=0.5, epsilon=1e-7, variable_relative_threshold=0.1,
                    accumulator_relative_threshold=0.01, absolute_threshold=1e-3)
CLIPPY_FLAGS = {
    "defaults": {}, "clip_accumulator_update": dict(clip_accumulator_update=True),
    "use_standard_accumulator_update": dict(use_standard_accumulator_update=True)
}
CLIPPY_CASES = [(t, a, stochastic)
                for t, a in itertools.product(LIGHT_DTYPES, LIGHT_DTYPES)
                for stochastic in (False, True)
                if t != a or stochastic]


@pytest.mark.parametrize("flags", CLIPPY_FLAGS)
@pytest.mark.parametrize("sparse,index_dtype", [(False, None), (True, tf.int32), (True, tf.int64)])
@pytest.mark.parametrize("dtype,accumulator_dtype,stochastic", CLIPPY_CASES)
def test_light_clippy_matches_reference_bit_for_bit(dtype, accumulator_dtype, stochastic, sparse,
                                                    index_dtype, flags):
  rng = np.random.default_rng(1)
  var, accum = (reference.random_values(rng, (ROWS, DIM), dtype),
                reference.random_values(rng, (ROWS, DIM), accumulator_dtype, 0.0, 0.1))
  tv, ta = tf.Variable(stored_tensor(var,
                                     dtype)), tf.Variable(stored_tensor(accum, accumulator_dtype))
  hyper = dict(CLIPPY_HYPER, **CLIPPY_FLAGS[flags])
  for t, indices in enumerate(STEP_INDICES, start=1):
    light = dict(accumulator_dtype=accumulator_dtype, stochastic_rounding=stochastic, seed=77,
                 step=t)
    if sparse:
      grad = reference.random_values(rng, (len(indices), DIM), dtype)
      var, accum, want_scale = reference.sparse_clippy_adagrad(var, accum, grad, indices, dtype,
                                                               **hyper, **light)
      scale = ops.sparse_clippy_adagrad(
          tv, ta, stored_tensor(grad, dtype), tf.constant(indices, index_dtype), **hyper,
          **dict(light, accumulator_dtype=tf.as_dtype(accumulator_dtype)))
    else:
      grad = reference.random_values(rng, (ROWS, DIM), dtype)
      var, accum, want_scale = reference.clippy_adagrad(var, accum, grad, dtype, **hyper, **light)
      scale = ops.clippy_adagrad(tv, ta, stored_tensor(grad, dtype), **hyper,
                                 **dict(light, accumulator_dtype=tf.as_dtype(accumulator_dtype)))
    _assert_same_bits(stored_values(tv, dtype), var, f"var after step {t}")
    _assert_same_bits(stored_values(ta, accumulator_dtype), accum, f"accum after step {t}")
    assert float(scale) == float(want_scale), (t, float(scale), float(want_scale))


def test_stochastic_rounding_keeps_small_increments_of_a_bfloat16_accumulator():
  # accum = 16: bfloat16's unit there is 2^-3, and g^2 = 2^-5 is a quarter of it. Rounded to
  # nearest the accumulator never moves; stochastically it grows by g^2 on average.
  def grown(stochastic, steps=20):
    var = tf.Variable(tf.zeros((64, 32)))
    accum = tf.Variable(tf.fill((64, 32), tf.constant(16.0, tf.bfloat16)))
    for t in range(1, steps + 1):
      ops.clippy_adagrad(var, accum, tf.fill((64, 32), 2.0**-2.5), lr=0.0, seed=5, step=t,
                         stochastic_rounding=stochastic, absolute_threshold=1.0)
    return float(tf.reduce_mean(tf.cast(accum, tf.float64))) - 16.0

  assert grown(False) == 0.0
  assert abs(grown(True) - 20 * 2.0**-5) < 0.05 * 20 * 2.0**-5


def test_wrong_accumulator_dtype_is_refused_before_any_write():
  var = tf.Variable(tf.ones((4, 3)))
  accum = tf.Variable(tf.zeros((4, 3), tf.float16))
  with pytest.raises(
      tf.errors.InvalidArgumentError, match=r"accum has dtype half but the op's "
      r"dtype for it \(Tslot or Taccum\) is bfloat16"):
    ops.clippy_adagrad(var, accum, tf.ones((4, 3)), accumulator_dtype=tf.bfloat16, step=1)
  np.testing.assert_array_equal(var.numpy(), np.ones((4, 3)))
