"""The Scaled ops (`ResourceSparseApplyLazyAdamScaled`, ... `ResourceSparseApplyClippyAdagrad
WAveragedScaled`): Keras' clip factor and clip range applied where the op reads each gradient
value.

Each Scaled op with `grad_scale` (a factor, or a factor and a divisor, in the table's dtype)
and `grad_clip` (a least and a greatest value) equals, bit for bit, the op it extends fed the
values scaled and clipped first in TensorFlow in that dtype (`values * factor`, `/ divisor`,
`tf.clip_by_value`: what Keras' global_clipnorm, clipnorm and clipvalue hand it), for every
table dtype, both index dtypes, duplicate and distinct indices, eager and tf.function, with and
without weight decay and with light state. The ops it extends keep their inputs and generated
wrappers. Why: see docs/design.md, "Clipping in the update".
"""

import inspect

import numpy as np
import pytest
import tensorflow as tf

from tf_opt_ops import ops
from tf_opt_ops import reference
from tf_opt_ops._loader import load_library

import common
from common import stored_tensor
from common import stored_values

ROWS, DIM = 12, 37  # not a multiple of the 8 lanes of the float16 row loops
INDICES = {
    "duplicates": [3, 0, 3, 7, 3, 11, 5, 0],
    "distinct": [3, 0, 7, 11, 5, 9, 2, 10],
}
HYPER = dict(lr=0.01, beta_1=0.9, beta_2=0.999, epsilon=1e-7)
CLIPPY_HYPER = dict(lr=0.1, epsilon=1e-7, variable_relative_threshold=0.05,
                    accumulator_relative_threshold=0.0, absolute_threshold=1e-4)
# (factor,): global_clipnorm's scale; (factor, divisor): clipnorm's clip norm over the norm;
# grad_clip: clipvalue's range (gradient values are in [-3, 3]: each range clips some), alone
# and after a scale (Keras 3's LossScaleOptimizer unscales, then the optimizer clips).
SCALES = {
    "factor": dict(grad_scale=(0.371,)),
    "factor-divisor": dict(grad_scale=(1.3, 7.77)),
    "clip": dict(grad_clip=(-0.8, 1.1)),
    "factor-divisor-clip": dict(grad_scale=(1.3, 7.77), grad_clip=(-0.2, 0.25)),
    # A divisor that is a power of two (a loss scale's) is multiplied by its exact inverse.
    "power-of-two-divisor": dict(grad_scale=(1.0, -0.125)),
}
WEIGHT_DECAY = 0.3


def _scaling(scale, dtype):
  """`scale` (a SCALES entry) as scalars of `dtype`."""
  return {k: tuple(tf.cast(tf.constant(x, tf.float64), dtype) for x in v) for k, v in scale.items()}


def _prescaled(grad, scaling):
  """The values as Keras scales and clips them: in their dtype, multiplied, divided, then
  clipped by tf.clip_by_value."""
  out = grad
  grad_scale = scaling.get("grad_scale", ())
  if grad_scale:
    out = out * grad_scale[0]
  if len(grad_scale) == 2:
    out = out / grad_scale[1]
  if "grad_clip" in scaling:
    out = tf.clip_by_value(out, *scaling["grad_clip"])
  return out


def _table_variables(dtype, shapes, seed):
  rng = np.random.default_rng(seed)
  out = []
  for k, (shape, slot_dtype) in enumerate(shapes):
    low, high = ((-1.0, 1.0), (0.0, 0.1), (0.0, 1e-3))[min(k, 2)]
    out.append(
        tf.Variable(
            stored_tensor(reference.random_values(rng, shape, slot_dtype, low, high), slot_dtype)))
  return out


def _grad(dtype, n, seed=7):
  return stored_tensor(
      reference.random_values(np.random.default_rng(seed), (n, DIM), dtype, -3.0, 3.0), dtype)


def _run(update, variables, mode):
  if mode == "eager":
    return update()
  return tf.function(update)()


def _assert_same_bits(ours, theirs, dtypes):
  for x, y, d in zip(ours, theirs, dtypes):
    np.testing.assert_array_equal(stored_values(x, d), stored_values(y, d))


def _moving_average(dtype, seed):
  """The averaged ops' (average, synced, count, ema_momentum)."""
  average, = _table_variables(dtype, [((ROWS, DIM), dtype)], seed)
  synced = tf.Variable(np.arange(ROWS, dtype=np.int32) % 3)
  return average, synced, 4, 0.9


def _lazy_adam_pair(dtype, index_dtype, indices, mode, decays, scale, averaged=False, light=None,
                    n_rows=ROWS):
  """(variables of the Scaled op's run, variables of the prescaled run, their dtypes)."""
  light = light or {}
  slot_dtype = light.get("slot_dtype", dtype)
  v_shape = (n_rows,) if light.get("rowwise_second_moment") else (n_rows, DIM)
  shapes = [((n_rows, DIM), dtype), ((n_rows, DIM), slot_dtype), (v_shape, slot_dtype)]
  grad = _grad(dtype, len(indices))
  scaling = _scaling(scale, dtype)
  runs = []
  for scaled in (True, False):
    variables = _table_variables(dtype, shapes, seed=1)
    moving_average = _moving_average(dtype, seed=2) if averaged else None

    def update(variables=variables, scaled=scaled, moving_average=moving_average):
      var, m, v = variables
      ops.sparse_lazy_adam(var, m, v, grad if scaled else _prescaled(grad, scaling),
                           tf.constant(indices, index_dtype), beta_1_power=0.9**3,
                           beta_2_power=0.999**3, step=3,
                           weight_decay=WEIGHT_DECAY if decays else None,
                           moving_average=moving_average, **(scaling if scaled else {}), **HYPER,
                           **light)

    _run(update, variables, mode)
    runs.append(variables + (list(moving_average[:2]) if averaged else []))
  dtypes = [dtype, slot_dtype, slot_dtype] + ([dtype, "int32"] if averaged else [])
  return runs[0], runs[1], dtypes


LIGHT_CASES = {
    "float32-bfloat16-slots": ("float32", dict(slot_dtype="bfloat16")),
    "float16-float32-slots-rowwise":
        ("float16", dict(slot_dtype="float32", rowwise_second_moment=True)),
    "bfloat16-stochastic": ("bfloat16", dict(slot_dtype="bfloat16", stochastic_rounding=True)),
}


@pytest.mark.parametrize("decays", [False, True], ids=["plain", "weight-decay"])
@pytest.mark.parametrize("mode", ["eager", "function"])
@pytest.mark.parametrize("scale", SCALES)
@pytest.mark.parametrize("case", LIGHT_CASES)
def test_lazy_adam_v2_scaled_is_the_op_fed_scaled_values(case, scale, mode, decays):
  dtype, light = LIGHT_CASES[case]
  ours, theirs, dtypes = _lazy_adam_pair(dtype, np.int64, INDICES["duplicates"], mode, decays,
                                         SCALES[scale], light=light)
  _assert_same_bits(ours, theirs, dtypes)


def _clippy_pair(dtype, index_dtype, indices, mode, decays, scale, averaged=False, light=None,
                 n_rows=ROWS):
  light = light or {}
  accum_dtype = light.get("accumulator_dtype", dtype)
  grad = _grad(dtype, len(indices))
  scaling = _scaling(scale, dtype)
  runs, op_scales = [], []
  for scaled in (True, False):
    variables = _table_variables(dtype, [((n_rows, DIM), dtype), ((n_rows, DIM), accum_dtype)],
                                 seed=1)
    moving_average = _moving_average(dtype, seed=2) if averaged else None

    def update(variables=variables, scaled=scaled, moving_average=moving_average):
      var, accum = variables
      return ops.sparse_clippy_adagrad(var, accum, grad if scaled else _prescaled(grad, scaling),
                                       tf.constant(indices, index_dtype),
                                       weight_decay=WEIGHT_DECAY if decays else None,
                                       moving_average=moving_average, **(scaling if scaled else {}),
                                       step=3, **CLIPPY_HYPER, **light)

    op_scales.append(_run(update, variables, mode).numpy())
    runs.append(variables + (list(moving_average[:2]) if averaged else []))
  np.testing.assert_array_equal(op_scales[0], op_scales[1])
  dtypes = [dtype, accum_dtype] + ([dtype, "int32"] if averaged else [])
  return runs[0], runs[1], dtypes


PAIRS = {"lazy_adam": _lazy_adam_pair, "clippy": _clippy_pair}


@pytest.mark.parametrize("variant", ["duplicates", "distinct", "averaged"])
@pytest.mark.parametrize("scale", SCALES)
@pytest.mark.parametrize("op", PAIRS)
@common.fused_op_cases
def test_the_scaled_op_is_the_op_fed_scaled_values(dtype, index_dtype, mode, decays, op, scale,
                                                   variant):
  # Duplicate indices read through the summed rows, distinct ones through each work item's
  # buffer; "averaged": the ops keeping the moving average in the update's pass.
  averaged = variant == "averaged"
  indices = INDICES["duplicates" if averaged else variant]
  ours, theirs, dtypes = PAIRS[op](dtype, index_dtype, indices, mode, decays, SCALES[scale],
                                   averaged=averaged)
  _assert_same_bits(ours, theirs, dtypes)


@pytest.mark.parametrize("decays", [False, True], ids=["plain", "weight-decay"])
@pytest.mark.parametrize("scale", SCALES)
@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
def test_clippy_v2_scaled_is_the_op_fed_scaled_values(dtype, scale, decays):
  accumulator = "float32" if dtype != "float32" else "bfloat16"
  ours, theirs, dtypes = _clippy_pair(
      dtype, np.int32, INDICES["duplicates"], "function", decays, SCALES[scale],
      light=dict(accumulator_dtype=accumulator, stochastic_rounding=dtype != "float32"))
  _assert_same_bits(ours, theirs, dtypes)


@pytest.mark.parametrize("indices", INDICES)
@pytest.mark.parametrize("op", ["lazy_adam", "clippy"])
def test_large_batches_split_over_threads_scale_alike(op, indices):
  # Past the size run on the calling thread: each work item scales into a buffer of its own.
  rows, n = 4096, 8192
  rng = np.random.default_rng(3)
  ids = rng.integers(0, rows, size=n) if indices == "duplicates" else rng.permutation(rows)[:n // 2]
  ours, theirs, dtypes = PAIRS[op]("float32", np.int64, ids, "eager", True,
                                   SCALES["factor-divisor"], n_rows=rows)
  _assert_same_bits(ours, theirs, dtypes)


# ------------------------------------------------------------------------------- the interface

SCALED_OPS = [
    name + "Scaled"
    for name in ops.OP_NAMES
    if "Sparse" in name and ("LazyAdam" in name or "ClippyAdagrad" in name) and
    "Window" not in name and not name.endswith("Scaled")
]


def test_each_sparse_op_but_the_window_ops_has_a_scaled_op():
  assert len(SCALED_OPS) == 12, SCALED_OPS
  assert set(SCALED_OPS) <= set(ops.OP_NAMES)


@pytest.mark.parametrize("name", SCALED_OPS)
def test_a_scaled_op_is_its_op_with_the_scale_last(name):
  # What keeps graphs and generated wrappers of the ops without the scale as they are.
  from tensorflow.python.framework import op_def_registry

  load_library()
  base = op_def_registry.get(name[:-len("Scaled")])
  scaled = op_def_registry.get(name)
  base_inputs = [arg.name for arg in base.input_arg]
  assert [arg.name for arg in scaled.input_arg] == base_inputs + ["grad_scale"]
  assert "grad_scale" not in base_inputs
  assert "num_grad_scales" not in {attr.name for attr in base.attr}


def test_the_wrappers_of_the_ops_without_the_scale_are_unchanged():
  lib = load_library()
  signature = inspect.signature(lib.tf_opt_ops_resource_sparse_apply_lazy_adam)
  assert "grad_scale" not in signature.parameters
  signature = inspect.signature(lib.tf_opt_ops_resource_sparse_apply_lazy_adam_scaled)
  assert "grad_scale" in signature.parameters


@pytest.mark.parametrize("mode", ["eager", "function"])
def test_a_non_scalar_grad_scale_is_refused_before_any_write(mode):
  var, m, v = (tf.Variable(tf.ones((3, 2))) for _ in range(3))

  def update():
    ops.sparse_lazy_adam(var, m, v, tf.ones((1, 2)), [0], beta_1_power=0.9, beta_2_power=0.999,
                         grad_scale=(tf.constant([0.5, 0.5]),))

  with pytest.raises((tf.errors.InvalidArgumentError, ValueError), match="grad_scale"):
    _run(update, None, mode)
  np.testing.assert_array_equal(var.numpy(), np.ones((3, 2), np.float32))


def test_more_than_two_grad_scales_are_refused():
  var, accum = tf.Variable(tf.ones((3, 2))), tf.Variable(tf.ones((3, 2)))
  with pytest.raises(ValueError, match="grad_scale= is"):
    ops.sparse_clippy_adagrad(var, accum, tf.ones((1, 2)), [0], grad_scale=(1.0, 2.0, 3.0))
  lib = load_library()
  with pytest.raises((tf.errors.InvalidArgumentError, ValueError), match="num_grad_scales = 3"):
    tf.function(lambda: lib.tf_opt_ops_resource_sparse_apply_clippy_adagrad_scaled(
        var=var.handle, accum=accum.handle, lr=0.1, epsilon=1e-7, variable_relative_threshold=0.1,
        accumulator_relative_threshold=0.0, absolute_threshold=1e-7, grad=tf.ones(
            (1, 2)), indices=[0], grad_scale=[1.0, 2.0, 3.0]))()
  np.testing.assert_array_equal(var.numpy(), np.ones((3, 2), np.float32))


def test_the_clip_attr_defaults_to_no_clip():
  # Graphs written before the clip range load unchanged: the attr has a default.
  from tensorflow.python.framework import op_def_registry

  load_library()
  for name in SCALED_OPS:
    attr = {a.name: a for a in op_def_registry.get(name).attr}["clip_grad_values"]
    assert attr.type == "bool" and attr.default_value.b is False, name


def test_a_clip_range_is_two_bounds():
  var, accum = tf.Variable(tf.ones((3, 2))), tf.Variable(tf.ones((3, 2)))
  with pytest.raises(ValueError, match="grad_clip= is"):
    ops.sparse_clippy_adagrad(var, accum, tf.ones((1, 2)), [0], grad_clip=(1.0,))
  lib = load_library()
  for grad_scale in ([1.0], [1.0, 2.0, 3.0, 4.0, 5.0]):
    with pytest.raises((tf.errors.InvalidArgumentError, ValueError),
                       match=f"num_grad_scales = {len(grad_scale)} with clip_grad_values = true"):
      tf.function(
          lambda grad_scale=grad_scale: lib.tf_opt_ops_resource_sparse_apply_clippy_adagrad_scaled(
              var=var.handle, accum=accum.handle, lr=0.1, epsilon=1e-7, variable_relative_threshold=
              0.1, accumulator_relative_threshold=0.0, absolute_threshold=1e-7, grad=tf.ones(
                  (1, 2)), indices=[0], grad_scale=grad_scale, clip_grad_values=True))()
  np.testing.assert_array_equal(var.numpy(), np.ones((3, 2), np.float32))


def test_window_ops_take_no_scale():
  var, m, v, accumulator = (tf.Variable(tf.ones((3, 2))) for _ in range(4))
  row_ids, row_count = tf.Variable(tf.zeros([3], tf.int32)), tf.Variable(0)
  with pytest.raises(ValueError, match="no window op takes grad_scale"):
    ops.sparse_lazy_adam(var, m, v, tf.ones((1, 2)), tf.constant([0]), beta_1_power=0.9,
                         beta_2_power=0.999, window=(accumulator, row_ids, row_count, 2),
                         grad_scale=(0.5,))


# --------------------------------------------------------------------- the divide, swept

# clipnorm's divide where the op reads each value (a row at a time, vectorized, with its tails):
# the quotients of every kind of value by every kind of divisor, the bits of the op fed the
# values TensorFlow divided. LazyAdam with beta_1 = 0 stores each gradient value read as m.
SWEEP_ROWS = 1024  # distinct rows: read through a work item's buffer, a row at a time


def _sweep_divisors(rng, factor):
  near_powers_of_two = [
      np.nextafter(np.float32(2.0)**k, np.float32(direction))
      for k in range(-126, 127, 9)
      for direction in (0.0, np.inf)
  ] + [np.float32(2.0)**k for k in (-126, -100, -1, 0, 1, 60, 126, 127)]
  special = [
      factor, 1.0, 1.3, 7.77, -2.5, 3.4e38, 1e-38, 1e-40, 1e38, 0.0, -0.0, np.inf, np.nan, -0.125,
      -1024.0, 32768.0, 2.0**-149
  ]
  any_bits = rng.integers(0, 2**32, size=12, dtype=np.uint64).astype(np.uint32).view(np.float32)
  return np.array(special + near_powers_of_two + list(any_bits), np.float32)


def _sweep_values(rng, divisor, factor):
  """SWEEP_ROWS rows of 128, each row one kind: any bits, normal values over exponents -30..30,
  quotients near the midpoint of two floats, exact small quotients, zeros and subnormals,
  infinities and NaNs, power-of-two quotients, gradient-sized values."""
  n = 128
  kinds = []
  with np.errstate(all="ignore"):

    def bits(k):
      return rng.integers(0, 2**32, size=k, dtype=np.uint64).astype(np.uint32)

    def significands(k):
      return np.float32(1.0) + rng.integers(0, 2**23, size=k) * np.float32(2.0**-23)

    kinds.append(lambda: bits(n).view(np.float32))
    kinds.append(lambda: (significands(n) * np.float32(2.0)**rng.integers(-30, 31, size=n) * rng.
                          choice([-1, 1], size=n)).astype(np.float32))

    def near_ties():
      q = (significands(n) * np.float32(2.0)**rng.integers(-20, 21, size=n)).astype(np.float32)
      mid = (q.astype(np.float64) + np.nextafter(q, np.float32(np.inf)).astype(np.float64)) / 2
      a = (mid * np.float64(divisor) / np.float64(factor)).astype(np.float32)
      return np.where(rng.integers(0, 2, size=n) == 1, np.nextafter(a, np.float32(np.inf)), a)

    kinds.append(near_ties)
    kinds.append(lambda: (rng.integers(-1000, 1000, size=n) * divisor / factor).astype(np.float32))
    kinds.append(lambda: np.where(
        rng.integers(0, 4, size=n) == 0,
        np.float32(0.0) * rng.choice([-1, 1], size=n),
        (bits(n) & np.uint32(0x807FFFFF)).view(np.float32)).astype(np.float32))
    kinds.append(
        lambda: rng.choice(np.array([np.inf, -np.inf, np.nan, 1.0, -3.0], np.float32), size=n))
    kinds.append(lambda:
                 (np.float32(2.0)**rng.integers(-30, 31, size=n) * divisor).astype(np.float32))
    kinds.append(lambda: rng.normal(0.0, 1e-3, size=n).astype(np.float32))
    return np.stack([kinds[r % len(kinds)]() for r in range(SWEEP_ROWS)])


def _swept_slots(grad, scaling):
  """The bits of m, v and var after the Scaled op with `scaling`, and after the op fed the
  values scaled first (LazyAdam with beta_1 = 0 stores each gradient value read as m)."""
  indices = tf.constant(np.arange(SWEEP_ROWS), tf.int64)
  slots = []
  for scaled in (True, False):
    var, m, v = (tf.Variable(tf.zeros((SWEEP_ROWS, 128))) for _ in range(3))
    ops.sparse_lazy_adam(var, m, v, grad if scaled else _prescaled(grad, scaling), indices,
                         beta_1_power=0.5, beta_2_power=0.5, lr=0.01, beta_1=0.0, beta_2=0.999,
                         epsilon=1e-7, **(scaling if scaled else {}))
    slots.append([x.numpy().view(np.uint32) for x in (m, v, var)])
  return zip(*slots)


@pytest.mark.parametrize("factor", [1.0, 0.7])
def test_the_divide_swept_over_values_and_divisors_is_the_divide(factor):
  rng = np.random.default_rng(11)
  divisors = _sweep_divisors(rng, factor)
  pairs = 0
  for divisor in divisors:
    grad = tf.constant(_sweep_values(rng, divisor, factor))
    scaling = dict(grad_scale=(tf.constant(factor, tf.float32), tf.constant(divisor, tf.float32)))
    for ours, theirs in _swept_slots(grad, scaling):
      np.testing.assert_array_equal(ours, theirs, err_msg=f"divisor {divisor!r}")
    pairs += grad.shape[0] * grad.shape[1]
  assert pairs >= 10**7


# ------------------------------------------------------------------------ the clip, swept

# clipvalue's clip where the op reads each value, alone and after clipnorm's scale: every kind
# of value against bounds of every kind, the bits of the op fed tf.clip_by_value's values.
CLIP_BOUNDS = [(-0.5, 0.5), (-1e-3, 2.0), (1.0, 1.0), (2.0, -2.0), (-np.inf, np.inf),
               (-3.4e38, 1e-45), (1e-40, 3e-40), (np.nan, 1.0), (-1.0, np.nan), (-np.inf, -1e30)]


@pytest.mark.parametrize("grad_scale", [(), (0.7, 1.3)], ids=["clip", "factor-divisor-clip"])
def test_the_clip_swept_over_values_and_bounds_is_tf_clip_by_value(grad_scale):
  # Nonzero bounds, or bounds no value ties at zero: where a value of zero meets a bound of
  # zero, the sign TensorFlow's minimum keeps depends on the tensor's size (docs/design.md).
  rng = np.random.default_rng(12)
  for least, greatest in CLIP_BOUNDS:
    grad = tf.constant(_sweep_values(rng, 1.0, 1.0))
    scaling = dict(grad_clip=(tf.constant(least, tf.float32), tf.constant(greatest, tf.float32)))
    if grad_scale:
      scaling["grad_scale"] = tuple(tf.constant(x, tf.float32) for x in grad_scale)
    for ours, theirs in _swept_slots(grad, scaling):
      if np.isnan(least) or np.isnan(greatest):
        # Every value NaN, as TensorFlow's: which NaN (its payload) is the hardware's choice.
        ours, theirs = (np.where(np.isnan(x.view(np.float32)), np.uint32(0x7FC00000), x)
                        for x in (ours, theirs))
      np.testing.assert_array_equal(ours, theirs, err_msg=f"bounds {least!r}, {greatest!r}")
