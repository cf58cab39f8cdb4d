"""Op TfOptOps>ResourceSparseApplyRowwiseAdagrad against reference.sparse_rowwise_adagrad.

The reference is held to FBGEMM's own EXACT_ROWWISE_ADAGRAD by tests/fbgemm/ (make
fbgemm-tests); here the op is held to the reference: bit for bit for float32 and float64
tables, to the storage rounding for float16 and bfloat16 ones; inside XLA
(tf.function(jit_compile=True)) the op's XLA kernel, a custom call into the same CPU update, is
held to the same reference.
"""

import numpy as np
import pytest
import tensorflow as tf
from test_ops import DTYPES
from test_ops import INDEX_DTYPES
from test_ops import MODES
from test_ops import ROWS
from test_ops import STEP_INDICES
from test_ops import UNTOUCHED_ROWS
from test_ops import assert_close
from test_ops import assert_identical
from test_ops import numpy_of
from test_ops import random
from test_ops import run
from test_ops import variable

from tf_opt_ops import ops
from tf_opt_ops import reference

import common

WEIGHT_DECAY_MODES = ("none", "l2", "decoupled")
HYPER = dict(lr=0.05, epsilon=1e-3, weight_decay=0.1)
# test_ops' modes, and the op inside XLA.
RUN_MODES = MODES + ["xla"]


def run_in(mode, fn, *args, **kwargs):
  """test_ops.run, or with mode "xla" inside tf.function(jit_compile=True): the op's XLA kernel."""
  if mode != "xla":
    return run(mode, fn, *args, **kwargs)

  @tf.function(jit_compile=True)
  def compiled(*a):
    fn(*a, **kwargs)

  return compiled(*args)


def accumulator_dtype(dtype):
  return tf.float64 if dtype == tf.float64 else tf.float32


def rowwise_state(dtype, dim, initial_accumulator_value, rows=ROWS):
  var = variable(random((rows, dim), dtype, 0), dtype)
  accum = tf.Variable(
      tf.fill([rows], tf.constant(initial_accumulator_value, accumulator_dtype(dtype))))
  return var, accum


def reference_step(var, accum, grad, indices, dtype, weight_decay_mode, **hyper):
  return reference.sparse_rowwise_adagrad(numpy_of(var), numpy_of(accum), grad, indices, dtype.name,
                                          weight_decay_mode=weight_decay_mode, **hyper)


def assert_accumulator_close(actual, expected, dtype):
  # The accumulator is float32 (float64) for every table: bit for bit where the table's values
  # are; with a 16-bit table the weights it reads (L2) may differ by the table's rounding.
  rtol = 0.0 if dtype in (tf.float32, tf.float64) else common.TOLERANCE[dtype.name][0]
  np.testing.assert_allclose(numpy_of(actual), expected, rtol=rtol, atol=0.0)


@pytest.mark.parametrize("weight_decay_mode", WEIGHT_DECAY_MODES)
@pytest.mark.parametrize("mode", RUN_MODES)
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_matches_reference(dtype, index_dtype, mode, weight_decay_mode):
  # Rows of 70: two whole chunks of the mean's 32 lanes and a part one.
  dim = 70
  var, accum = rowwise_state(dtype, dim, 0.1)
  untouched_before = [numpy_of(x)[UNTOUCHED_ROWS].copy() for x in (var, accum)]
  for t, indices in enumerate(STEP_INDICES, start=1):
    grad = random((len(indices), dim), dtype, 40 + t, -2, 2)
    want_var, want_accum = reference_step(var, accum, grad, indices, dtype, weight_decay_mode,
                                          **HYPER)
    run_in(mode, ops.sparse_rowwise_adagrad, var, accum, tf.constant(grad, dtype),
           tf.constant(indices, index_dtype), weight_decay_mode=weight_decay_mode, **HYPER)
    assert_close(numpy_of(var), want_var, dtype)
    assert_accumulator_close(accum, want_accum, dtype)
  for before, x in zip(untouched_before, (var, accum)):
    np.testing.assert_array_equal(numpy_of(x)[UNTOUCHED_ROWS], before)


@pytest.mark.parametrize("initial_accumulator_value", [0.0, 0.1, 2.5])
@pytest.mark.parametrize("dim", [1, 5, 32, 33])
def test_initial_accumulator_values_and_row_widths(initial_accumulator_value, dim):
  var, accum = rowwise_state(tf.float32, dim, initial_accumulator_value)
  for t, indices in enumerate(STEP_INDICES, start=1):
    grad = random((len(indices), dim), tf.float32, 60 + t)
    want_var, want_accum = reference_step(var, accum, grad, indices, tf.float32, "l2", **HYPER)
    ops.sparse_rowwise_adagrad(var, accum, grad, indices, weight_decay_mode="l2", **HYPER)
    np.testing.assert_array_equal(numpy_of(var), want_var)
    np.testing.assert_array_equal(numpy_of(accum), want_accum)


def test_weight_decay_modes_differ_and_take_fbgemm_numbers():
  # Each mode changes the result (so the cases above test three rules), and FBGEMM's
  # WeightDecayMode numbers name the same modes.
  grad = random((3, 4), tf.float32, 7)
  results = {}
  for name, number in zip(WEIGHT_DECAY_MODES, range(3)):
    for mode in (name, number):
      var, accum = rowwise_state(tf.float32, 4, 0.0)
      ops.sparse_rowwise_adagrad(var, accum, grad, [0, 2, 0], weight_decay_mode=mode, **HYPER)
      results.setdefault(name, []).append(numpy_of(var))
    np.testing.assert_array_equal(*results[name])
  assert not np.array_equal(results["none"][0], results["l2"][0])
  assert not np.array_equal(results["none"][0], results["decoupled"][0])
  assert not np.array_equal(results["l2"][0], results["decoupled"][0])


@pytest.mark.parametrize("mode", ["L2", 3, -1, True, None])
def test_unknown_weight_decay_mode_is_refused(mode):
  var, accum = rowwise_state(tf.float32, 4, 0.0)
  with pytest.raises(ValueError, match="weight_decay_mode"):
    ops.sparse_rowwise_adagrad(var, accum, tf.ones((1, 4)), [0], weight_decay_mode=mode)


def test_epsilon_is_outside_the_square_root():
  # One row, one element, accumulator 0: a = g^2 = 4, step lr * g / (sqrt(4) + eps).
  var = tf.Variable([[1.0]])
  accum = tf.Variable([0.0])
  ops.sparse_rowwise_adagrad(var, accum, [[2.0]], [0], lr=1.0, epsilon=1.0)
  assert numpy_of(accum)[0] == 4.0
  f = np.float32
  assert numpy_of(var)[0, 0] == f(1) - f(2) * (f(1) / f(3))  # in float32, as the kernel


@pytest.mark.parametrize("mode", ["eager", "xla"])
def test_many_rows_across_threads(mode):
  # Enough rows that the thread pool splits the work (TensorFlow's, or XLA's inside XLA);
  # duplicates everywhere.
  rows, dim, n = 5000, 16, 20000
  rng = np.random.default_rng(3)
  indices = rng.integers(0, rows, n)
  var = tf.Variable(rng.standard_normal((rows, dim)).astype(np.float32))
  accum = tf.Variable(tf.fill([rows], 0.1))
  grad = rng.standard_normal((n, dim)).astype(np.float32)
  for weight_decay_mode in WEIGHT_DECAY_MODES:
    want_var, want_accum = reference_step(var, accum, grad, indices, tf.float32, weight_decay_mode,
                                          **HYPER)
    run_in(mode, ops.sparse_rowwise_adagrad, var, accum, tf.constant(grad), tf.constant(indices),
           weight_decay_mode=weight_decay_mode, **HYPER)
    np.testing.assert_array_equal(numpy_of(var), want_var)
    np.testing.assert_array_equal(numpy_of(accum), want_accum)


def test_rank_3_table():
  var = variable(random((6, 3, 4), tf.float32, 0), tf.float32)
  accum = tf.Variable(tf.zeros([6]))
  grad = random((4, 3, 4), tf.float32, 1)
  indices = [5, 0, 5, 2]
  want_var, want_accum = reference_step(var, accum, grad, indices, tf.float32, "decoupled", **HYPER)
  ops.sparse_rowwise_adagrad(var, accum, grad, indices, weight_decay_mode="decoupled", **HYPER)
  np.testing.assert_array_equal(numpy_of(var), want_var)
  np.testing.assert_array_equal(numpy_of(accum), want_accum)


@pytest.mark.parametrize("mode", ["eager", "xla"])
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES)
def test_empty_indices_are_a_no_op(index_dtype, mode):
  var, accum = rowwise_state(tf.float32, 3, 0.1)
  before = [numpy_of(x).copy() for x in (var, accum)]
  run_in(mode, ops.sparse_rowwise_adagrad, var, accum, tf.zeros((0, 3)), tf.zeros(
      (0,), index_dtype), weight_decay_mode="decoupled", **HYPER)
  assert_identical(before, (var, accum))


@pytest.mark.parametrize("mode", ["eager", "xla"])
@pytest.mark.parametrize("bad", [ROWS, -1, 2**40])
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES)
def test_bad_indices_write_nothing(bad, index_dtype, mode):
  if index_dtype == tf.int32 and bad == 2**40:
    bad = 2**31 - 1
  var, accum = rowwise_state(tf.float32, 3, 0.1)
  before = [numpy_of(x).copy() for x in (var, accum)]
  with pytest.raises(tf.errors.InvalidArgumentError, match=r"indices\[2\] = .* is not in"):
    run_in(mode, ops.sparse_rowwise_adagrad, var, accum, tf.ones((4, 3)),
           tf.constant([0, 1, bad, 1], index_dtype))
  assert_identical(before, (var, accum))


# (case, the kernel's error, the shape function's where it rejects the case in a graph first)
BAD_INPUTS = [
    ("accum per element", r"accum holds one value per row of var \(row-wise Adagrad's "
     r"accumulator\).*create accum with shape \[var.shape\[0\]\]", "must be rank 1"),
    ("accum of the table's float16", "accum has dtype half", None),
    ("grad rows of another shape", "grad rows must have the shape", "Dimension 1 in both shapes"),
    ("lr not a scalar", "lr must be a scalar", "must be rank 0"),
]


@pytest.mark.parametrize("mode", RUN_MODES)
@pytest.mark.parametrize("case, kernel_error, graph_error", BAD_INPUTS,
                         ids=[case for case, _, _ in BAD_INPUTS])
def test_bad_inputs_write_nothing(case, kernel_error, graph_error, mode):
  dtype = tf.float16 if "float16" in case else tf.float32
  var = variable(random((ROWS, 3), dtype, 0), dtype)
  accum_shape = [ROWS, 3] if "per element" in case else [ROWS]
  accum = tf.Variable(tf.fill(accum_shape, tf.constant(0.1, dtype)))
  grad = tf.ones((2, 4) if "grad" in case else (2, 3), dtype)
  lr = tf.constant([0.1, 0.1]) if "lr" in case else 0.1
  before = [numpy_of(x).copy() for x in (var, accum)]
  # Inside XLA the kernel's checks run when the step compiles, with the OpKernel's words.
  match = graph_error if mode != "eager" and graph_error else kernel_error
  with pytest.raises((tf.errors.InvalidArgumentError, ValueError), match=match):
    run_in(mode, ops.sparse_rowwise_adagrad, var, accum, grad, tf.constant([0, 1]), lr=lr)
  assert_identical(before, (var, accum))


def test_uninitialized_accumulator_is_refused():
  var, _ = rowwise_state(tf.float32, 3, 0.1)
  handle = tf.raw_ops.VarHandleOp(dtype=tf.float32, shape=[ROWS], shared_name="rowwise_unset")
  with pytest.raises(tf.errors.InvalidArgumentError, match="accum"):
    ops.sparse_rowwise_adagrad(var, handle, tf.ones((1, 3)), [0])


def test_op_is_listed_and_named():
  var, accum = rowwise_state(tf.float32, 2, 0.0)

  @tf.function
  def step():
    ops.sparse_rowwise_adagrad(var, accum, tf.ones((1, 2)), [0])

  graph = step.get_concrete_function().graph
  names = {op.type for op in graph.get_operations()}
  assert "TfOptOps>ResourceSparseApplyRowwiseAdagrad" in names
  assert "TfOptOps>ResourceSparseApplyRowwiseAdagrad" in ops.OP_NAMES


# ------------------------------------------------- stochastic rounding of 16-bit tables
SIXTEEN_BIT = [tf.float16, tf.bfloat16]


@pytest.mark.parametrize("weight_decay_mode", WEIGHT_DECAY_MODES)
@pytest.mark.parametrize("mode", RUN_MODES)
@pytest.mark.parametrize("dtype", SIXTEEN_BIT)
def test_stochastic_rounding_matches_reference_bit_for_bit(dtype, mode, weight_decay_mode):
  # Each step from the op's own state, so that the reference's bits must be the op's (inside
  # XLA too: the XLA kernel takes the rounding from the op's attrs).
  dim = 70
  var, accum = rowwise_state(dtype, dim, 0.1)
  for t, indices in enumerate(STEP_INDICES, start=1):
    grad = random((len(indices), dim), dtype, 40 + t, -2, 2)
    want_var, want_accum = reference_step(var, accum, grad, indices, dtype, weight_decay_mode,
                                          stochastic_rounding=True, seed=1234 + t, **HYPER)
    run_in(mode, ops.sparse_rowwise_adagrad, var, accum, tf.constant(grad, dtype),
           tf.constant(indices, INDEX_DTYPES[t % 2]), weight_decay_mode=weight_decay_mode,
           stochastic_rounding=True, seed=1234 + t, **HYPER)
    np.testing.assert_array_equal(numpy_of(var).view(np.uint16), want_var.view(np.uint16))
    np.testing.assert_array_equal(numpy_of(accum), want_accum)


@pytest.mark.parametrize("dtype", SIXTEEN_BIT)
def test_stochastic_rounding_off_rounds_to_nearest(dtype):
  dim = 33
  var, accum = rowwise_state(dtype, dim, 0.1)
  grad = random((5, dim), dtype, 3)
  indices = [3, 0, 3, 7, 3]
  want_var, _ = reference_step(var, accum, grad, indices, dtype, "none", **HYPER)
  ops.sparse_rowwise_adagrad(var, accum, grad, indices, stochastic_rounding=False, seed=99, **HYPER)
  np.testing.assert_array_equal(numpy_of(var).view(np.uint16), want_var.view(np.uint16))


def test_stochastic_rounding_leaves_float32_and_float64_tables_alone():
  for dtype in (tf.float32, tf.float64):
    results = []
    for stochastic_rounding in (False, True):
      var, accum = rowwise_state(dtype, 9, 0.1)
      ops.sparse_rowwise_adagrad(var, accum, random((3, 9), dtype, 5), [1, 4, 1],
                                 stochastic_rounding=stochastic_rounding, seed=7, **HYPER)
      results.append(numpy_of(var))
    np.testing.assert_array_equal(*results)


@pytest.mark.parametrize("dtype", SIXTEEN_BIT)
def test_seed_changes_the_bits_and_a_rerun_repeats_them(dtype):

  def stored(seed):
    var, accum = rowwise_state(dtype, 64, 0.1)
    ops.sparse_rowwise_adagrad(var, accum, random((4, 64), dtype, 8), [0, 5, 9, 5],
                               stochastic_rounding=True, seed=seed, **HYPER)
    return numpy_of(var).view(np.uint16)

  np.testing.assert_array_equal(stored(1), stored(1))
  differing = np.count_nonzero(stored(1) != stored(2))
  # 3 rows x 64 values, each rounding up or down by a coin weighted by its position.
  assert differing > 20, differing


@pytest.mark.parametrize("dtype", SIXTEEN_BIT)
def test_stochastic_rounding_is_unbiased_over_seeds(dtype):
  # w = 1 and one step of lr (g constant across the row: the step is lr): the float32 result
  # lies between 1 and the 16-bit neighbour below it, nearer 1, so round to nearest gives 1.
  rows, dim, seeds = 4, 256, 32
  lr = 1e-3 if dtype == tf.bfloat16 else 2e-4
  exact = np.float32(1) - np.float32(0.5) * (np.float32(lr) /
                                             (np.sqrt(np.float32(0.25)) + np.float32(1e-8)))
  means = []
  for seed in range(seeds):
    var = tf.Variable(tf.ones((rows, dim), dtype))
    accum = tf.Variable(tf.zeros([rows]))
    ops.sparse_rowwise_adagrad(var, accum, tf.fill((rows, dim), tf.constant(0.5, dtype)),
                               tf.range(rows), lr=lr, stochastic_rounding=True, seed=seed)
    means.append(np.mean(numpy_of(var).astype(np.float64)))
  below = 1 - (2.0**-8 if dtype == tf.bfloat16 else 2.0**-11)  # the neighbour below 1
  p = (1 - exact) / (1 - below)  # the chance of rounding down
  sigma = (1 - below) * np.sqrt(p * (1 - p) / (rows * dim * seeds))
  assert abs(np.mean(means) - exact) < 5 * sigma, (np.mean(means), exact, sigma)
  var = tf.Variable(tf.ones((rows, dim), dtype))
  ops.sparse_rowwise_adagrad(var, tf.Variable(tf.zeros([rows])),
                             tf.fill((rows, dim), tf.constant(0.5, dtype)), tf.range(rows), lr=lr,
                             stochastic_rounding=False)
  assert np.all(numpy_of(var) == 1)  # to nearest: the step is lost


def test_stochastic_rounding_draws_fresh_bits_every_step():
  # 100 steps each below half a bfloat16 ulp: to nearest never moves the table; stochastically
  # it follows the float32 table on average, so the noise is not the same each step.
  rows, dim, lr, steps = 4, 256, 1e-3, 100
  grad = tf.fill((rows, dim), 0.5)
  tables = {}
  for name, dtype, stochastic_rounding in [("float32", tf.float32, False),
                                           ("nearest", tf.bfloat16, False),
                                           ("stochastic", tf.bfloat16, True)]:
    var = tf.Variable(tf.ones((rows, dim), dtype))
    accum = tf.Variable(tf.zeros([rows]))
    for _ in range(steps):
      ops.sparse_rowwise_adagrad(var, accum, tf.cast(grad, dtype), tf.range(rows), lr=lr,
                                 stochastic_rounding=stochastic_rounding, seed=5)
    tables[name] = numpy_of(var).astype(np.float64)
  drift = 1 - tables["float32"].mean()
  assert drift > 0.015  # lr * sum_t 1 / sqrt(t)
  assert np.all(tables["nearest"] == 1)
  # Per element a sum of 100 roundings (each within a 2^-8 gap): std <= 2^-9 * 10 per element,
  # / 32 for the mean of 1024.
  assert abs(tables["stochastic"].mean() - tables["float32"].mean()) < 0.003
