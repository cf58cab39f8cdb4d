"""The raw ops against the NumPy references (tf_opt_ops.reference), step by step.

Why: see docs/design.md, "The math" and "Invariants".
"""

import json

import ml_dtypes
import numpy as np
import pytest
import tensorflow as tf

from tf_opt_ops import ops
from tf_opt_ops import reference

import common

PYTHON_DIR = common.PYTHON_DIR

DTYPES = [tf.float16, tf.bfloat16, tf.float32, tf.float64]
INDEX_DTYPES = [tf.int32, tf.int64]
MODES = ["eager", "tf.function"]
ROWS, DIM = 12, 5
NUMPY_DTYPES = {
    tf.float16: np.float16,
    tf.bfloat16: ml_dtypes.bfloat16,
    tf.float32: np.float32,
    tf.float64: np.float64,
}


def run(mode, fn, *args, **kwargs):
  if mode == "eager":
    return fn(*args, **kwargs)

  @tf.function
  def traced(*a):
    out = fn(*a, **kwargs)
    return out if isinstance(out, tf.Tensor) else None  # the Adam op has no outputs

  return traced(*args)


def random(shape, dtype, seed, low=-1.0, high=1.0):
  rng = np.random.default_rng(seed)
  return rng.uniform(low, high, shape).astype(NUMPY_DTYPES[dtype])


def variable(values, dtype):
  return tf.Variable(tf.constant(values, dtype))


def numpy_of(v):
  return v.numpy()


def assert_close(actual, expected, dtype):
  """`expected` in the reference's stored form (bfloat16 as bits)."""
  rtol, atol = common.TOLERANCE[dtype.name]
  np.testing.assert_allclose(np.asarray(actual, np.float64),
                             reference.load(expected, dtype.name).astype(np.float64), rtol=rtol,
                             atol=atol)


def reference_lazy_adam(var, m, v, grad, indices, dtype, t, *, lr, beta_1, beta_2, epsilon):
  """Step `t` of the reference with the powers the optimizers pass: beta ** t."""
  return reference.sparse_lazy_adam(var, m, v, grad, indices, dtype.name, lr=lr, beta1=beta_1,
                                    beta2=beta_2, epsilon=epsilon, beta1_power=beta_1**t,
                                    beta2_power=beta_2**t)


def assert_identical(before, variables):
  for b, v in zip(before, variables):
    np.testing.assert_array_equal(b.view(np.uint8), numpy_of(v).view(np.uint8))


# Steps with duplicates, an unsorted order, a row touched then left out, and
# a step that touches a single row.
STEP_INDICES = [[3, 0, 3, 7, 3], [11, 5, 0], [7, 7], [2, 9, 4, 9, 1, 10]]
UNTOUCHED_ROWS = [6, 8]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_sparse_lazy_adam_matches_reference(dtype, index_dtype, mode):
  var = variable(random((ROWS, DIM), dtype, 0), dtype)
  m = variable(random((ROWS, DIM), dtype, 1, 0, 0.1), dtype)
  v = variable(random((ROWS, DIM), dtype, 2, 0, 0.1), dtype)
  hyper = dict(lr=0.01, beta_1=0.9, beta_2=0.999, epsilon=1e-7)
  untouched_before = numpy_of(var)[UNTOUCHED_ROWS].copy()
  for t, indices in enumerate(STEP_INDICES, start=1):
    grad = random((len(indices), DIM), dtype, 10 + t)
    expected = reference_lazy_adam(numpy_of(var), numpy_of(m), numpy_of(v), grad, indices, dtype, t,
                                   **hyper)
    run(mode, ops.sparse_lazy_adam, var, m, v, tf.constant(grad, dtype),
        tf.constant(indices, index_dtype), beta_1_power=0.9**t, beta_2_power=0.999**t, **hyper)
    for actual, want in zip((var, m, v), expected):
      assert_close(numpy_of(actual), want, dtype)
  np.testing.assert_array_equal(numpy_of(var)[UNTOUCHED_ROWS], untouched_before)


def test_lazy_adam_leaves_rows_of_earlier_steps_alone():
  # Plain Adam would keep moving row 0 at step 2 (its m is non-zero); lazy Adam does not.
  var, m, v = (tf.Variable(tf.zeros((3, 2))) for _ in range(3))
  ops.sparse_lazy_adam(var, m, v, tf.ones((1, 2)), [0], beta_1_power=0.9, beta_2_power=0.999)
  row0 = [numpy_of(x)[0].copy() for x in (var, m, v)]
  ops.sparse_lazy_adam(var, m, v, tf.ones((1, 2)), [2], beta_1_power=0.81, beta_2_power=0.998)
  for before, x in zip(row0, (var, m, v)):
    np.testing.assert_array_equal(numpy_of(x)[0], before)
  assert numpy_of(var)[2, 0] != 0


def test_lazy_adam_many_rows_across_threads():
  # Enough rows that the thread pool splits the work; duplicates everywhere.
  rows, dim, n = 5000, 16, 20000
  rng = np.random.default_rng(3)
  indices = rng.integers(0, rows, n)
  var = tf.Variable(rng.standard_normal((rows, dim)).astype(np.float32))
  m = tf.Variable(tf.zeros((rows, dim)))
  v = tf.Variable(tf.zeros((rows, dim)))
  grad = rng.standard_normal((n, dim)).astype(np.float32)
  expected = reference_lazy_adam(numpy_of(var), numpy_of(m), numpy_of(v), grad, indices, tf.float32,
                                 1, lr=0.001, beta_1=0.9, beta_2=0.999, epsilon=1e-7)
  ops.sparse_lazy_adam(var, m, v, grad, indices, beta_1_power=0.9, beta_2_power=0.999)
  for actual, want in zip((var, m, v), expected):
    np.testing.assert_allclose(numpy_of(actual), want, rtol=1e-5, atol=1e-6)


def test_distinct_indices_beyond_one_grouping_chunk():
  # More distinct rows than one grouping chunk (16,384 indices), so they are
  # grouped by partitions: with no duplicates, each row must still meet its
  # own gradient row.
  rows, dim, n = 100_000, 4, 40_000
  rng = np.random.default_rng(5)
  indices = rng.choice(rows, n, replace=False)
  grad = rng.standard_normal((n, dim)).astype(np.float32)
  var, m, v = (tf.Variable(rng.standard_normal((rows, dim)).astype(np.float32)) for _ in range(3))
  expected = reference_lazy_adam(numpy_of(var), numpy_of(m), numpy_of(v), grad, indices, tf.float32,
                                 1, lr=0.001, beta_1=0.9, beta_2=0.999, epsilon=1e-7)
  ops.sparse_lazy_adam(var, m, v, grad, indices, beta_1_power=0.9, beta_2_power=0.999)
  for actual, want in zip((var, m, v), expected):
    np.testing.assert_allclose(numpy_of(actual), want, rtol=1e-5, atol=1e-6)

  table = tf.Variable(rng.standard_normal((rows, dim)).astype(np.float32))
  accum = tf.Variable(rng.uniform(0.1, 1.0, rows).astype(np.float32))
  expected = reference.sparse_rowwise_adagrad(numpy_of(table), numpy_of(accum), grad, indices,
                                              "float32", lr=0.01)
  ops.sparse_rowwise_adagrad(table, accum, grad, indices, lr=0.01, epsilon=1e-8)
  for actual, want in zip((table, accum), expected):
    np.testing.assert_allclose(numpy_of(actual), want, rtol=1e-5, atol=1e-6)


CLIPPY_OPTIONS = [
    dict(),  # the defaults: some elements clip at variable_relative_threshold 0.1
    dict(lr=0.5, variable_relative_threshold=0.4, accumulator_relative_threshold=0.01,
         absolute_threshold=0.1, epsilon=0.0),
    dict(lr=0.5, variable_relative_threshold=0.05, clip_accumulator_update=True),
    dict(lr=0.5, variable_relative_threshold=0.05, use_standard_accumulator_update=True),
    dict(lr=0.001, variable_relative_threshold=100.0),  # no clipping: scale 1
]


def clippy_state(dtype, rows=ROWS):
  var = variable(random((rows, DIM), dtype, 0), dtype)
  accum = variable(random((rows, DIM), dtype, 1, 0.05, 0.5), dtype)
  return var, accum


def scalar_of(scale):
  return float(np.asarray(scale, np.float64))


@pytest.mark.parametrize("options", CLIPPY_OPTIONS, ids=lambda o: ",".join(o) or "defaults")
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_sparse_clippy_adagrad_matches_reference(dtype, index_dtype, mode, options):
  var, accum = clippy_state(dtype)
  untouched_before = [numpy_of(x)[UNTOUCHED_ROWS].copy() for x in (var, accum)]
  scales = []
  for t, indices in enumerate(STEP_INDICES, start=1):
    grad = random((len(indices), DIM), dtype, 20 + t, -3, 3)
    want_var, want_accum, want_scale = reference.sparse_clippy_adagrad(
        numpy_of(var), numpy_of(accum), grad, indices, dtype.name, **options)
    scale = run(mode, ops.sparse_clippy_adagrad, var, accum, tf.constant(grad, dtype),
                tf.constant(indices, index_dtype), **options)
    assert scale.dtype == ops.scalar_dtype(dtype)
    rtol, atol = common.TOLERANCE[dtype.name]
    np.testing.assert_allclose(scalar_of(scale), want_scale, rtol=rtol, atol=atol)
    assert_close(numpy_of(var), want_var, dtype)
    assert_close(numpy_of(accum), want_accum, dtype)
    scales.append(scalar_of(scale))
  for before, x in zip(untouched_before, (var, accum)):
    np.testing.assert_array_equal(numpy_of(x)[UNTOUCHED_ROWS], before)
  if options.get("variable_relative_threshold") == 100.0:
    assert scales == [1.0] * len(scales)
  else:
    assert min(scales) < 1.0  # the case really clips


@pytest.mark.parametrize("options", CLIPPY_OPTIONS, ids=lambda o: ",".join(o) or "defaults")
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_dense_clippy_adagrad_matches_reference(dtype, mode, options):
  shape = (3, 4, 700)  # rank 3, and more elements than one parallel block
  var = variable(random(shape, dtype, 0), dtype)
  accum = variable(random(shape, dtype, 1, 0.05, 0.5), dtype)
  for t in range(1, 4):
    grad = random(shape, dtype, 30 + t, -3, 3)
    grad.flat[::7] = 0  # zero deltas are left out of the scale
    want_var, want_accum, want_scale = reference.clippy_adagrad(numpy_of(var), numpy_of(accum),
                                                                grad, dtype.name, **options)
    scale = run(mode, ops.clippy_adagrad, var, accum, tf.constant(grad, dtype), **options)
    rtol, atol = common.TOLERANCE[dtype.name]
    np.testing.assert_allclose(scalar_of(scale), want_scale, rtol=rtol, atol=atol)
    assert_close(numpy_of(var), want_var, dtype)
    assert_close(numpy_of(accum), want_accum, dtype)


def test_clippy_sparse_equals_dense_with_zero_rows():
  var_s, acc_s = clippy_state(tf.float32)
  var_d, acc_d = clippy_state(tf.float32)
  indices = [1, 4, 1]
  grad = random((3, DIM), tf.float32, 5, -3, 3)
  dense = np.zeros((ROWS, DIM), np.float32)
  np.add.at(dense, indices, grad)
  # Rows with zero gradient get zero deltas: dense Clippy leaves their var
  # alone (its accumulator adds 0), so both agree on every element.
  s_sparse = ops.sparse_clippy_adagrad(var_s, acc_s, grad, indices, lr=0.3)
  s_dense = ops.clippy_adagrad(var_d, acc_d, dense, lr=0.3)
  assert scalar_of(s_sparse) == pytest.approx(scalar_of(s_dense), rel=1e-6)
  np.testing.assert_allclose(numpy_of(var_s), numpy_of(var_d), rtol=1e-6)
  np.testing.assert_allclose(numpy_of(acc_s), numpy_of(acc_d), rtol=1e-6)


@pytest.mark.parametrize("index_dtype", INDEX_DTYPES)
def test_empty_indices_are_a_no_op(index_dtype):
  var, m, v = (variable(random((4, 3), tf.float32, s), tf.float32) for s in range(3))
  before = [numpy_of(x).copy() for x in (var, m, v)]
  empty_grad = tf.zeros((0, 3))
  empty = tf.zeros((0,), index_dtype)
  ops.sparse_lazy_adam(var, m, v, empty_grad, empty, beta_1_power=0.9, beta_2_power=0.999)
  scale = ops.sparse_clippy_adagrad(var, m, empty_grad, empty)
  assert scalar_of(scale) == 1.0
  assert_identical(before, (var, m, v))


def test_nan_and_inf_gradients_propagate_like_tensorflow():
  var, m, v = (tf.Variable(tf.ones((3, 2))) for _ in range(3))
  ops.sparse_lazy_adam(var, m, v, [[np.nan, 1.0]], [1], beta_1_power=0.9, beta_2_power=0.999)
  assert np.isnan(numpy_of(var)[1, 0]) and np.isfinite(numpy_of(var)[1, 1])
  assert np.all(numpy_of(var)[[0, 2]] == 1.0)
  # Clippy: a NaN delta makes the per-variable scale NaN, so every touched
  # element becomes NaN (as TensorFlow Recommenders' ClippyAdagrad does).
  var, accum = tf.Variable(tf.ones((3, 2))), tf.Variable(tf.ones((3, 2)))
  scale = ops.sparse_clippy_adagrad(var, accum, [[np.nan, 1.0]], [1])
  assert np.isnan(scalar_of(scale))
  assert np.all(np.isnan(numpy_of(var)[1])) and np.all(numpy_of(var)[[0, 2]] == 1.0)
  # An infinite gradient clips everything to scale 0; inf * 0 is NaN there only.
  var, accum = tf.Variable(tf.ones((3, 2))), tf.Variable(tf.ones((3, 2)))
  scale = ops.sparse_clippy_adagrad(var, accum, [[np.inf, 1.0]], [1])
  assert scalar_of(scale) == 0.0
  assert np.isnan(numpy_of(var)[1, 0]) and numpy_of(var)[1, 1] == 1.0


_PAST_TWO_TO_THE_31 = """
import json, sys
import numpy as np
import tensorflow as tf
from tf_opt_ops import ops

# 2^28 + 1 rows x 8 = 2^31 + 8 elements: row 2^28 starts past int32 range
# even though the index itself fits in int32.
rows, dim = 2**28 + 1, 8
var = tf.Variable(tf.zeros((rows, dim), tf.float16))
accum = tf.Variable(tf.fill((rows, dim), tf.constant(1.0, tf.float16)))
last = rows - 1
scale = ops.sparse_clippy_adagrad(var, accum, tf.ones((1, dim), tf.float16),
                                  tf.constant([last], tf.int32), lr=0.5,
                                  variable_relative_threshold=0.0, absolute_threshold=1.0)
print(json.dumps(dict(
    scale=float(scale.numpy()), last=var[last].numpy().astype(float).tolist(),
    before_last=float(var[last - 1, 0]), first=float(var[0, 0]),
    accum_last=accum[last].numpy().astype(float).tolist())))
"""


@pytest.mark.slow
def test_offsets_past_two_to_the_31_elements():
  # A fresh process: the two 4 GiB tables leave with it, so the suite's own
  # process does not keep their pages (the machine has 24 GiB in all).
  run = common.run_python(_PAST_TWO_TO_THE_31, timeout=600)
  result = json.loads(run.stdout.strip().splitlines()[-1])
  assert result["scale"] == 1.0
  np.testing.assert_allclose(result["last"], [-0.5 / np.sqrt(1.0 + 1e-7)] * 8, rtol=1e-3)
  assert result["before_last"] == 0.0 and result["first"] == 0.0
  assert result["accum_last"] == [2.0] * 8


def test_op_names_carry_the_library_prefix():
  var, m, v = (tf.Variable(tf.zeros((2, 2))) for _ in range(3))

  @tf.function
  def step():
    ops.sparse_lazy_adam(var, m, v, tf.ones((1, 2)), [0], beta_1_power=0.9, beta_2_power=0.999)

  graph = step.get_concrete_function().graph
  assert "TfOptOps>ResourceSparseApplyLazyAdam" in {op.type for op in graph.get_operations()}
  for name in ops.OP_NAMES:
    assert name.startswith("TfOptOps>")


def _reads_alias(var):
  """Whether two dense reads of `var` share its buffer (False in copy-on-read mode)."""
  first, second = var.read_value(), var.read_value()
  return np.asarray(first).ctypes.data == np.asarray(second).ctypes.data


def test_sparse_updates_keep_dense_reads_free_and_reads_held_unchanged():
  # TensorFlow's sparse ops put a variable in copy-on-read mode, where each dense
  # read copies the whole buffer (Keras 3's Embedding reads densely every step).
  # Ours update in place while nothing aliases the buffer.
  var, m, v = (tf.Variable(tf.ones((1000, 4))) for _ in range(3))
  accum = tf.Variable(tf.fill((1000, 4), 0.1))
  ops.sparse_lazy_adam(var, m, v, tf.ones((2, 4)), [1, 3], beta_1_power=0.9, beta_2_power=0.999)
  ops.sparse_clippy_adagrad(var, accum, tf.ones((2, 4)), [1, 3])
  assert _reads_alias(var) and _reads_alias(m) and _reads_alias(v) and _reads_alias(accum)
  # A read alive across an update keeps its values: the update copies the buffer
  # once, then the variable is in copy-on-read mode, as TensorFlow's ops leave it.
  held = var.read_value()
  before = np.array(held)
  ops.sparse_lazy_adam(var, m, v, tf.ones((1, 4)), [3], beta_1_power=0.9, beta_2_power=0.999)
  np.testing.assert_array_equal(np.asarray(held), before)
  assert not np.array_equal(numpy_of(var)[3], before[3])
  np.testing.assert_array_equal(numpy_of(var)[[0, 1, 2]], before[[0, 1, 2]])
  assert not _reads_alias(var)
  # A variable in that mode already (TensorFlow's scatter put it there) stays in it.
  scattered = tf.Variable(tf.ones((10, 2)))
  tf.raw_ops.ResourceScatterAdd(resource=scattered.handle, indices=[0], updates=tf.ones((1, 2)))
  ops.sparse_clippy_adagrad(scattered, tf.Variable(tf.ones((10, 2))), tf.ones((1, 2)), [4])
  assert not _reads_alias(scattered)


def test_a_variable_passed_twice_is_updated_in_one_buffer():
  # The alias check runs before any input is taken: taking the first would
  # otherwise look like an alias to the second and split them over two buffers.
  x = tf.Variable(tf.ones((10, 2)))
  ops.sparse_clippy_adagrad(x, x, tf.ones((1, 2)), [0], variable_relative_threshold=1.0)
  after = numpy_of(x)
  assert after[0, 0] != 1.0 and np.all(after[1:] == 1.0)  # row 0 written, in place
  assert _reads_alias(x)
